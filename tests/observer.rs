//! `smarm::observer` over plain HTTP: every JSON endpoint, from a std `TcpStream` on a
//! blocking-pool thread while the runtime runs (so the client never parks a scheduler
//! thread). The JSON is read with a small parser of its own below, which also checks that
//! every document is well-formed.

#![cfg(feature = "observer")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use smarm::observer::{Observer, ObserverBuilder};
use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags};
use smarm::DownReason;

// ---- a tiny JSON reader ----

#[derive(Debug, Clone, PartialEq)]
enum J {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    fn get(&self, key: &str) -> &J {
        match self {
            J::Obj(m) => {
                m.iter().find(|(k, _)| k == key).map(|(_, v)| v).unwrap_or_else(|| panic!("no key {key:?} in {self:?}"))
            }
            _ => panic!("not an object: {self:?}"),
        }
    }
    fn has(&self, key: &str) -> bool {
        matches!(self, J::Obj(m) if m.iter().any(|(k, _)| k == key))
    }
    fn str(&self) -> &str {
        match self {
            J::Str(s) => s,
            _ => panic!("not a string: {self:?}"),
        }
    }
    fn opt_str(&self) -> Option<&str> {
        match self {
            J::Null => None,
            J::Str(s) => Some(s),
            _ => panic!("not a string or null: {self:?}"),
        }
    }
    fn num(&self) -> f64 {
        match self {
            J::Num(n) => *n,
            _ => panic!("not a number: {self:?}"),
        }
    }
    fn arr(&self) -> &[J] {
        match self {
            J::Arr(v) => v,
            _ => panic!("not an array: {self:?}"),
        }
    }
    fn strs(&self) -> Vec<&str> {
        self.arr().iter().map(J::str).collect()
    }
}

fn parse_json(s: &str) -> J {
    let b = s.as_bytes();
    let mut i = 0;
    let v = value(b, &mut i);
    ws(b, &mut i);
    assert_eq!(i, b.len(), "trailing bytes after the JSON value in {s:?}");
    v
}

fn ws(b: &[u8], i: &mut usize) {
    while *i < b.len() && b[*i].is_ascii_whitespace() {
        *i += 1;
    }
}

fn expect(b: &[u8], i: &mut usize, lit: &str) {
    assert!(b[*i..].starts_with(lit.as_bytes()), "expected {lit:?} at {}", *i);
    *i += lit.len();
}

fn value(b: &[u8], i: &mut usize) -> J {
    ws(b, i);
    match b[*i] {
        b'n' => {
            expect(b, i, "null");
            J::Null
        }
        b't' => {
            expect(b, i, "true");
            J::Bool(true)
        }
        b'f' => {
            expect(b, i, "false");
            J::Bool(false)
        }
        b'"' => J::Str(string(b, i)),
        b'[' => {
            *i += 1;
            let mut v = Vec::new();
            ws(b, i);
            if b[*i] == b']' {
                *i += 1;
                return J::Arr(v);
            }
            loop {
                v.push(value(b, i));
                ws(b, i);
                match b[*i] {
                    b',' => *i += 1,
                    b']' => {
                        *i += 1;
                        return J::Arr(v);
                    }
                    c => panic!("unexpected {:?} in an array", c as char),
                }
            }
        }
        b'{' => {
            *i += 1;
            let mut m = Vec::new();
            ws(b, i);
            if b[*i] == b'}' {
                *i += 1;
                return J::Obj(m);
            }
            loop {
                ws(b, i);
                let k = string(b, i);
                ws(b, i);
                expect(b, i, ":");
                m.push((k, value(b, i)));
                ws(b, i);
                match b[*i] {
                    b',' => *i += 1,
                    b'}' => {
                        *i += 1;
                        return J::Obj(m);
                    }
                    c => panic!("unexpected {:?} in an object", c as char),
                }
            }
        }
        _ => {
            let start = *i;
            while *i < b.len() && (b[*i] == b'-' || b[*i] == b'.' || b[*i].is_ascii_alphanumeric()) {
                *i += 1;
            }
            J::Num(std::str::from_utf8(&b[start..*i]).unwrap().parse().expect("a number"))
        }
    }
}

fn string(b: &[u8], i: &mut usize) -> String {
    expect(b, i, "\"");
    let mut out = Vec::new();
    loop {
        let c = b[*i];
        *i += 1;
        match c {
            b'"' => return String::from_utf8(out).expect("UTF-8 string"),
            b'\\' => {
                let e = b[*i];
                *i += 1;
                match e {
                    b'"' => out.push(b'"'),
                    b'\\' => out.push(b'\\'),
                    b'/' => out.push(b'/'),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'u' => {
                        let hex = std::str::from_utf8(&b[*i..*i + 4]).unwrap();
                        *i += 4;
                        let c = char::from_u32(u32::from_str_radix(hex, 16).unwrap()).expect("a BMP scalar");
                        out.extend_from_slice(c.to_string().as_bytes());
                    }
                    e => panic!("bad escape \\{}", e as char),
                }
            }
            c if c < 0x20 => panic!("unescaped control character {c:#x} in a JSON string"),
            c => out.push(c),
        }
    }
}

#[test]
fn the_test_json_reader_reads_what_it_should() {
    let v = parse_json(r#" {"a": [1, -2.5, null, true], "b": "x\"\\\n\u0041é", "c": {}} "#);
    assert_eq!(v.get("a").arr().len(), 4);
    assert_eq!(v.get("b").str(), "x\"\\\nAé");
}

// ---- a tiny HTTP client ----

struct Response {
    status: u16,
    head: String,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.split("\r\n").skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
    fn json(&self) -> J {
        assert_eq!(self.header("content-type"), Some("application/json"), "{}", self.head);
        parse_json(&self.body)
    }
}

/// Reads one response (framed by its Content-Length, which every response must carry).
fn read_response(s: &mut TcpStream) -> Response {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut byte).expect("read head");
        assert_eq!(n, 1, "connection closed inside a response head: {:?}", String::from_utf8_lossy(&buf));
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).expect("UTF-8 head");
    let status = head[9..12].parse().expect("status code");
    let mut r = Response { status, head, body: String::new() };
    let len: usize = r.header("content-length").expect("every response has Content-Length").parse().unwrap();
    assert_eq!(r.header("cache-control"), Some("no-store"), "{}", r.head);
    let mut body = vec![0; len];
    s.read_exact(&mut body).expect("read body");
    r.body = String::from_utf8(body).expect("UTF-8 body");
    r
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// One request on its own connection.
fn send(addr: SocketAddr, raw: &str) -> Response {
    let mut s = connect(addr);
    s.write_all(raw.as_bytes()).unwrap();
    read_response(&mut s)
}

fn get(addr: SocketAddr, path: &str) -> Response {
    send(addr, &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n"))
}

fn post(addr: SocketAddr, path: &str, headers: &str) -> Response {
    send(addr, &format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n{headers}\r\n"))
}

fn enc(pid: smarm::Pid) -> String {
    pid.to_string().replace('<', "%3C").replace('>', "%3E")
}

/// Runs `client` on a blocking-pool thread against an observer made by `builder`, inside a
/// runtime whose root actor first runs `setup` (which returns what the client needs).
fn with_observer<S: Send + 'static>(
    builder: ObserverBuilder,
    setup: impl FnOnce() -> S + Send + 'static,
    client: impl FnOnce(SocketAddr, S) + Send + 'static,
) {
    let rt = smarm::Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    rt.run(move || {
        let s = setup();
        let obs = builder.serve().expect("serve");
        let addr = obs.local_addr();
        if let Err(e) = smarm::spawn_blocking(move || client(addr, s)).join() {
            panic!("client failed: {e}");
        }
        obs.stop();
    })
    .unwrap();
}

/// An actor parked in `sleep`, registered as `name`.
fn napper(name: &str) -> smarm::Pid {
    let h = smarm::spawn(|| loop {
        smarm::sleep(Duration::from_secs(3600));
    });
    smarm::register(name, h.pid()).unwrap();
    while smarm::info::process_info(h.pid()).and_then(|p| p.parked_on()).is_none() {
        smarm::yield_now();
    }
    h.pid()
}

// ---- the tests ----

#[test]
fn processes_lists_a_registered_actor_with_its_wait_kind() {
    with_observer(
        Observer::builder(),
        || napper("napper"),
        |addr, pid| {
            let r = get(addr, "/api/processes");
            assert_eq!(r.status, 200);
            let all = r.json();
            let p = all
                .arr()
                .iter()
                .find(|p| p.get("name").opt_str() == Some("napper"))
                .expect("the registered actor is listed");
            assert_eq!(p.get("pid").str(), pid.to_string());
            assert_eq!(p.get("state").str(), "parked");
            assert_eq!(p.get("wait").str(), "sleep");
            assert!(p.get("at").str().contains("tests/observer.rs:"), "{p:?}");
            assert!(p.get("resumes").num() >= 1.0);
            for key in [
                "mailbox",
                "message_type",
                "cpu_us",
                "stack_pages",
                "stack_size",
                "links",
                "monitored_by",
                "parent",
                "spawned_at",
                "closure_type",
                "groups",
            ] {
                assert!(p.has(key), "no {key} in {p:?}");
            }
            assert_eq!(p.get("links").num(), 0.0); // a count in the list
            assert!(p.get("closure_type").str().contains("napper"), "{p:?}");
        },
    );
}

#[test]
fn process_endpoint_reports_one_actor_by_encoded_or_plain_pid() {
    with_observer(
        Observer::builder(),
        || {
            let pid = napper("linked_napper");
            smarm::link(pid).unwrap();
            smarm::pg::join("observer_test_group", pid).unwrap();
            (pid, smarm::current_pid())
        },
        |addr, (pid, root)| {
            let plain = pid.to_string().trim_matches(['<', '>']).to_string();
            for path in
                [format!("/api/process/{}", enc(pid)), format!("/api/process/{plain}"), format!("/api/process/{pid}")]
            {
                let r = get(addr, &path);
                assert_eq!(r.status, 200, "{path}: {}", r.body);
                let p = r.json();
                assert_eq!(p.get("pid").str(), pid.to_string());
                assert_eq!(p.get("name").str(), "linked_napper");
                assert_eq!(p.get("wait").str(), "sleep");
                assert_eq!(p.get("links").strs(), [root.to_string()]); // full lists here
                assert_eq!(p.get("groups").strs(), ["observer_test_group"]);
                assert_eq!(p.get("parent").str(), root.to_string());
            }
            assert_eq!(get(addr, "/api/process/not-a-pid").status, 400);
            assert_eq!(get(addr, "/api/process/%3C1.2.3%3E").status, 400); // a remote pid's form
        },
    );
}

#[test]
fn a_dead_pid_an_unknown_path_and_a_wrong_method_are_refused() {
    with_observer(
        Observer::builder(),
        || {
            let h = smarm::spawn(|| ());
            let pid = h.pid();
            h.join().unwrap();
            pid
        },
        |addr, dead| {
            let r = get(addr, &format!("/api/process/{}", enc(dead)));
            assert_eq!(r.status, 404, "{}", r.body);
            assert!(r.json().has("error"));
            assert_eq!(get(addr, "/nope").status, 404);
            assert_eq!(get(addr, "/api/processes/extra").status, 404);
            let r = post(addr, "/api/processes", "");
            assert_eq!(r.status, 405);
            assert_eq!(r.header("allow"), Some("GET"));
            let r = get(addr, "/api/kill/0.1.1");
            assert_eq!(r.status, 405);
            assert_eq!(r.header("allow"), Some("POST"));
        },
    );
}

#[test]
fn kill_is_forbidden_by_default() {
    with_observer(
        Observer::builder(),
        || napper("survivor"),
        |addr, pid| {
            let r = post(addr, &format!("/api/kill/{}", enc(pid)), "X-Smarm-Observer: kill\r\n");
            assert_eq!(r.status, 403, "{}", r.body);
            assert_eq!(get(addr, "/api/config").json().get("allow_kill"), &J::Bool(false));
            // Still there.
            assert_eq!(get(addr, &format!("/api/process/{}", enc(pid))).status, 200);
        },
    );
}

#[test]
fn kill_works_when_allowed_with_the_observer_header_and_an_address_host() {
    with_observer(
        Observer::builder().allow_kill(true),
        || {
            let h = smarm::spawn(|| loop {
                smarm::sleep(Duration::from_secs(3600));
            });
            let pid = h.pid();
            let (tx, rx) = smarm::channel::oneshot();
            // Report the victim's end to the client.
            smarm::spawn(move || {
                let _ = tx.send(h.join());
            });
            (pid, rx)
        },
        |addr, (pid, ended)| {
            assert_eq!(get(addr, "/api/config").json().get("allow_kill"), &J::Bool(true));
            let path = format!("/api/kill/{}", enc(pid));
            // Without the header (what a cross-site form sends): refused.
            assert_eq!(post(addr, &path, "").status, 403);
            // With a domain name as Host (DNS rebinding): refused.
            let r = send(
                addr,
                &format!(
                    "POST {path} HTTP/1.1\r\nHost: evil.example\r\nX-Smarm-Observer: kill\r\nContent-Length: 0\r\n\r\n"
                ),
            );
            assert_eq!(r.status, 403);
            let r = post(addr, &path, "X-Smarm-Observer: kill\r\n");
            assert_eq!(r.status, 200, "{}", r.body);
            assert_eq!(r.json().get("killed").str(), pid.to_string());
            assert_eq!(ended.recv(), Ok(Err(DownReason::Killed)));
            // Gone once its slot is freed (an ended actor is reported as exiting until then).
            let t = std::time::Instant::now();
            while get(addr, &format!("/api/process/{}", enc(pid))).status != 404 {
                assert!(t.elapsed() < Duration::from_secs(5), "the killed actor is still reported");
                std::thread::sleep(Duration::from_millis(10));
            }
            assert_eq!(post(addr, &path, "X-Smarm-Observer: kill\r\n").status, 404);
        },
    );
}

#[test]
fn a_malformed_request_gets_400_and_the_server_keeps_serving() {
    with_observer(
        Observer::builder(),
        || (),
        |addr, ()| {
            for raw in
                ["GARBAGE\r\n\r\n", "GET /api/processes HTTP/9.9\r\n\r\n", "GET / HTTP/1.1\r\nno colon here\r\n\r\n"]
            {
                let mut s = connect(addr);
                s.write_all(raw.as_bytes()).unwrap();
                let r = read_response(&mut s);
                assert_eq!(r.status, 400, "{raw:?}");
                assert_eq!(r.header("connection"), Some("close"));
                // The connection is closed after it.
                assert_eq!(s.read(&mut [0u8; 16]).unwrap(), 0);
            }
            // A head over 8 KiB: 431.
            let mut s = connect(addr);
            let big = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(9000));
            let _ = s.write_all(big.as_bytes()); // the server may close before reading it all
            assert_eq!(read_response(&mut s).status, 431);
            // The server still answers.
            assert_eq!(get(addr, "/api/registered").status, 200);
        },
    );
}

#[test]
fn the_server_binds_loopback_by_default_and_needs_an_actor() {
    assert!(Observer::builder().serve().is_err(), "serve outside an actor must fail");
    smarm::run(|| {
        let obs = Observer::builder().serve().unwrap();
        assert!(obs.local_addr().ip().is_loopback());
        assert_ne!(obs.local_addr().port(), 0);
        let obs2 = smarm::observer::serve("127.0.0.1:0").unwrap();
        assert!(obs2.local_addr().ip().is_loopback());
    });
}

#[test]
fn keep_alive_and_pipelined_requests_are_answered_in_order() {
    with_observer(
        Observer::builder(),
        || (),
        |addr, ()| {
            let mut s = connect(addr);
            for _ in 0..3 {
                s.write_all(b"GET /api/config HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
                assert_eq!(read_response(&mut s).status, 200);
            }
            s.write_all(b"GET /api/nodes HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\nGET /api/config HTTP/1.1\r\n\r\n")
                .unwrap();
            assert!(read_response(&mut s).json().has("nodes"));
            assert_eq!(read_response(&mut s).status, 404);
            assert!(read_response(&mut s).json().has("allow_kill"));
            // Connection: close is honoured.
            s.write_all(b"GET /api/config HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
            assert_eq!(read_response(&mut s).status, 200);
            assert_eq!(s.read(&mut [0u8; 16]).unwrap(), 0);
        },
    );
}

#[test]
fn processes_come_in_sorted_filtered_pages_and_the_acceptor_is_named() {
    with_observer(
        Observer::builder(),
        || (0..5).map(|i| napper(&format!("paged_{i}"))).collect::<Vec<_>>(),
        |addr, pids| {
            let all = get(addr, "/api/processes").json();
            let n = all.arr().len();
            assert!(n >= 6, "{n} processes");
            // Filtered by name: the five nappers, in pid order, two at a time.
            let page = |q: &str| {
                let r = get(addr, &format!("/api/processes?{q}"));
                assert_eq!(r.status, 200, "{q}: {}", r.body);
                r.json()
            };
            let first = page("filter=PAGED_&limit=2");
            assert_eq!(first.get("total").num(), 5.0);
            assert_eq!(first.get("offset").num(), 0.0);
            let names = |p: &J| -> Vec<String> {
                p.get("processes").arr().iter().map(|e| e.get("name").str().to_string()).collect()
            };
            assert_eq!(names(&first), ["paged_0", "paged_1"]);
            assert_eq!(names(&page("filter=paged_&limit=2&offset=4")), ["paged_4"]);
            assert!(page("filter=paged_&offset=9").get("processes").arr().is_empty());
            // Sorted by name, descending; by pid, the first listed is the lowest.
            assert_eq!(names(&page("filter=paged_&sort=name&order=desc&limit=1")), ["paged_4"]);
            // (Each request comes on a connection of its own, served by an actor of its own:
            // the count moves between requests, so it is checked within one answer.)
            let by_pid = page("sort=pid&limit=100000");
            assert_eq!(by_pid.get("total").num(), by_pid.get("processes").arr().len() as f64);
            let listed: Vec<&str> = by_pid.get("processes").arr().iter().map(|e| e.get("pid").str()).collect();
            let at = |pid: smarm::Pid| listed.iter().position(|&p| p == pid.to_string()).expect("listed");
            assert!(at(pids[0]) < at(pids[4]));
            // A filter on a pid finds it.
            let one = page(&format!("filter={}", enc(pids[2])));
            assert_eq!(names(&one), ["paged_2"]);
            // Bad queries are refused with a reason.
            for bad in ["limit=0x10", "sort=size", "order=sideways", "nonsense=1", "limit=1000000"] {
                let r = get(addr, &format!("/api/processes?{bad}"));
                assert_eq!(r.status, 400, "{bad}");
                assert!(!r.json().get("error").str().is_empty());
            }
            // The observer's own acceptor is registered under a name that says what it is.
            let reg = get(addr, "/api/registered").json();
            let name = format!("smarm_observer@{addr}");
            assert!(reg.arr().iter().any(|e| e.get("name").str() == name), "{} not in {reg:?}", name);
        },
    );
}

#[test]
fn schedulers_registered_pg_nodes_and_config_have_their_fields() {
    with_observer(
        Observer::builder(),
        || {
            let pid = napper("we\"ird\\name\n\u{1}é");
            smarm::pg::join("observer_pg", pid).unwrap();
            pid
        },
        |addr, pid| {
            let threads = get(addr, "/api/schedulers").json();
            assert_eq!(threads.arr().len(), 2);
            for (i, t) in threads.arr().iter().enumerate() {
                assert_eq!(t.get("index").num(), i as f64);
                for k in
                    ["uptime_us", "busy_us", "idle_us", "migrations", "parks", "wakes", "steals", "polls", "sleeps"]
                {
                    assert!(t.get(k).num() >= 0.0);
                }
                assert!(t.get("busy_us").num() <= t.get("uptime_us").num());
            }
            // The odd name round-trips through the JSON escaping.
            let reg = get(addr, "/api/registered").json();
            let e = reg.arr().iter().find(|e| e.get("pid").str() == pid.to_string()).expect("registered");
            assert_eq!(e.get("name").str(), "we\"ird\\name\n\u{1}é");
            let pg = get(addr, "/api/pg").json();
            let g = pg.arr().iter().find(|g| g.get("group").str() == "observer_pg").expect("group listed");
            assert_eq!(g.get("members").strs(), [pid.to_string()]);
            {
                let _s = smarm::profile::site("observer_test_site");
            }
            let sites = get(addr, "/api/sites").json();
            let site = sites.arr().iter().find(|s| s.get("name").str() == "observer_test_site").expect("site listed");
            assert_eq!(site.get("count").num(), 1.0);
            let nodes = get(addr, "/api/nodes").json();
            assert_eq!(nodes.get("node"), &J::Null);
            assert!(nodes.get("nodes").arr().is_empty());
            let page = get(addr, "/");
            assert_eq!(page.status, 200);
            assert_eq!(page.header("content-type"), Some("text/html; charset=utf-8"));
            assert!(page.body.contains("<table id=\"procs\">"));
        },
    );
}

#[test]
fn tree_lists_root_supervisors_with_nested_children() {
    with_observer(
        Observer::builder(),
        || {
            let worker = |id: &'static str| {
                ChildSpec::worker(id, || {
                    Ok(smarm::spawn_link(|| loop {
                        smarm::recv_signal();
                    })
                    .pid())
                })
            };
            let inner = ChildSpec::supervisor("inner", move || {
                supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![worker("leaf")])
                    .map(|s| s.pid())
                    .map_err(|e| DownReason::Custom(e.to_string()))
            });
            let sup =
                supervisor::start_link(SupFlags::new(Strategy::OneForAll).named("top_sup"), vec![worker("a"), inner])
                    .unwrap();
            sup.pid()
        },
        |addr, sup| {
            let roots = get(addr, "/api/tree").json();
            // Only the root: the nested supervisor is not listed again at the top.
            assert_eq!(roots.arr().len(), 1, "{roots:?}");
            let top = &roots.arr()[0];
            assert_eq!(top.get("pid").str(), sup.to_string());
            assert_eq!(top.get("name").str(), "top_sup");
            assert_eq!(top.get("type").str(), "supervisor");
            let kids = top.get("children").arr();
            assert_eq!(kids.iter().map(|c| c.get("id").str()).collect::<Vec<_>>(), ["a", "inner"]);
            assert_eq!(kids[0].get("type").str(), "worker");
            assert_eq!(kids[0].get("state").str(), "running");
            assert_eq!(kids[1].get("type").str(), "supervisor");
            let leaf = &kids[1].get("children").arr()[0];
            assert_eq!(leaf.get("id").str(), "leaf");
            assert!(leaf.get("children").arr().is_empty());
        },
    );
}

#[test]
fn stop_closes_the_listener_and_open_connections() {
    let rt = smarm::Runtime::builder().threads(2).build().unwrap();
    rt.run(|| {
        let obs = Observer::builder().serve().unwrap();
        let addr = obs.local_addr();
        // An open keep-alive connection, served once.
        let mut s = smarm::spawn_blocking(move || {
            let mut s = connect(addr);
            s.write_all(b"GET /api/config HTTP/1.1\r\n\r\n").unwrap();
            assert_eq!(read_response(&mut s).status, 200);
            s
        })
        .join()
        .unwrap();
        obs.stop();
        let closed = smarm::spawn_blocking(move || {
            // The connection's actor was stopped: EOF (or a reset), not the 30 s idle timeout.
            let t = std::time::Instant::now();
            let eof = matches!(s.read(&mut [0u8; 16]), Ok(0) | Err(_));
            (eof && t.elapsed() < Duration::from_secs(10), TcpStream::connect(addr).is_err())
        })
        .join()
        .unwrap();
        assert_eq!(closed, (true, true));
    })
    .unwrap();
}
