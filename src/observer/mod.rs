//! A live web page of the running system (layer 5, feature `observer`): every actor with its
//! state, where it is parked, its mailbox and counters; the supervision trees; the
//! scheduler threads' utilisation over time; `pg` groups; cluster nodes. Erlang's
//! `observer`, in a browser, served by smarm's own sockets from actors of the runtime it
//! shows.
//!
//! # What this module owns
//!
//! - [`Observer`] and its builder: the listening socket, the acceptor actor and one actor per
//!   connection, and how they are stopped.
//! - The HTTP/1.1 subset it speaks (`http`: request heads, keep-alive, limits), the JSON
//!   writer (`json`), and the routes with their JSON documents (`api`).
//! - The page itself (`index.html`, embedded: vanilla JS and CSS, no external assets).
//!
//! The facts all come from the public introspection API ([`crate::info`], [`crate::pg`],
//! [`crate::supervisor::tree`], [`crate::registered`]); the observer adds no state to the
//! runtime and costs nothing until a request arrives.
//!
//! # Routes
//!
//! | Route | Answer |
//! |---|---|
//! | `GET /` | the page |
//! | `GET /api/config` | `{allow_kill, version, node}` |
//! | `GET /api/processes` | every actor: `{pid, name, state, wait, at, mailbox, message_type, resumes, cpu_us, stack_pages, stack_size, links, monitored_by, monitors_unknown, trap_exit, parent, spawned_at, closure_type, groups}` (`links`, `monitored_by`: counts) |
//! | `GET /api/processes?limit=N&offset=M&sort=KEY&order=asc\|desc&filter=TEXT` | one page of them, sorted (`KEY`: pid, name, state, mailbox, resumes, cpu, memory) and filtered (pid, name or closure type): `{total, offset, processes}`; each part optional, `limit` 1 to 100,000 (default 500); what the page uses |
//! | `GET /api/process/<pid>` | one actor (pid as `<0.5.1>`, URL-encoded, or `0.5.1`), with `links` and `monitored_by` as pid lists; 404 if not live |
//! | `GET /api/schedulers` | per thread: `{index, uptime_us, busy_us, idle_us, migrations, parks, wakes, steals, polls, sleeps}` |
//! | `GET /api/registered` | `[{name, pid}]` |
//! | `GET /api/pg` | `[{group, members}]` |
//! | `GET /api/tree` | the root supervisors' trees: `{pid, name, id, type, state, children}` |
//! | `GET /api/nodes` | `{node, nodes}` (feature `cluster`; else `{node: null, nodes: []}`) |
//! | `POST /api/kill/<pid>` | kills the actor: see below |
//!
//! Pids are strings as `Pid` prints them (`"<0.5.1>"`); absent facts are `null`. Every
//! response carries `Content-Length` and `Cache-Control: no-store`. An unknown path gets
//! 404, a known one with another method 405 (with `Allow`).
//!
//! # Security
//!
//! The observer binds loopback by default (`127.0.0.1:0`) and has no authentication: bind
//! another address only on a trusted network. Killing is off unless
//! [`ObserverBuilder::allow_kill`] turns it on, and even then a kill request must carry the
//! header `X-Smarm-Observer: kill` (which a cross-site form or image cannot send: a browser
//! asks the server first, and the observer does not answer CORS) and a `Host` that is an IP
//! address or `localhost` (which a DNS-rebinding page cannot send); anything else gets 403.
//! The page sends both.
//!
//! # Connections
//!
//! One actor per connection, keep-alive (pipelined requests are answered in order). A
//! connection idle for [`IDLE_TIMEOUT`] is closed; a request head over 8 KiB gets 431, a
//! malformed request 400, and both close the connection. Stopping the observer stops the
//! acceptor (closing the listening socket) and every connection actor.
//!
//! ```
//! use std::io::{Read, Write};
//! smarm::run(|| {
//!     let obs = smarm::observer::serve("127.0.0.1:0").unwrap();
//!     let addr = obs.local_addr();
//!     let mut s = smarm::net::TcpStream::connect(addr).unwrap();
//!     s.write_all(b"GET /api/registered HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
//!     let mut reply = String::new();
//!     s.read_to_string(&mut reply).unwrap();
//!     assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"));
//!     assert!(reply.ends_with("\r\n\r\n[]"));
//!     obs.stop();
//! });
//! ```

mod api;
mod http;
mod json;

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::actor::JoinHandle;
use crate::net::{TcpListener, TcpStream};
use crate::process::kill;
use crate::slot_state::Pid;
use crate::task::{current_pid, sleep, try_spawn, Handle};

/// A connection with no complete request for this long is closed (and a response that
/// cannot be written for this long closes it too).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A running observer: its acceptor actor and connection actors. Stopped by
/// [`stop`](Observer::stop) or by dropping it.
#[derive(Debug)]
pub struct Observer {
    addr: SocketAddr,
    acceptor: Option<JoinHandle<()>>,
    state: Arc<State>,
    handle: Handle,
}

/// How to serve the observer: made by [`Observer::builder`].
#[derive(Debug)]
pub struct ObserverBuilder {
    addrs: io::Result<Vec<SocketAddr>>,
    allow_kill: bool,
}

/// Serves the observer on `addr` (Erlang's `observer:start()`, as a web page), with the
/// defaults of [`Observer::builder`] otherwise. Call it from an actor.
///
/// # Errors
/// If `addr` does not resolve or bind, or the call is not made from an actor.
///
/// ```
/// smarm::run(|| {
///     let obs = smarm::observer::serve("127.0.0.1:0").unwrap();
///     assert!(obs.local_addr().ip().is_loopback());
/// });
/// ```
pub fn serve(addr: impl ToSocketAddrs) -> io::Result<Observer> {
    Observer::builder().addr(addr).serve()
}

impl Observer {
    /// A builder: address `127.0.0.1:0` (loopback, any free port), kill not allowed.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let obs = smarm::observer::Observer::builder().allow_kill(true).serve().unwrap();
    ///     assert!(obs.local_addr().ip().is_loopback());
    ///     assert_ne!(obs.local_addr().port(), 0);
    /// });
    /// ```
    pub fn builder() -> ObserverBuilder {
        ObserverBuilder { addrs: Ok(vec![SocketAddr::from(([127, 0, 0, 1], 0))]), allow_kill: false }
    }

    /// The address it listens on (with the port chosen, if `0` was asked for).
    ///
    /// ```
    /// smarm::run(|| {
    ///     let obs = smarm::observer::serve("127.0.0.1:0").unwrap();
    ///     println!("observer: http://{}/", obs.local_addr());
    /// });
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving: the listening socket is closed when this returns, and every open
    /// connection is being stopped (its actor is killed where it waits, closing its socket).
    /// From an actor this parks the actor, from a plain thread it blocks, until the acceptor
    /// has ended. Dropping the observer stops it the same way without waiting.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let obs = smarm::observer::serve("127.0.0.1:0").unwrap();
    ///     let addr = obs.local_addr();
    ///     obs.stop();
    ///     assert!(smarm::net::TcpStream::connect(addr).is_err());
    /// });
    /// ```
    pub fn stop(mut self) {
        self.shut(true);
    }

    /// Stops the acceptor (whose end stops the connections: `StopConnections`), waiting for
    /// its end if `wait`.
    fn shut(&mut self, wait: bool) {
        let Some(acceptor) = self.acceptor.take() else { return };
        // Also refuse connections accepted from now on, before the acceptor's end says so.
        self.state.stopped.store(true, Ordering::Release);
        let pid = acceptor.pid();
        // The kill is sent from an actor of the observer's runtime, whichever thread or
        // runtime drops the observer; a runtime no longer running has stopped it already.
        if self.handle.try_spawn(move || kill(pid)).is_ok() && wait {
            let _ = acceptor.join();
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.shut(false);
    }
}

impl ObserverBuilder {
    /// The address to listen on (the first of its addresses that binds). The default,
    /// `127.0.0.1:0`, is reachable from this machine only.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let obs = smarm::observer::Observer::builder().addr(("127.0.0.1", 0)).serve().unwrap();
    ///     assert!(obs.local_addr().ip().is_loopback());
    /// });
    /// ```
    pub fn addr(mut self, addr: impl ToSocketAddrs) -> ObserverBuilder {
        self.addrs = addr.to_socket_addrs().map(Iterator::collect);
        self
    }

    /// Whether `POST /api/kill/<pid>` may kill actors (default false: 403). See the module
    /// doc's "Security".
    ///
    /// ```
    /// smarm::run(|| {
    ///     let obs = smarm::observer::Observer::builder().allow_kill(true).serve().unwrap();
    ///     obs.stop();
    /// });
    /// ```
    pub fn allow_kill(mut self, allow: bool) -> ObserverBuilder {
        self.allow_kill = allow;
        self
    }

    /// Binds and starts serving: spawns the acceptor actor, which spawns an actor per
    /// connection. Call it from an actor.
    ///
    /// # Errors
    /// If the address did not resolve or does not bind, the acceptor cannot be spawned, or
    /// the call is not made from an actor.
    ///
    /// ```
    /// assert!(smarm::observer::Observer::builder().serve().is_err()); // not in an actor
    /// ```
    pub fn serve(self) -> io::Result<Observer> {
        let handle = Handle::try_current()
            .ok_or_else(|| io::Error::other("smarm::observer: serve must be called from an actor"))?;
        let addrs = self.addrs?;
        let listener = TcpListener::bind(&addrs[..])?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            allow_kill: self.allow_kill,
            stopped: AtomicBool::new(false),
            conns: Mutex::new(HashSet::new()),
        });
        let st = state.clone();
        let acceptor = try_spawn(move || accept_loop(listener, st)).map_err(io::Error::other)?;
        // Named, so that the observer's own table says what it is. (Its connection actors
        // come and go with each browser connection: the closure type names them.) A name
        // already taken is no reason to fail.
        let _ = crate::registry::register(format!("smarm_observer@{addr}"), acceptor.pid());
        Ok(Observer { addr, acceptor: Some(acceptor), state, handle })
    }
}

/// What the acceptor and the connection actors share.
#[derive(Debug)]
struct State {
    allow_kill: bool,
    /// Set once the observer stops; a connection actor that starts after it ends at once.
    stopped: AtomicBool,
    /// The live connection actors, for the acceptor's end to stop. A connection adds itself
    /// under the lock only while `stopped` is false, and `StopConnections` sets `stopped`
    /// under the lock before taking the set: so no connection is missed, whatever the
    /// interleaving. No runtime call is made under the lock (it never parks or yields).
    conns: Mutex<HashSet<Pid>>,
}

/// Stops every connection when the acceptor ends (killed by `Observer::shut`, or the
/// runtime's shutdown).
struct StopConnections(Arc<State>);

impl Drop for StopConnections {
    fn drop(&mut self) {
        let conns = {
            let mut set = self.0.conns.lock();
            // Release: pairs with the Acquire of a connection actor's check, under the lock.
            self.0.stopped.store(true, Ordering::Release);
            std::mem::take(&mut *set)
        };
        for pid in conns {
            kill(pid);
        }
    }
}

/// Accepts connections until killed, one actor each; backs off while the process is out of
/// file descriptors.
fn accept_loop(listener: TcpListener, state: Arc<State>) {
    let _stop = StopConnections(state.clone());
    let mut backoff = Duration::from_millis(5);
    loop {
        match listener.accept() {
            Ok((stream, _peer)) => {
                backoff = Duration::from_millis(5);
                let st = state.clone();
                // A full runtime drops the connection: closing it is the answer.
                let _ = try_spawn(move || connection(stream, st));
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)) => {
                sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            // The peer gave up before we accepted (ECONNABORTED) and the like: next one.
            Err(_) => {}
        }
    }
}

/// Removes a connection actor from the set when it ends.
struct Deregister(Arc<State>, Pid);

impl Drop for Deregister {
    fn drop(&mut self) {
        self.0.conns.lock().remove(&self.1);
    }
}

/// One connection's actor.
fn connection(mut stream: TcpStream, state: Arc<State>) {
    let me = current_pid();
    {
        let mut set = state.conns.lock();
        // Acquire: pairs with the Release in `StopConnections` (also ordered by the lock).
        if state.stopped.load(Ordering::Acquire) {
            return;
        }
        set.insert(me);
    }
    let _deregister = Deregister(state.clone(), me);
    // Any error ends the connection; the peer sees it closed.
    let _ = serve_connection(&mut stream, &state);
}

/// A connection's read buffer to start with; it grows for a large request (up to the
/// largest head plus the largest body) and shrinks back after it.
const BUF: usize = 4096;

/// Answers requests on `stream` until the peer closes it, asks to close it, sends something
/// refused, or stays idle for [`IDLE_TIMEOUT`].
fn serve_connection(stream: &mut TcpStream, state: &State) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    stream.set_write_timeout(Some(IDLE_TIMEOUT))?;
    let mut buf = vec![0u8; BUF];
    let mut filled = 0;
    let mut out = Vec::new();
    loop {
        if filled == buf.len() {
            if buf.len() >= http::MAX_HEAD + http::MAX_BODY {
                return Ok(()); // cannot happen: `parse` refuses before this
            }
            buf.resize((buf.len() * 2).min(http::MAX_HEAD + http::MAX_BODY), 0);
        }
        let n = stream.read(&mut buf[filled..])?;
        if n == 0 {
            return Ok(());
        }
        filled += n;
        // Answer every complete request in the buffer, in order, with one write.
        let mut consumed = 0;
        let mut close = false;
        loop {
            match http::parse(&buf[consumed..filled]) {
                http::Parsed::Request(req) => {
                    let reply = api::route(&req, state.allow_kill);
                    http::respond(&mut out, reply.status, reply.content_type, &reply.body, req.close, reply.extra);
                    consumed += req.len;
                    if req.close {
                        close = true;
                        break;
                    }
                }
                http::Parsed::Partial => break,
                http::Parsed::Refused(status) => {
                    let body = api::error_body(status);
                    http::respond(&mut out, status, api::JSON, body.as_bytes(), true, "");
                    close = true;
                    break;
                }
            }
        }
        if !out.is_empty() {
            stream.write_all(&out)?;
            out.clear();
        }
        if close {
            linger(stream, &mut buf);
            return Ok(());
        }
        buf.copy_within(consumed..filled, 0);
        filled -= consumed;
        if filled == 0 && buf.len() > BUF {
            buf = vec![0u8; BUF];
        }
    }
}

/// How long a closing connection drains what the peer still sends (see [`linger`]).
const LINGER: Duration = Duration::from_secs(1);
/// How much it drains at most.
const LINGER_BYTES: usize = 64 * 1024;

/// Closes our side and drains the peer's for a while before the socket is closed: closing a
/// socket with unread input sends a reset, which can destroy the response just written before
/// the peer reads it (a refused request the server stopped reading midway, requests
/// pipelined after `Connection: close`). As servers' "lingering close".
fn linger(stream: &mut TcpStream, buf: &mut [u8]) {
    if stream.shutdown(std::net::Shutdown::Write).is_err() || stream.set_read_timeout(Some(LINGER)).is_err() {
        return;
    }
    let start = std::time::Instant::now();
    let mut drained = 0;
    while drained < LINGER_BYTES && start.elapsed() < LINGER {
        match stream.read(buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}
