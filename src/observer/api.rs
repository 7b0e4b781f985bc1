//! The observer's routes: which path and method give what, and the JSON documents, written
//! from the introspection API of the calling actor's runtime (the connection's actor).
//! The table of routes and fields is in the module doc of [`super`].

use std::collections::HashSet;

use super::http::{percent_decode, Request, Status};
use super::json::{Arr, Obj};
use crate::info::{self, ProcessInfo, ProcessState};
use crate::slot_state::Pid;
use crate::supervisor::{self, ChildState, ChildType, SupTree, SupervisorRef};

/// The page.
const INDEX_HTML: &str = include_str!("index.html");

pub(super) const JSON: &str = "application/json";
const HTML: &str = "text/html; charset=utf-8";

/// The page's only sources are itself: inline script and style, requests to this server.
const PAGE_HEADERS: &str = "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:\r\n";

/// A response to write.
pub(super) struct Reply {
    pub(super) status: Status,
    pub(super) content_type: &'static str,
    pub(super) body: Vec<u8>,
    /// Extra header lines (`Name: value\r\n` each).
    pub(super) extra: &'static str,
}

impl Reply {
    fn json(body: String) -> Reply {
        Reply { status: Status::Ok, content_type: JSON, body: body.into_bytes(), extra: "" }
    }

    fn error(status: Status, why: &str) -> Reply {
        let mut s = String::new();
        Obj::new(&mut s).str("error", why);
        Reply { status, content_type: JSON, body: s.into_bytes(), extra: "" }
    }
}

/// The JSON body of a refusal (`{"error": "..."}`).
pub(super) fn error_body(status: Status) -> String {
    let why = match status {
        Status::HeadTooLarge => "request head too large",
        Status::PayloadTooLarge => "request body too large",
        _ => "malformed request",
    };
    let mut s = String::new();
    Obj::new(&mut s).str("error", why);
    s
}

/// The method a route takes.
#[derive(Clone, Copy)]
enum Method {
    Get,
    Post,
}

/// None if `req` uses `m`, else the 405 to answer.
fn only(req: &Request<'_>, m: Method) -> Option<Reply> {
    let (name, allow) = match m {
        Method::Get => ("GET", "Allow: GET\r\n"),
        Method::Post => ("POST", "Allow: POST\r\n"),
    };
    (req.method != name).then(|| Reply { extra: allow, ..Reply::error(Status::MethodNotAllowed, "method not allowed") })
}

/// The answer to `req`.
pub(super) fn route(req: &Request<'_>, allow_kill: bool) -> Reply {
    let get = |body: fn() -> String| only(req, Method::Get).unwrap_or_else(|| Reply::json(body()));
    match req.path {
        "/" | "/index.html" => only(req, Method::Get).unwrap_or(Reply {
            status: Status::Ok,
            content_type: HTML,
            body: INDEX_HTML.as_bytes().to_vec(),
            extra: PAGE_HEADERS,
        }),
        "/api/config" => {
            let mut s = String::new();
            let mut o = Obj::new(&mut s);
            o.bool("allow_kill", allow_kill).str("version", env!("CARGO_PKG_VERSION"));
            o.opt_str("node", node().as_deref());
            o.end();
            only(req, Method::Get).unwrap_or_else(|| Reply::json(s))
        }
        "/api/processes" => only(req, Method::Get).unwrap_or_else(|| processes_page(req.query)),
        "/api/schedulers" => get(schedulers),
        "/api/registered" => get(registered),
        "/api/pg" => get(pg),
        "/api/tree" => get(tree),
        "/api/nodes" => get(nodes),
        "/api/sites" => get(sites),
        path => {
            if let Some(pid) = path.strip_prefix("/api/process/") {
                only(req, Method::Get).unwrap_or_else(|| process(pid))
            } else if let Some(pid) = path.strip_prefix("/api/kill/") {
                only(req, Method::Post).unwrap_or_else(|| kill(req, pid, allow_kill))
            } else {
                Reply::error(Status::NotFound, "no such route")
            }
        }
    }
}

/// A pid from a path segment (`%3C0.5.1%3E`, `<0.5.1>` or `0.5.1`).
fn pid_of(segment: &str) -> Option<Pid> {
    info::parse_pid(&percent_decode(segment)?)
}

fn process(segment: &str) -> Reply {
    let Some(pid) = pid_of(segment) else {
        return Reply::error(Status::BadRequest, "not a local pid");
    };
    match info::process_info(pid) {
        Some(p) => {
            let mut s = String::new();
            process_obj(&mut s, &p, true);
            Reply::json(s)
        }
        None => Reply::error(Status::NotFound, "no such process"),
    }
}

fn kill(req: &Request<'_>, segment: &str, allow_kill: bool) -> Reply {
    if !allow_kill {
        return Reply::error(Status::Forbidden, "kill is not allowed (ObserverBuilder::allow_kill)");
    }
    if req.observer_header != Some("kill") {
        return Reply::error(Status::Forbidden, "a kill request needs the header X-Smarm-Observer: kill");
    }
    if !req.host.is_some_and(host_is_address) {
        return Reply::error(Status::Forbidden, "a kill request needs a Host that is an IP address or localhost");
    }
    let Some(pid) = pid_of(segment) else {
        return Reply::error(Status::BadRequest, "not a local pid");
    };
    if info::process_info(pid).is_none() {
        return Reply::error(Status::NotFound, "no such process");
    }
    if pid == crate::task::current_pid() {
        return Reply::error(Status::BadRequest, "the observer connection cannot kill itself");
    }
    crate::process::kill(pid);
    let mut s = String::new();
    Obj::new(&mut s).display("killed", pid);
    Reply::json(s)
}

/// A `Host` header naming an IP address or `localhost` (with or without a port): what a
/// browser sends for a page it reached by address, and never for one reached by a domain
/// name that an attacker controls (DNS rebinding).
fn host_is_address(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => return rest.split_once(']').is_some_and(|(ip, _)| ip.parse::<std::net::Ipv6Addr>().is_ok()),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

/// One process; `full`: links and monitors as pid lists, else as counts.
fn process_obj(out: &mut String, p: &ProcessInfo, full: bool) {
    let (state, wait, at) = match p.state {
        ProcessState::Running => ("running", None, None),
        ProcessState::Runnable => ("runnable", None, None),
        ProcessState::Parked { kind, at } => ("parked", Some(kind.name()), Some(at)),
        ProcessState::Exiting => ("exiting", None, None),
    };
    let mut o = Obj::new(out);
    o.display("pid", p.pid).opt_str("name", p.name.as_deref()).str("state", state).opt_str("wait", wait);
    o.opt_display("at", at);
    o.opt_num("mailbox", p.mailbox_len.map(|n| n as u64)).opt_str("message_type", p.message_type);
    o.num("resumes", p.resumes).opt_num("cpu_us", p.cpu_time.map(|d| d.as_micros() as u64));
    o.num("stack_pages", p.stack_pages as u64).num("stack_size", p.stack_size as u64);
    if full {
        o.strs("links", p.links.iter().map(Pid::to_string));
        o.strs("monitored_by", p.monitored_by.iter().map(Pid::to_string));
    } else {
        o.num("links", p.links.len() as u64).num("monitored_by", p.monitored_by.len() as u64);
    }
    o.num("monitors_unknown", p.monitors_unknown as u64).bool("trap_exit", p.trap_exit);
    o.opt_display("parent", p.parent).opt_display("spawned_at", p.spawned_at);
    o.opt_str("closure_type", p.closure_type).strs("groups", &p.groups);
    o.end();
}

/// Every process, as an array; or, with a query, one page of them:
/// `?limit=N&offset=M&sort=KEY&order=asc|desc&filter=TEXT` (every part optional; `limit`
/// 1 to [`MAX_PAGE`], default 500), as `{"total", "offset", "processes"}` where `total`
/// counts the processes that pass the filter (a case-insensitive substring of the pid, the
/// registered name or the closure type). `KEY`: pid (default), name, state, mailbox,
/// resumes, cpu, memory (stack pages); the order defaults to ascending for pid and name,
/// descending for the rest.
fn processes_page(query: &str) -> Reply {
    let mut procs = info::processes();
    if query.is_empty() {
        let mut s = String::with_capacity(64 + procs.len() * 400);
        let mut a = Arr::new(&mut s);
        for p in &procs {
            process_obj(a.item(), p, false);
        }
        a.end();
        return Reply::json(s);
    }
    let page = match Page::parse(query) {
        Ok(page) => page,
        Err(why) => return Reply::error(Status::BadRequest, &why),
    };
    if !page.filter.is_empty() {
        procs.retain(|p| page.matches(p));
    }
    procs.sort_by(|a, b| {
        let o = page.sort.cmp(a, b);
        (if page.descending { o.reverse() } else { o }).then_with(|| a.pid.index().cmp(&b.pid.index()))
    });
    let total = procs.len();
    let shown = procs.iter().skip(page.offset).take(page.limit);
    let mut s = String::with_capacity(64 + page.limit.min(total) * 400);
    let mut o = Obj::new(&mut s);
    o.num("total", total as u64).num("offset", page.offset as u64);
    let mut a = Arr::new(o.key("processes"));
    for p in shown {
        process_obj(a.item(), p, false);
    }
    a.end();
    o.end();
    Reply::json(s)
}

/// The largest page of `/api/processes`.
const MAX_PAGE: usize = 100_000;

/// A `/api/processes` page request (see [`processes_page`]).
#[derive(Debug, PartialEq)]
struct Page {
    limit: usize,
    offset: usize,
    sort: SortKey,
    descending: bool,
    /// Lower-case.
    filter: String,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum SortKey {
    Pid,
    Name,
    State,
    Mailbox,
    Resumes,
    Cpu,
    Memory,
}

impl SortKey {
    fn cmp(self, a: &ProcessInfo, b: &ProcessInfo) -> std::cmp::Ordering {
        match self {
            SortKey::Pid => a.pid.index().cmp(&b.pid.index()),
            // Unnamed last, as the page sorts them.
            SortKey::Name => (a.name.is_none(), &a.name).cmp(&(b.name.is_none(), &b.name)),
            SortKey::State => state_name(a).cmp(&state_name(b)),
            SortKey::Mailbox => a.mailbox_len.cmp(&b.mailbox_len),
            SortKey::Resumes => a.resumes.cmp(&b.resumes),
            SortKey::Cpu => a.cpu_time.cmp(&b.cpu_time),
            SortKey::Memory => a.stack_pages.cmp(&b.stack_pages),
        }
    }
}

fn state_name(p: &ProcessInfo) -> (&'static str, &'static str) {
    match p.state {
        ProcessState::Running => ("running", ""),
        ProcessState::Runnable => ("runnable", ""),
        ProcessState::Parked { kind, .. } => ("parked", kind.name()),
        ProcessState::Exiting => ("exiting", ""),
    }
}

impl Page {
    fn parse(query: &str) -> Result<Page, String> {
        let mut page = Page { limit: 500, offset: 0, sort: SortKey::Pid, descending: false, filter: String::new() };
        let mut order = None;
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            // A form-encoded space is `+`.
            let value = percent_decode(&value.replace('+', " ")).ok_or_else(|| format!("bad escape in {key}"))?;
            let number = |max: usize| match value.parse::<usize>() {
                Ok(n) if n <= max => Ok(n),
                _ => Err(format!("{key} must be a number up to {max}")),
            };
            match key {
                "limit" => page.limit = number(MAX_PAGE)?.max(1),
                "offset" => page.offset = number(usize::MAX)?,
                "sort" => {
                    page.sort = match value.as_str() {
                        "pid" => SortKey::Pid,
                        "name" => SortKey::Name,
                        "state" => SortKey::State,
                        "mailbox" => SortKey::Mailbox,
                        "resumes" => SortKey::Resumes,
                        "cpu" => SortKey::Cpu,
                        "memory" => SortKey::Memory,
                        _ => return Err("sort must be one of pid, name, state, mailbox, resumes, cpu, memory".into()),
                    }
                }
                "order" => {
                    order = Some(match value.as_str() {
                        "asc" => false,
                        "desc" => true,
                        _ => return Err("order must be asc or desc".into()),
                    })
                }
                "filter" => page.filter = value.to_lowercase(),
                _ => return Err(format!("unknown parameter {key}")),
            }
        }
        page.descending = order.unwrap_or(!matches!(page.sort, SortKey::Pid | SortKey::Name));
        Ok(page)
    }

    fn matches(&self, p: &ProcessInfo) -> bool {
        p.pid.to_string().contains(&self.filter)
            || p.name.as_deref().is_some_and(|n| n.to_lowercase().contains(&self.filter))
            || p.closure_type.is_some_and(|t| t.to_lowercase().contains(&self.filter))
    }
}

fn schedulers() -> String {
    let mut s = String::new();
    let mut a = Arr::new(&mut s);
    for t in info::schedulers() {
        let mut o = Obj::new(a.item());
        o.num("index", t.index as u64).num("uptime_us", t.uptime.as_micros() as u64);
        o.num("busy_us", t.busy().as_micros() as u64).num("idle_us", t.idle.as_micros() as u64);
        o.num("migrations", t.migrations).num("parks", t.parks).num("wakes", t.wakes);
        o.num("steals", t.steals).num("polls", t.polls).num("sleeps", t.sleeps);
        o.end();
    }
    a.end();
    s
}

/// `profile::site` figures: [{name, count, total_us, running_us, parked_us}].
fn sites() -> String {
    let mut s = String::new();
    let mut a = Arr::new(&mut s);
    for t in crate::profile::sites() {
        let mut o = Obj::new(a.item());
        o.str("name", t.name).num("count", t.count).num("total_us", t.total.as_micros() as u64);
        o.opt_num("running_us", t.running.map(|d| d.as_micros() as u64));
        o.opt_num("parked_us", t.parked.map(|d| d.as_micros() as u64));
        o.end();
    }
    a.end();
    s
}

fn registered() -> String {
    let mut s = String::new();
    let mut a = Arr::new(&mut s);
    for (name, pid) in info::registered() {
        Obj::new(a.item()).str("name", &name).display("pid", pid);
    }
    a.end();
    s
}

fn pg() -> String {
    let mut s = String::new();
    let mut a = Arr::new(&mut s);
    for group in crate::pg::which_groups() {
        let members = crate::pg::members(&group);
        Obj::new(a.item()).str("group", &group).strs("members", members.iter().map(Pid::to_string));
    }
    a.end();
    s
}

/// The trees of the root supervisors: every live supervisor's tree, less those nested in
/// another's.
fn tree() -> String {
    // `from_pid` tells a supervisor by its mailbox's type, without a request: it never waits
    // on an actor of another kind.
    let trees: Vec<SupTree> = info::processes()
        .iter()
        .filter(|p| SupervisorRef::from_pid(p.pid).is_ok())
        .filter_map(|p| supervisor::tree(p.pid).ok())
        .collect();
    let mut nested = HashSet::new();
    for t in &trees {
        descendants(t, &mut nested);
    }
    let mut s = String::new();
    let mut a = Arr::new(&mut s);
    for t in trees.iter().filter(|t| t.pid.is_some_and(|p| !nested.contains(&p))) {
        tree_obj(a.item(), t);
    }
    a.end();
    s
}

fn descendants(t: &SupTree, into: &mut HashSet<Pid>) {
    for c in &t.children {
        into.extend(c.pid);
        descendants(c, into);
    }
}

fn tree_obj(out: &mut String, t: &SupTree) {
    let mut o = Obj::new(out);
    o.opt_display("pid", t.pid).opt_str("name", t.name.as_deref()).opt_str("id", t.id.as_deref());
    o.str(
        "type",
        match t.child_type {
            ChildType::Worker => "worker",
            ChildType::Supervisor => "supervisor",
        },
    );
    o.str(
        "state",
        match t.state {
            ChildState::Running(_) => "running",
            ChildState::Restarting => "restarting",
            ChildState::Undefined => "undefined",
        },
    );
    let mut a = Arr::new(o.key("children"));
    for c in &t.children {
        tree_obj(a.item(), c);
    }
    a.end();
    o.end();
}

#[cfg(feature = "cluster")]
fn node() -> Option<String> {
    crate::cluster::node()
}

#[cfg(not(feature = "cluster"))]
fn node() -> Option<String> {
    None
}

fn nodes() -> String {
    #[cfg(feature = "cluster")]
    let connected = crate::cluster::nodes();
    #[cfg(not(feature = "cluster"))]
    let connected: Vec<String> = Vec::new();
    let mut s = String::new();
    Obj::new(&mut s).opt_str("node", node().as_deref()).strs("nodes", &connected);
    s
}

#[cfg(test)]
mod tests {
    use super::{host_is_address, Page, SortKey};

    #[test]
    fn page_queries_parse_and_bad_ones_are_refused() {
        let p = Page::parse("limit=20&offset=40&sort=mailbox&filter=My+Server%21").unwrap();
        assert_eq!(
            p,
            Page { limit: 20, offset: 40, sort: SortKey::Mailbox, descending: true, filter: "my server!".into() }
        );
        let p = Page::parse("sort=name").unwrap();
        assert_eq!((p.limit, p.sort, p.descending), (500, SortKey::Name, false));
        assert!(Page::parse("sort=cpu&order=asc").is_ok_and(|p| !p.descending));
        for bad in ["limit=x", "limit=100001", "sort=size", "order=up", "page=2", "filter=%zz", "offset=-1"] {
            assert!(Page::parse(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn kill_hosts_must_be_addresses_or_localhost() {
        for ok in ["127.0.0.1:8080", "127.0.0.1", "localhost:1", "LOCALHOST", "[::1]:80", "[::1]", "10.0.0.2:9"] {
            assert!(host_is_address(ok), "{ok}");
        }
        for bad in ["evil.example:8080", "evil.example", "127.0.0.1.evil.example:80", "[evil]:80", ""] {
            assert!(!host_is_address(bad), "{bad}");
        }
    }
}
