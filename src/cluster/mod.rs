//! Distribution (feature `cluster`): a smarm node is an Erlang node. It registers with EPMD,
//! shakes hands with cookies (handshake version 6, OTP 23+), and exchanges External Term
//! Format messages, so smarm nodes form clusters among themselves *and* with Erlang/Elixir
//! nodes.
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use smarm::cluster::{self, NodeConfig};
//! use smarm::Mailbox;
//!
//! #[derive(Serialize, Deserialize)]
//! #[serde(rename_all = "snake_case")]
//! enum Msg {
//!     Ping(smarm::Pid),
//!     Pong,
//! }
//!
//! smarm::run(|| {
//!     cluster::start(NodeConfig::new("a@127.0.0.1").cookie("secret")).unwrap();
//!     let echo = smarm::spawn_actor(|mb: Mailbox<Msg>| {
//!         mb.accept_remote(); // take messages from other nodes, decoded into Msg
//!         while let Some(Msg::Ping(from)) = mb.recv().into_msg() {
//!             smarm::Addr::<Msg>::remote(from).send(Msg::Pong);
//!         }
//!     });
//!     smarm::register("echo", echo.pid()).unwrap();
//!     // From Erlang: {echo, 'a@127.0.0.1'} ! {ping, self()}, receive pong -> ok end.
//! });
//! ```
//!
//! # What a node does
//!
//! [`start`] (from an actor) binds the distribution listener, registers the node with EPMD
//! (the system `epmd` on port 4369, or `ERL_EPMD_PORT`; when none runs, smarm serves the EPMD
//! protocol itself, as `erl` starts `epmd`; [`Epmd::None`] skips EPMD altogether), and spawns
//! the node's actors: the acceptor, one reader and one writer per connection, and the ticker.
//! They are ordinary actors of the runtime and stop with it.
//!
//! Connections are made on demand, as in Erlang: [`connect`], or the first send to a pid or
//! registered name of a node that is not connected (the message waits for the handshake, and
//! is dropped if it fails). [`nodes()`] lists the connected nodes; [`monitor_nodes`] delivers
//! [`NodeEvent::Up`] before anything else from a new connection and [`NodeEvent::Down`]
//! after everything received on the lost one.
//!
//! # Ticks
//!
//! Every `net_ticktime / 4` the ticker writes a tick (an empty frame) on each connection that
//! had nothing else written in that interval, and counts the intervals in which nothing was
//! received; after 4 silent intervals in a row the connection is taken down. A peer that
//! stops answering (`SIGSTOP`, a cable pulled) is therefore detected between
//! `net_ticktime` and `1.25 * net_ticktime` after its last frame (Erlang's rule and window).
//! The default is OTP's 60 s; both ends should use the same value.
//!
//! # Messages from other nodes
//!
//! A remote message reaches a [`Mailbox<M>`](crate::Mailbox) only if its actor called
//! [`Mailbox::accept_remote`] (for `M: Deserialize`); the term is decoded through the serde
//! mapping of [`term`] on the connection's reader. A term that does not decode into `M`, or is
//! sent to an actor that does not accept remote messages, is dropped, counted
//! ([`Node::dropped`]) and logged; it is never a panic. `Mailbox<RawTerm>` takes any term.
//!
//! # Security
//!
//! The cookie is a shared secret that the handshake proves knowledge of (MD5 challenge and
//! response); it is **not** encryption and not protection on an untrusted network: anyone
//! who can watch the connection sees every message and can take it over, and OTP's own
//! documentation says the distribution protocol is not secure by itself. Without TLS, bind
//! to loopback or a private network. As in OTP, a peer that knows a connected node's name
//! (not the cookie) can make the acceptor drop its existing connection to that node: the
//! protocol's `alive` answer closes the old connection before the new one is authenticated.
//!
//! **TLS** ([`NodeConfig::tls`], rustls): every connection is TLS with mutual certificates
//! signed by the configured CA (by default the certificate must also be valid for the host
//! part of the node name when dialing); the distribution handshake and cookie run inside it.
//! It interoperates with `erl -proto_dist inet_tls -ssl_dist_optfile F` where `F` is
//!
//! ```text
//! [{server, [{certfile, "node.pem"}, {keyfile, "node.key"}, {cacertfile, "ca.pem"},
//!            {verify, verify_peer}, {fail_if_no_peer_cert, true}]},
//!  {client, [{certfile, "node.pem"}, {keyfile, "node.key"}, {cacertfile, "ca.pem"},
//!            {verify, verify_peer}]}].
//! ```
//!
//! Two OTP 25 details: its TLS client checks the server's certificate against the host part
//! of the node name as a DNS name, so a node named `x@127.0.0.1` needs `DNS:127.0.0.1` in its
//! certificate's subjectAltName (an IP entry alone fails); and its distribution defaults to
//! TLS 1.2 and renegotiates after 2^28 records, which rustls refuses (the connection then
//! drops): add `{versions, ['tlsv1.3']}` to both option lists.
//!
//! **Bad input.** Before the handshake completes a peer can make smarm allocate no more than
//! one handshake frame (at most 1 KiB) and intern nothing; each handshake step must complete
//! within the setup time (a peer that drips bytes is dropped). After it, frames are capped by
//! [`NodeConfig::max_frame`] (checked before allocating; a frame's buffer grows only as its
//! bytes arrive), terms are validated (nesting depth, lengths against the bytes present, the
//! tags `eetf` cannot decode safely) before they are decoded, and a malformed, truncated or
//! unknown control message closes the connection with a log line. `tests/cluster_malformed.rs`
//! attacks a node with each of these; `fuzz/` holds cargo-fuzz targets for the term decoder,
//! the handshake and EPMD.

#![allow(clippy::new_without_default)]

mod call;
pub(crate) mod conn;
pub(crate) mod ctrl;
pub(crate) mod epmd;
pub(crate) mod etf;
pub(crate) mod handshake;
pub(crate) mod nodes;
mod pg_dist;
pub(crate) mod remote;
pub mod term;
mod tls;

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use call::{call, call_named};
pub use tls::{TlsConfig, TlsError};
/// The wire codecs, for the fuzz targets and the malformed-input tests. Not a stable API.
#[doc(hidden)]
pub mod __wire {
    pub use super::epmd::{fuzz_epmd, EpmdServer};
    pub use super::etf::{decode_versioned, encode_versioned, EtfError, Limits};
    pub use super::handshake::{
        digest, frame, fuzz_acceptor, fuzz_initiator, read_frame, Acceptor, AcceptorStep, HandshakeError, Initiator,
        InitiatorStep, NodeIdent, Status, OUR_FLAGS, REQUIRED_FLAGS,
    };
}

/// The External Term Format crate smarm uses: build and inspect raw terms with it.
pub use eetf;
pub use eetf::Term;
pub use term::{from_term, to_term, RawTerm, TermError};

use crate::mailbox::{Addr, Mailbox, RemoteTo};
use crate::slot_state::Pid;

use conn::Slot;
use ctrl::Local;

/// How the node is found by others.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Epmd {
    /// Register with the EPMD on this host (port 4369, or `ERL_EPMD_PORT`); when none runs,
    /// serve the EPMD protocol in this process (as `erl` starts `epmd`). Peers are looked up
    /// in the EPMD of their host.
    Auto,
    /// No EPMD: listen on the configured port (the start of [`NodeConfig::ports`]), and reach
    /// every peer at that same port of its host (OTP's `-erl_epmd_port` without EPMD), unless
    /// [`NodeConfig::peer`] gives its address.
    None,
}

/// A node's configuration for [`start`].
#[derive(Clone)]
pub struct NodeConfig {
    name: String,
    cookie: Option<String>,
    listen: IpAddr,
    ports: (u16, u16),
    net_ticktime: Duration,
    setup_time: Duration,
    epmd: Epmd,
    epmd_port: Option<u16>,
    max_frame: usize,
    pub(crate) busy_limit: usize,
    peers: HashMap<String, SocketAddr>,
    quiet: bool,
    tls: Option<TlsConfig>,
}

impl fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeConfig")
            .field("name", &self.name)
            .field("cookie", &self.cookie.as_ref().map(|_| "<secret>"))
            .field("listen", &self.listen)
            .field("ports", &self.ports)
            .field("net_ticktime", &self.net_ticktime)
            .field("epmd", &self.epmd)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// OTP's default `net_ticktime`.
pub const DEFAULT_NET_TICKTIME: Duration = Duration::from_secs(60);
/// OTP's default connection setup time (`net_setuptime`), allowed per handshake step.
pub const DEFAULT_SETUP_TIME: Duration = Duration::from_secs(7);
/// Default cap on one distribution frame after the handshake.
pub const DEFAULT_MAX_FRAME: usize = 64 << 20;
/// Default busy limit of a connection's output buffer (OTP's `dist_buf_busy_limit`, 1 MiB).
pub const DEFAULT_BUSY_LIMIT: usize = 1 << 20;

impl NodeConfig {
    /// A node named `name`: `alive@host` (a long name if `host` has dots, a short name
    /// otherwise, as `erl -name`/`-sname`), or just `alive`, completed with this machine's
    /// short host name. Validated by [`start`].
    pub fn new(name: &str) -> NodeConfig {
        let name = if name.contains('@') { name.to_string() } else { format!("{name}@{}", short_hostname()) };
        NodeConfig {
            name,
            cookie: None,
            listen: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            ports: (0, 0),
            net_ticktime: DEFAULT_NET_TICKTIME,
            setup_time: DEFAULT_SETUP_TIME,
            epmd: Epmd::Auto,
            epmd_port: None,
            max_frame: DEFAULT_MAX_FRAME,
            busy_limit: DEFAULT_BUSY_LIMIT,
            peers: HashMap::new(),
            quiet: false,
            tls: None,
        }
    }

    /// The cookie. Without one, `~/.erlang.cookie` is read as `erl` reads it (and created
    /// with a random cookie, mode 0400, if it does not exist).
    pub fn cookie(mut self, cookie: &str) -> Self {
        self.cookie = Some(cookie.to_string());
        self
    }

    /// The address the distribution listener binds (default: all interfaces, as `erl`).
    pub fn listen(mut self, ip: IpAddr) -> Self {
        self.listen = ip;
        self
    }

    /// The listener's port range, inclusive (OTP's `inet_dist_listen_min`/`max`); the first
    /// free port is taken. Default `(0, 0)`: any port. With [`Epmd::None`] the first port is
    /// the node's fixed port.
    pub fn ports(mut self, min: u16, max: u16) -> Self {
        self.ports = (min, max.max(min));
        self
    }

    /// `net_ticktime` (default 60 s; see the module doc for the detection window).
    pub fn net_ticktime(mut self, t: Duration) -> Self {
        self.net_ticktime = t.max(Duration::from_millis(40));
        self
    }

    /// Time allowed for each step of a handshake (default 7 s, OTP's `net_setuptime`).
    pub fn setup_time(mut self, t: Duration) -> Self {
        self.setup_time = t;
        self
    }

    /// How the node is found ([`Epmd::Auto`] by default).
    pub fn epmd(mut self, mode: Epmd) -> Self {
        self.epmd = mode;
        self
    }

    /// The EPMD port (default: `ERL_EPMD_PORT` if set, else 4369).
    pub fn epmd_port(mut self, port: u16) -> Self {
        self.epmd_port = Some(port);
        self
    }

    /// The largest frame accepted after the handshake (default 64 MiB); a longer one closes
    /// the connection before anything is allocated for it.
    pub fn max_frame(mut self, bytes: usize) -> Self {
        self.max_frame = bytes.max(64);
        self
    }

    /// The busy limit of each connection's output buffer (default 1 MiB, OTP's
    /// `dist_buf_busy_limit`): a process that sends while more than this waits to be written
    /// parks until the writer has taken it.
    pub fn busy_limit(mut self, bytes: usize) -> Self {
        self.busy_limit = bytes;
        self
    }

    /// Distribution over TLS with mutual certificates (see the module doc, "Security"): every
    /// connection, both ways, is TLS; peers must be configured the same way (an `erl` node
    /// with `-proto_dist inet_tls`).
    pub fn tls(mut self, cfg: TlsConfig) -> Self {
        self.tls = Some(cfg);
        self
    }

    /// Reach node `name` at `addr` without asking EPMD.
    pub fn peer(mut self, name: &str, addr: SocketAddr) -> Self {
        self.peers.insert(name.to_string(), addr);
        self
    }

    /// Do not log dropped messages and lost connections to stderr (they are still counted).
    pub fn quiet(mut self, quiet: bool) -> Self {
        self.quiet = quiet;
        self
    }

    fn epmd_port_or_default(&self) -> u16 {
        self.epmd_port.or_else(|| std::env::var("ERL_EPMD_PORT").ok().and_then(|p| p.parse().ok())).unwrap_or(4369)
    }
}

fn short_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; gethostname NUL-terminates within it or fails.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let host = String::from_utf8_lossy(&buf[..end]).into_owned();
    host.split('.').next().filter(|h| !h.is_empty()).unwrap_or("localhost").to_string()
}

/// Why [`start`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// Called outside an actor.
    NotInActor,
    /// A node already runs in this runtime.
    AlreadyStarted,
    /// The node name is not `alive@host` (the message says why).
    BadName(String),
    /// The cookie could not be read or made.
    Cookie(std::io::Error),
    /// The listener could not bind any port of the range.
    Listen(std::io::Error),
    /// EPMD refused the registration, or could not be reached or served.
    Epmd(String),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::NotInActor => write!(f, "smarm::cluster::start must be called from an actor"),
            StartError::AlreadyStarted => write!(f, "a node already runs in this runtime"),
            StartError::BadName(m) => write!(f, "bad node name: {m}"),
            StartError::Cookie(e) => write!(f, "cookie: {e}"),
            StartError::Listen(e) => write!(f, "distribution listener: {e}"),
            StartError::Epmd(m) => write!(f, "epmd: {m}"),
        }
    }
}

impl std::error::Error for StartError {}

/// A node event, delivered to the actors that called [`monitor_nodes`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// A connection to the node is up (before anything received on it is delivered).
    Up(String),
    /// The connection to the node is gone (after everything received on it was delivered).
    Down(String),
}

/// The running node of a runtime (from [`start`] or [`Node::current`]).
#[derive(Clone)]
pub struct Node {
    shared: Arc<NodeShared>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node").field("name", &self.name()).field("port", &self.port()).finish()
    }
}

impl Node {
    /// The node of the calling actor's runtime, if one was started.
    pub fn current() -> Option<Node> {
        current_shared().map(|shared| Node { shared })
    }

    /// The full node name (`alive@host`).
    pub fn name(&self) -> &str {
        &self.shared.local.name
    }

    /// The creation (incarnation) EPMD gave the node.
    pub fn creation(&self) -> u32 {
        self.shared.local.creation
    }

    /// The distribution listener's port.
    pub fn port(&self) -> u16 {
        self.shared.port
    }

    /// Bytes waiting in the output buffer of the connection to `node` (`None` if it is not
    /// connected): what the busy limit bounds.
    pub fn queued_bytes(&self, node: &str) -> Option<usize> {
        conn::up(&self.shared, node).map(|c| c.queued())
    }

    /// Messages from other nodes dropped so far: undecodable into the receiver's type, sent
    /// to an actor that does not accept remote messages, or to no live actor or name.
    pub fn dropped(&self) -> u64 {
        // Relaxed: a statistics counter; no other memory is published through it.
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

/// Per-runtime node state (in the process layer's `World`).
pub(crate) struct NodeShared {
    pub(crate) local: Local,
    pub(crate) cookie: String,
    pub(crate) cfg: NodeConfig,
    pub(crate) port: u16,
    pub(crate) limits: etf::Limits,
    pub(crate) conns: Mutex<HashMap<Arc<str>, Slot>>,
    subscribers: Mutex<Vec<Subscriber>>,
    pub(crate) dropped: AtomicU64,
    next_ref: AtomicU64,
    /// Aliases of smarm's outstanding calls to other nodes' gen_servers: the reply (an
    /// ALIAS_SEND) goes to the waiting caller. Removed when answered or given up.
    pub(crate) aliases: Mutex<HashMap<Vec<u32>, crate::channel::Sender<call::CallOutcome>>>,
    /// The registration connection to EPMD: closing it unregisters the node.
    _epmd: Mutex<Option<crate::net::TcpStream>>,
}

struct Subscriber {
    pid: Pid,
    deliver: Box<dyn Fn(&NodeEvent) -> bool + Send + Sync>,
}

impl NodeShared {
    pub(crate) fn log(&self, msg: fmt::Arguments<'_>) {
        if !self.cfg.quiet {
            eprintln!("smarm cluster {}: {msg}", self.local.name);
        }
    }

    pub(crate) fn count_drop(&self, why: fmt::Arguments<'_>) {
        // Relaxed: a statistics counter.
        self.dropped.fetch_add(1, Ordering::Relaxed);
        self.log(format_args!("dropped a message: {why}"));
    }

    /// Delivers `ev` to every subscriber, forgetting those whose actor is gone.
    pub(crate) fn notify(&self, ev: &NodeEvent) {
        self.subscribers.lock().retain(|s| (s.deliver)(ev));
    }

    pub(crate) fn next_id(&self) -> u64 {
        // Relaxed: only uniqueness matters.
        self.next_ref.fetch_add(1, Ordering::Relaxed)
    }
}

fn world_slot() -> Option<&'static OnceLock<Arc<dyn crate::process::RemoteOps>>> {
    let sh = crate::process::current_runtime()?;
    Some(&crate::process::world(sh).remote)
}

/// The node of the calling thread's runtime.
pub(crate) fn current_shared() -> Option<Arc<NodeShared>> {
    let ops = world_slot()?.get()?.clone();
    ops.as_any().downcast::<NodeShared>().ok()
}

/// Starts this runtime's node (see the module doc). Call it from an actor, once per runtime.
pub fn start(cfg: NodeConfig) -> Result<Node, StartError> {
    let slot = world_slot().ok_or(StartError::NotInActor)?;
    crate::task::try_current_pid().ok_or(StartError::NotInActor)?;
    if slot.get().is_some() {
        return Err(StartError::AlreadyStarted);
    }
    handshake::validate_node_name(&cfg.name).map_err(|e| StartError::BadName(e.to_string()))?;
    let cookie = match &cfg.cookie {
        Some(c) => c.clone(),
        None => read_or_make_cookie().map_err(StartError::Cookie)?,
    };
    let listener = bind_listener(&cfg).map_err(StartError::Listen)?;
    let port = listener.local_addr().map_err(StartError::Listen)?.port();
    let alive = cfg.name.split('@').next().unwrap_or_default().to_string();
    let (epmd_conn, creation) = match cfg.epmd {
        Epmd::Auto => {
            let (s, c) = conn::register_with_epmd(&cfg, &alive, port).map_err(StartError::Epmd)?;
            (Some(s), c)
        }
        Epmd::None => (None, conn::random_u32() | 1),
    };
    let rt = crate::task::current_pid().runtime_id().expect("a local pid");
    let shared = Arc::new(NodeShared {
        local: Local { name: Arc::from(cfg.name.as_str()), creation, rt },
        cookie,
        limits: etf::Limits::default(),
        port,
        cfg,
        conns: Mutex::new(HashMap::new()),
        subscribers: Mutex::new(Vec::new()),
        dropped: AtomicU64::new(0),
        next_ref: AtomicU64::new(1),
        aliases: Mutex::new(HashMap::new()),
        _epmd: Mutex::new(epmd_conn),
    });
    if slot.set(shared.clone() as Arc<dyn crate::process::RemoteOps>).is_err() {
        return Err(StartError::AlreadyStarted);
    }
    conn::spawn_node_actors(&shared, listener);
    pg_dist::start(&shared);
    Ok(Node { shared })
}

/// The transport of an accepted connection (TLS when configured).
pub(crate) fn transport_accept(sh: &NodeShared, sock: crate::net::TcpStream) -> Result<conn::Transport, String> {
    let t = conn::Transport::plain(sock);
    let Some(cfg) = &sh.cfg.tls else { return Ok(t) };
    let (r, w) = tls::accept(cfg, conn::SockRef(t.sock.clone())).map_err(|e| format!("TLS: {e}"))?;
    Ok(conn::Transport { r: Box::new(r), w: Box::new(w), sock: t.sock, long_frames: true })
}

/// The transport of a connection to a node on `host` (TLS when configured).
pub(crate) fn transport_connect(
    sh: &NodeShared,
    host: &str,
    sock: crate::net::TcpStream,
) -> Result<conn::Transport, String> {
    let t = conn::Transport::plain(sock);
    let Some(cfg) = &sh.cfg.tls else { return Ok(t) };
    let (r, w) = tls::connect(cfg, host, conn::SockRef(t.sock.clone())).map_err(|e| format!("TLS: {e}"))?;
    Ok(conn::Transport { r: Box::new(r), w: Box::new(w), sock: t.sock, long_frames: true })
}

fn bind_listener(cfg: &NodeConfig) -> std::io::Result<crate::net::TcpListener> {
    let (min, max) = cfg.ports;
    let mut last = None;
    for p in min..=max {
        match crate::net::TcpListener::bind(SocketAddr::new(cfg.listen, p)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("empty port range")))
}

/// `~/.erlang.cookie`, as `erl` reads it (made with 20 random capital letters, mode 0400, if
/// missing).
fn read_or_make_cookie() -> std::io::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let home = std::env::var_os("HOME").ok_or_else(|| std::io::Error::other("HOME is not set"))?;
    let path = std::path::Path::new(&home).join(".erlang.cookie");
    match std::fs::read_to_string(&path) {
        Ok(s) => Ok(s.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let cookie: String = (0..20).map(|_| (b'A' + (conn::random_u32() % 26) as u8) as char).collect();
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o400).open(&path)?;
            f.write_all(cookie.as_bytes())?;
            Ok(cookie)
        }
        Err(e) => Err(e),
    }
}

/// This node's name, `None` if no node runs in the caller's runtime (Erlang's `node()` is
/// `nonode@nohost` then).
pub fn node() -> Option<String> {
    current_shared().map(|s| s.local.name.to_string())
}

/// The node of `pid`: its node's name for a remote pid, this node's for a local one (`None`
/// if no node runs and the pid is local).
pub fn node_of(pid: Pid) -> Option<String> {
    match nodes::node_of(pid) {
        Some((name, _)) => Some(name.to_string()),
        None => node(),
    }
}

/// The nodes this node is connected to.
pub fn nodes() -> Vec<String> {
    let Some(sh) = current_shared() else { return Vec::new() };
    let conns = sh.conns.lock();
    let mut v: Vec<String> =
        conns.iter().filter(|(_, s)| matches!(s, Slot::Up(_))).map(|(n, _)| n.to_string()).collect();
    v.sort();
    v
}

/// Connects to `node` (Erlang's `net_kernel:connect_node`): true once a connection is up
/// (at once if it already is), false if the node could not be reached or refused us. Parks
/// the calling actor for at most a few handshake steps' setup time.
pub fn connect(node: &str) -> bool {
    match current_shared() {
        Some(sh) => conn::connect(&sh, node).is_some(),
        None => false,
    }
}

/// Closes the connection to `node`, if any (Erlang's `erlang:disconnect_node`): monitors and
/// links across it fire with `noconnection`. Returns true if there was one, once it is gone.
pub fn disconnect(node: &str) -> bool {
    let Some(sh) = current_shared() else { return false };
    let c = match sh.conns.lock().get(node) {
        Some(Slot::Up(c)) => c.clone(),
        _ => return false,
    };
    c.close("disconnect requested");
    // As erlang:disconnect_node/1: returns once the connection is gone (its monitors and links
    // have fired; the node monitors' Down is queued).
    c.wait_removed(sh.cfg.setup_time);
    true
}

/// Delivers [`NodeEvent`]s of this node to `addr` (Erlang's `net_kernel:monitor_nodes(true)`),
/// as messages `M::from(event)`, in the same queue as the actor's other messages and signals:
/// an `Up` arrives before anything received on the new connection, a `Down` after everything
/// received on the old one. Ends when the actor does. Returns false if no node runs.
pub fn monitor_nodes<M: From<NodeEvent> + Send + 'static>(addr: &Addr<M>) -> bool {
    let Some(sh) = current_shared() else { return false };
    let a = addr.clone();
    sh.subscribers
        .lock()
        .push(Subscriber { pid: addr.pid(), deliver: Box::new(move |ev| a.try_send(M::from(ev.clone())).is_ok()) });
    true
}

/// Stops delivering node events to the actor `pid` (every [`monitor_nodes`] of it).
pub fn demonitor_nodes(pid: Pid) {
    if let Some(sh) = current_shared() {
        sh.subscribers.lock().retain(|s| s.pid != pid);
    }
}

/// Sends `msg` to the process `pid` of another node (or of this one), encoded through the
/// serde mapping of [`term`]. Fire-and-forget, as Erlang's `!`: false only if the message
/// could not be encoded or no node runs; a message to an unreachable node is dropped.
pub fn send<T: Serialize + ?Sized>(pid: Pid, msg: &T) -> bool {
    let Some(sh) = current_shared() else { return false };
    match to_term(msg) {
        Ok(t) => conn::send_term(&sh, pid, t, conn::Connect::OnDemand),
        Err(e) => {
            sh.log(format_args!("message to {pid} not sent: {e}"));
            false
        }
    }
}

/// Sends `msg` to the process registered as `name` on `node` (Erlang's `{Name, Node} ! Msg`,
/// REG_SEND); `node` may be this node. Fire-and-forget as [`send`].
pub fn send_named<T: Serialize + ?Sized>(name: &str, node: &str, msg: &T) -> bool {
    let Some(sh) = current_shared() else { return false };
    match to_term(msg) {
        Ok(t) => conn::send_named_term(&sh, name, node, t, conn::Connect::OnDemand),
        Err(e) => {
            sh.log(format_args!("message to {{{name}, {node}}} not sent: {e}"));
            false
        }
    }
}

/// Sends `msg` to a member of the `pg` group `group` picked at random ([`pg::pick_any`](crate::pg::pick_any)),
/// local or on another node; returns the member, `None` if the group is empty.
pub fn dispatch_any<T: Serialize + ?Sized>(group: &str, msg: &T) -> Option<Pid> {
    let pid = crate::pg::pick_any(group)?;
    send(pid, msg).then_some(pid)
}

/// Decodes a remote message for `Mailbox<M>` (the generic function behind `accept_remote`).
fn decode_as<M: DeserializeOwned + 'static>(t: Term) -> Result<M, String> {
    if std::any::TypeId::of::<M>() == std::any::TypeId::of::<RawTerm>() {
        let boxed: Box<dyn std::any::Any> = Box::new(RawTerm(t));
        return Ok(*boxed.downcast::<M>().expect("M is RawTerm"));
    }
    from_term(t).map_err(|e| e.to_string())
}

impl<M: DeserializeOwned + Send + 'static> Mailbox<M> {
    /// Takes messages from other nodes (feature `cluster`): each remote message to this
    /// actor is decoded into `M` through the serde mapping of [`term`]; one that does not
    /// decode is dropped, counted and logged. Without this call remote messages to the actor
    /// are dropped. `Mailbox<RawTerm>` takes every term as it came. Idempotent.
    pub fn accept_remote(&self) {
        let _ = self.inner.decode.set(decode_as::<M>);
    }
}

fn remote_send<M: Serialize>(pid: Pid, msg: M) -> Result<(), M> {
    match current_shared() {
        Some(sh) => match to_term(&msg) {
            Ok(t) => {
                conn::send_term(&sh, pid, t, conn::Connect::OnDemand);
                Ok(())
            }
            Err(e) => {
                sh.log(format_args!("message to {pid} not sent: {e}"));
                Err(msg)
            }
        },
        None => Err(msg),
    }
}

impl<M: Serialize + DeserializeOwned + Send + 'static> Addr<M> {
    /// The address of process `pid` of another node (feature `cluster`): a send encodes the
    /// message through the serde mapping of [`term`] and queues it on the connection (made on
    /// demand). A send is fire-and-forget as Erlang's; `try_send` fails only if the message
    /// cannot be encoded or no node runs. A local `pid` gives its local address if its mailbox
    /// takes `M`, else an address whose sends go through the codec, as a remote one's.
    pub fn remote(pid: Pid) -> Addr<M> {
        if !pid.is_remote() {
            if let Ok(a) = Addr::from_pid(pid) {
                return a;
            }
        }
        Addr::from_remote(RemoteTo { pid, send: remote_send::<M> })
    }
}

/// Serialises as the Erlang pid (through the magic newtype of [`term::PID_MAGIC`]); a local
/// pid needs a running node (its name and creation).
impl Serialize for Pid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let sh = current_shared();
        let p = match (self.is_remote(), &sh) {
            (true, _) => {
                let (n, c) = nodes::node_of(*self).ok_or_else(|| S::Error::custom("pid of an unknown node"))?;
                eetf::Pid::new(n.as_ref(), self.index(), self.generation(), c)
            }
            (false, Some(sh)) => sh.local.pid_term(*self),
            (false, None) => return Err(S::Error::custom("a local pid needs a running node to be sent")),
        };
        s.serialize_newtype_struct(term::PID_MAGIC, &(p.node.name.as_str(), p.id, p.serial, p.creation))
    }
}

impl<'de> serde::Deserialize<'de> for Pid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Pid, D::Error> {
        use serde::de::Error;
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = (String, u32, u32, u32);
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an Erlang pid")
            }
            fn visit_newtype_struct<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                serde::Deserialize::deserialize(d)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut next = |i| a.next_element()?.ok_or_else(|| A::Error::invalid_length(i, &self));
                let node: String = next(0)?;
                let mut n = |i| a.next_element::<u32>()?.ok_or_else(|| A::Error::invalid_length(i, &"4 fields"));
                Ok((node, n(1)?, n(2)?, n(3)?))
            }
        }
        let (node, id, serial, creation) = d.deserialize_newtype_struct(term::PID_MAGIC, V)?;
        let p = eetf::Pid::new(node.as_str(), id, serial, creation);
        let pid = match current_shared() {
            Some(sh) => sh.local.pid_of(&p),
            None => nodes::remote_pid(&node, creation, id, serial),
        };
        pid.ok_or_else(|| D::Error::custom("node table full"))
    }
}
