//! Connections between nodes: EPMD registration and lookup, the handshake on both sides,
//! one reader and one writer actor per connection, ticks, and routing of outgoing frames.
//!
//! # The connection table
//!
//! `NodeShared::conns` maps a peer's node name to its [`Slot`]: `Pending` while handshakes
//! to or from it are in progress (frames sent meanwhile wait in its queue, bounded by
//! [`MAX_PENDING_BYTES`]; callers of [`connect`] wait on its waiters), then `Up` with the
//! connection. A connect or a send to a peer with a handshake in progress, in either
//! direction, waits for it rather than starting another; if one the peer started fails,
//! waiting callers and frames get one outgoing attempt of our own. The simultaneous-connect
//! rule of the protocol decides which of two crossing handshakes wins (the one initiated by
//! the node with the greater name); the other side answers `nok` and its initiator waits for
//! the winner instead of failing. An initiator told `alive` withdraws if a connection came up
//! meanwhile, so a live connection is never closed as stale.
//!
//! # Order
//!
//! One reader actor per connection delivers everything received, in order: [`NodeEvent::Up`]
//! is delivered to the node monitors before the reader reads its first frame, and
//! [`NodeEvent::Down`] after its last one was delivered and after the `noconnection` signals
//! of the monitors and links that crossed it. Outgoing frames of all senders go through one
//! buffer per connection in the order they were queued, so messages between a pair of
//! processes keep their order, as Erlang promises.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eetf::Term;
use parking_lot::Mutex;

use super::ctrl::{self, as_atom, as_int, atom, elem, int, tag, tuple};
use super::handshake::{self, Acceptor, AcceptorStep, Initiator, InitiatorStep, NodeIdent, Status};
use super::{epmd, remote, Epmd, NodeConfig, NodeEvent, NodeShared};
use crate::channel::{self, OneshotSender, Receiver, Sender};
use crate::net::{TcpListener, TcpStream};
use crate::slot_state::Pid;

/// The most bytes queued for a node while its connection is being set up; later frames are
/// dropped (and counted) until it is up.
pub(crate) const MAX_PENDING_BYTES: usize = 64 << 20;

/// The byte streams of one connection: plain TCP, or TLS over it. The reader and the writer
/// are used by two actors at once. They all go through one handle of the socket (`sock`,
/// shared): smarm's socket timeouts belong to a handle, and the handshake bounds the reader's
/// reads through it (the reactor parks a reader and a writer of one handle independently).
pub(crate) struct Transport {
    pub(crate) r: Box<dyn Read + Send>,
    pub(crate) w: Box<dyn Write + Send>,
    pub(crate) sock: Arc<TcpStream>,
    /// Handshake frames carry a 4-byte length (OTP's `inet_tls_dist` uses `{packet, 4}` from
    /// the start) instead of the 2-byte one of plain TCP.
    pub(crate) long_frames: bool,
}

/// A shared handle of a connection's socket: reads and writes through `&TcpStream`.
#[derive(Clone)]
pub(crate) struct SockRef(pub(crate) Arc<TcpStream>);

impl Read for SockRef {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&*self.0).read(buf)
    }
}

impl super::tls::Socket for SockRef {
    fn try_clone(&self) -> std::io::Result<Self> {
        Ok(self.clone())
    }
    fn shutdown(&self) -> std::io::Result<()> {
        self.0.shutdown(Shutdown::Both)
    }
}

impl Write for SockRef {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.0).flush()
    }
}

/// Reads of one handshake step: each read is given what is left of the step's time, so a
/// peer that drips bytes cannot stretch a step (Erlang's `net_setuptime` bounds a step, not a
/// read).
struct StepRead<'a> {
    inner: &'a mut Box<dyn Read + Send>,
    sock: &'a TcpStream,
    deadline: Instant,
}

impl Read for StepRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake step timed out"));
        }
        self.sock.set_read_timeout(Some(left))?;
        self.inner.read(buf)
    }
}

impl Transport {
    /// Plain TCP.
    pub(crate) fn plain(sock: TcpStream) -> Transport {
        let sock = Arc::new(sock);
        Transport { r: Box::new(SockRef(sock.clone())), w: Box::new(SockRef(sock.clone())), sock, long_frames: false }
    }

    /// Sends handshake frames (as the handshake module frames them: 2-byte lengths, one or
    /// more), re-framed with 4-byte lengths over TLS.
    fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        let out = if self.long_frames {
            let mut out = Vec::with_capacity(bytes.len() + 8);
            let mut rest = bytes;
            while rest.len() >= 2 {
                let n = u16::from_be_bytes([rest[0], rest[1]]) as usize;
                let body = rest.get(2..2 + n).ok_or("a malformed handshake frame")?;
                out.extend_from_slice(&(n as u32).to_be_bytes());
                out.extend_from_slice(body);
                rest = &rest[2 + n..];
            }
            out
        } else {
            bytes.to_vec()
        };
        self.w.write_all(&out).and_then(|()| self.w.flush()).map_err(|e| e.to_string())
    }

    /// The next handshake frame, within `step` (see [`StepRead`]).
    fn frame(&mut self, step: Duration) -> Result<Vec<u8>, String> {
        let mut r = StepRead { inner: &mut self.r, sock: &self.sock, deadline: Instant::now() + step };
        if !self.long_frames {
            return handshake::read_frame(&mut r).map_err(|e| e.to_string());
        }
        let mut len = [0u8; 4];
        r.read_exact(&mut len).map_err(|e| e.to_string())?;
        let len = u32::from_be_bytes(len) as usize;
        if len > handshake::MAX_FRAME {
            return Err(format!("a handshake frame of {len} bytes (at most {})", handshake::MAX_FRAME));
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).map_err(|e| e.to_string())?;
        Ok(body)
    }
}

/// A peer's entry in the connection table.
pub(crate) enum Slot {
    Pending(Pending),
    Up(Arc<Conn>),
}

#[derive(Default)]
pub(crate) struct Pending {
    waiters: Vec<OneshotSender<bool>>,
    queued: Vec<u8>,
    /// Handshakes with this peer in progress (outgoing and incoming).
    attempts: u32,
    /// True while our own outgoing handshake is one of them.
    outgoing: bool,
    /// True once an outgoing handshake was started for this entry (so a failed incoming one
    /// is followed by at most one of our own).
    tried_outgoing: bool,
    /// Cancels our outgoing handshake while it runs.
    abort: Option<Arc<Abort>>,
}

/// The cancel switch of one outgoing handshake. Answering `ok_simultaneous` to the peer's
/// crossing handshake cancels ours (OTP's net_kernel kills the pending owner the same way):
/// left running, it would reach the peer later, after the winning connection is gone
/// (a disconnect), and be accepted there as a new connection nobody asked for.
#[derive(Default)]
pub(crate) struct Abort {
    /// Cancelled, and the handshake's socket once it has one (shut down on cancel).
    state: Mutex<(bool, Option<Arc<TcpStream>>)>,
}

impl Abort {
    /// Cancels the handshake: a blocked read of it fails at once.
    fn cancel(&self) {
        let mut st = self.state.lock();
        st.0 = true;
        if let Some(sock) = st.1.take() {
            let _ = sock.shutdown(Shutdown::Both);
        }
    }

    /// Gives the handshake's socket to the switch; false if it was cancelled already.
    fn register(&self, sock: &Arc<TcpStream>) -> bool {
        let mut st = self.state.lock();
        if !st.0 {
            st.1 = Some(sock.clone());
        }
        !st.0
    }

    fn is_cancelled(&self) -> bool {
        self.state.lock().0
    }
}

/// One established connection.
pub(crate) struct Conn {
    pub(crate) peer: NodeIdent,
    /// The socket, for shutting the connection down.
    sock: Arc<TcpStream>,
    out: Mutex<Out>,
    kick: Sender<()>,
    /// Set by the writer after each write; cleared by the ticker (a tick only when nothing
    /// was written in an interval).
    wrote: AtomicBool,
    /// Frames received (ticks included); the ticker watches it move.
    received: AtomicU64,
    /// The ticker's view: `received` at the last check and the silent intervals since.
    tick_state: Mutex<(u64, u32)>,
    /// The connection's monitors and links across it (see `remote`).
    pub(crate) remote: remote::ConnLinks,
}

struct Out {
    buf: Vec<u8>,
    closed: bool,
    /// Senders parked because `buf` was over the busy limit; woken when the writer takes it.
    busy_waiters: Vec<OneshotSender<()>>,
}

impl Conn {
    /// Appends frames to the outgoing buffer and wakes the writer if it was empty. False if
    /// the connection is closed.
    pub(crate) fn enqueue(&self, bytes: &[u8]) -> bool {
        let was_empty = {
            let mut o = self.out.lock();
            if o.closed {
                return false;
            }
            let was_empty = o.buf.is_empty();
            o.buf.extend_from_slice(bytes);
            was_empty
        };
        if was_empty {
            // Full means a kick is already pending: the writer will take these bytes too.
            let _ = self.kick.try_send(());
        }
        true
    }

    /// [`enqueue`](Self::enqueue) for a process's own send (Erlang's `!`): while the buffer
    /// holds more than the node's busy limit, the sender waits until the writer has taken it
    /// (OTP suspends a sender on a busy distribution port the same way), so a fast producer
    /// cannot grow the buffer without bound. Runtime-internal frames (replies, monitor exits,
    /// ticks) never wait.
    pub(crate) fn enqueue_user(&self, bytes: &[u8], busy_limit: usize) -> bool {
        loop {
            let wait = {
                let mut o = self.out.lock();
                if o.closed {
                    return false;
                }
                if o.buf.len() <= busy_limit {
                    None
                } else {
                    let (tx, rx) = channel::oneshot();
                    o.busy_waiters.push(tx);
                    Some(rx)
                }
            };
            match wait {
                None => return self.enqueue(bytes),
                // Woken when the writer took the buffer (or dropped when the connection closed:
                // the next round sees `closed`).
                Some(rx) => {
                    let _ = rx.recv();
                }
            }
        }
    }

    /// Encodes one frame and queues it.
    pub(crate) fn send_frame(&self, ctrl: &Term, payload: Option<&Term>) -> bool {
        let mut bytes = Vec::new();
        match ctrl::encode_frame(&mut bytes, ctrl, payload) {
            Ok(()) => self.enqueue(&bytes),
            Err(_) => false,
        }
    }

    /// Closes the connection: the reader sees the end and runs the connection-loss steps.
    pub(crate) fn close(&self, why: &str) {
        {
            let mut o = self.out.lock();
            if o.closed {
                return;
            }
            o.closed = true;
            o.buf = Vec::new();
            o.busy_waiters.clear();
        }
        let _ = why;
        let _ = self.sock.shutdown(Shutdown::Both);
        let _ = self.kick.try_send(());
    }

    /// Bytes waiting for the writer.
    pub(crate) fn queued(&self) -> usize {
        self.out.lock().buf.len()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.out.lock().closed
    }

    /// Waits (at most `limit`) until the connection has left the table and its losses were
    /// delivered (after [`close`](Self::close)).
    pub(crate) fn wait_removed(&self, limit: Duration) {
        let (tx, mut rx) = channel::oneshot();
        self.remote.on_removed(tx);
        let _ = rx.recv_timeout(limit);
    }

    /// One ticker interval: a tick if nothing was written, and the silence count.
    fn tick(&self, sh: &NodeShared) {
        // Relaxed: a hint between the writer and the ticker; a stale value costs one extra
        // tick or one interval's delay, never correctness.
        if !self.wrote.swap(false, Ordering::Relaxed) {
            self.enqueue(&[0, 0, 0, 0]);
        }
        // Relaxed: a counter read for change only.
        let now = self.received.load(Ordering::Relaxed);
        let mut st = self.tick_state.lock();
        if now != st.0 {
            *st = (now, 0);
            return;
        }
        st.1 += 1;
        if st.1 >= 4 {
            drop(st);
            sh.log(format_args!("{}: nothing received for 4 tick intervals: connection down", self.peer.name));
            self.close("net_tick_timeout");
        }
    }
}

/// A random 32-bit number from the kernel (challenges, creations, cookies).
pub(crate) fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: `b` is writable for its 4 bytes; getrandom writes at most that many.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 4 {
        // The kernel's random source is always there on Linux >= 3.17; fall back to time and
        // address entropy rather than fail.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        return (t.as_nanos() as u32) ^ (&b as *const _ as usize as u32).rotate_left(13);
    }
    u32::from_ne_bytes(b)
}

fn our_ident(sh: &NodeShared) -> NodeIdent {
    NodeIdent { name: sh.local.name.to_string(), flags: handshake::OUR_FLAGS, creation: sh.local.creation }
}

/// Registers `alive` at `port` with the EPMD of this host, serving EPMD in-process if none
/// runs. Returns the registration connection (kept open: closing it unregisters) and the
/// creation EPMD gave.
pub(crate) fn register_with_epmd(cfg: &NodeConfig, alive: &str, port: u16) -> Result<(TcpStream, u32), String> {
    let epmd_port = cfg.epmd_port_or_default();
    let addr = SocketAddr::from(([127, 0, 0, 1], epmd_port));
    let mut s = match TcpStream::connect(addr) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            serve_epmd(epmd_port)?;
            TcpStream::connect(addr).map_err(|e| format!("connecting to the in-process EPMD: {e}"))?
        }
        Err(e) => return Err(format!("connecting to EPMD at {addr}: {e}")),
    };
    let _ = s.set_read_timeout(Some(cfg.setup_time));
    let creation = epmd::register(&mut s, alive, port).map_err(|e| e.to_string())?;
    let _ = s.set_read_timeout(None);
    Ok((s, creation))
}

/// Serves the EPMD protocol on `port` in this process (an acceptor actor, an actor per
/// connection). If another process bound the port first, its EPMD is used instead.
fn serve_epmd(port: u16) -> Result<(), String> {
    let listener = match TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => return Ok(()),
        Err(e) => return Err(format!("serving EPMD on port {port}: {e}")),
    };
    let server = Arc::new(epmd::EpmdServer::new(port));
    crate::task::spawn(move || loop {
        let Ok((s, peer)) = listener.accept() else { continue };
        let server = server.clone();
        crate::task::spawn(move || {
            // As the system epmd: other hosts may look nodes up, only this host may register
            // them. (The request tag is the third byte, after the 2-byte length.)
            if !peer.ip().is_loopback() {
                let _ = s.set_read_timeout(Some(Duration::from_secs(7)));
                let mut head = [0u8; 3];
                match s.peek(&mut head) {
                    Ok(3) if head[2] != epmd::ALIVE2_REQ => {}
                    _ => return,
                }
            }
            let _ = server.serve_connection(s);
        });
    });
    Ok(())
}

/// Spawns the acceptor and the ticker of a started node.
pub(crate) fn spawn_node_actors(sh: &Arc<NodeShared>, listener: TcpListener) {
    let s = sh.clone();
    crate::task::spawn(move || loop {
        match listener.accept() {
            Ok((stream, _)) => {
                let s = s.clone();
                crate::task::spawn(move || incoming(s, stream));
            }
            Err(e) => {
                s.log(format_args!("accept: {e}"));
                crate::task::sleep(Duration::from_millis(100));
            }
        }
    });
    let s = sh.clone();
    crate::task::spawn(move || {
        let interval = s.cfg.net_ticktime / 4;
        loop {
            crate::task::sleep(interval);
            let conns: Vec<Arc<Conn>> = s
                .conns
                .lock()
                .values()
                .filter_map(|slot| match slot {
                    Slot::Up(c) => Some(c.clone()),
                    Slot::Pending(_) => None,
                })
                .collect();
            for c in conns {
                c.tick(&s);
            }
        }
    });
}

/// The accepting side of a handshake, then the connection's reader.
fn incoming(sh: Arc<NodeShared>, sock: TcpStream) {
    let _ = sock.set_nodelay(true);
    let _ = sock.set_read_timeout(Some(sh.cfg.setup_time));
    let mut s = match super::transport_accept(&sh, sock) {
        Ok(t) => t,
        Err(e) => return sh.log(format_args!("incoming connection: {e}")),
    };
    let mut hs = match Acceptor::new(our_ident(&sh), sh.cookie.clone(), random_u32()) {
        Ok(hs) => hs,
        Err(e) => return sh.log(format_args!("acceptor: {e}")),
    };
    let mut counted: Option<Arc<str>> = None;
    let mut frames = 0usize;
    let result: Result<NodeIdent, String> = (|| loop {
        let frame = s.frame(sh.cfg.setup_time)?;
        frames += 1;
        match hs.on_frame(&frame).map_err(|e| e.to_string())? {
            AcceptorStep::Name(peer) => {
                let status = decide_status(&sh, &peer.name);
                if matches!(status, Status::Ok | Status::OkSimultaneous | Status::Alive) {
                    counted = Some(Arc::from(peer.name.as_str()));
                }
                s.send(&hs.status(status).map_err(|e| e.to_string())?)?;
                match status {
                    Status::Nok => return Err(CROSSED.into()),
                    Status::NotAllowed => return Err(format!("refused {} ({status:?})", peer.name)),
                    _ => {}
                }
            }
            AcceptorStep::AliveAnswer(true) => {
                // The peer says our connection to it is stale: take it down first, so its
                // Down precedes the new connection's Up.
                if let Some(name) = &counted {
                    take_down_old(&sh, name);
                }
                s.send(&hs.challenge().map_err(|e| e.to_string())?)?;
            }
            AcceptorStep::Continue => {}
            AcceptorStep::AliveAnswer(false) => return Err(CROSSED.into()),
            AcceptorStep::Done { peer, send } => {
                s.send(&send)?;
                return Ok(peer);
            }
        }
    })();
    match result {
        Ok(peer) => {
            run_connection(sh, s, peer, None);
        }
        Err(e) => {
            // Not logged: the protocol's own outcomes (CROSSED), and a connection that closed
            // before it sent anything (an outgoing handshake the peer cancelled right after
            // connecting, as a crossing one won; a port probe).
            if e != CROSSED && frames > 0 {
                sh.log(format_args!("incoming handshake failed: {e}"));
            }
            if let Some(name) = counted {
                attempt_failed(&sh, &name, false);
            }
        }
    }
}

/// The status an acceptor answers a peer's name with (and the attempt it counts).
fn decide_status(sh: &NodeShared, peer: &str) -> Status {
    if peer == &*sh.local.name {
        return Status::NotAllowed;
    }
    let mut conns = sh.conns.lock();
    match conns.get_mut(peer) {
        Some(Slot::Up(_)) => Status::Alive,
        Some(Slot::Pending(p)) if p.outgoing && peer <= &*sh.local.name => Status::Nok,
        Some(Slot::Pending(p)) => {
            p.attempts += 1;
            if p.outgoing {
                if let Some(a) = &p.abort {
                    a.cancel();
                }
                Status::OkSimultaneous
            } else {
                Status::Ok
            }
        }
        None => {
            conns.insert(Arc::from(peer), Slot::Pending(Pending { attempts: 1, ..Default::default() }));
            Status::Ok
        }
    }
}

/// Closes the connection to `name` and waits (bounded) until its reader has removed it.
fn take_down_old(sh: &NodeShared, name: &str) {
    let old = match sh.conns.lock().get(name) {
        Some(Slot::Up(c)) => Some(c.clone()),
        _ => None,
    };
    if let Some(c) = old {
        c.close("replaced by a new connection");
        c.wait_removed(sh.cfg.setup_time);
    }
    let mut conns = sh.conns.lock();
    if !matches!(conns.get(name), Some(Slot::Pending(_))) {
        conns.insert(Arc::from(name), Slot::Pending(Pending { attempts: 1, ..Default::default() }));
    }
}

/// One handshake attempt with `name` ended without a connection.
fn attempt_failed(sh: &Arc<NodeShared>, name: &str, outgoing: bool) {
    let mut conns = sh.conns.lock();
    if let Some(Slot::Pending(p)) = conns.get_mut(name) {
        p.attempts = p.attempts.saturating_sub(1);
        if outgoing {
            p.outgoing = false;
            p.abort = None;
        }
        if p.attempts == 0 {
            // Callers and frames waited for a handshake the peer started, and it failed: try
            // once ourselves before giving up on them.
            if !p.tried_outgoing && (!p.waiters.is_empty() || !p.queued.is_empty()) {
                let attempt = start_outgoing(&mut conns, name);
                drop(conns);
                return spawn_outgoing(sh, attempt);
            }
            if let Some(Slot::Pending(p)) = conns.remove(name) {
                drop(conns);
                for w in p.waiters {
                    let _ = w.send(false);
                }
            }
        }
    }
}

/// Where node `name` listens: a configured peer address, the fixed port of `Epmd::None`, or
/// its host's EPMD.
fn locate(sh: &NodeShared, name: &str) -> Result<SocketAddr, String> {
    if let Some(a) = sh.cfg.peers.get(name) {
        return Ok(*a);
    }
    let (alive, host) = name.split_once('@').ok_or("no @ in the node name")?;
    let resolve = |port: u16| -> Result<SocketAddr, String> {
        (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("resolving {host}: {e}"))?
            .find(|a| a.is_ipv4())
            .ok_or_else(|| format!("{host} has no IPv4 address"))
    };
    match sh.cfg.epmd {
        Epmd::None => resolve(sh.cfg.ports.0),
        Epmd::Auto => {
            let epmd_addr = resolve(sh.cfg.epmd_port_or_default())?;
            let mut s = TcpStream::connect_timeout(&epmd_addr, sh.cfg.setup_time)
                .map_err(|e| format!("EPMD at {epmd_addr}: {e}"))?;
            let _ = s.set_read_timeout(Some(sh.cfg.setup_time));
            match epmd::port_please(&mut s, alive).map_err(|e| e.to_string())? {
                Some(np) => Ok(SocketAddr::new(epmd_addr.ip(), np.port)),
                None => Err(format!("EPMD at {epmd_addr} knows no node {alive}")),
            }
        }
    }
}

/// The initiating side of a handshake with `name`, then the connection's reader.
fn outgoing(sh: Arc<NodeShared>, Attempt { name, abort }: Attempt) {
    let result: Result<(Transport, NodeIdent), String> = (|| {
        let addr = locate(&sh, &name)?;
        let sock = TcpStream::connect_timeout(&addr, sh.cfg.setup_time).map_err(|e| format!("{addr}: {e}"))?;
        let _ = sock.set_nodelay(true);
        let _ = sock.set_read_timeout(Some(sh.cfg.setup_time));
        let host = name.split_once('@').map_or("", |(_, h)| h);
        let mut s = super::transport_connect(&sh, host, sock)?;
        if !abort.register(&s.sock) {
            return Err(CANCELLED.into());
        }
        let mut hs = Initiator::new(our_ident(&sh), sh.cookie.clone(), name.to_string(), random_u32())
            .map_err(|e| e.to_string())?;
        s.send(&hs.start())?;
        loop {
            let frame = s.frame(sh.cfg.setup_time)?;
            match hs.on_frame(&frame).map_err(|e| e.to_string())? {
                InitiatorStep::Status(Status::Ok | Status::OkSimultaneous) => {}
                InitiatorStep::Status(Status::Alive) => {
                    // The peer holds a connection to us. If we hold none, it is stale: go on,
                    // and the peer closes it. If one came up meanwhile (the peer's own
                    // handshake, accepted here), it is the live one: withdraw (OTP's
                    // `is_pending` answer).
                    let superseded = matches!(sh.conns.lock().get(&*name), Some(Slot::Up(c)) if !c.is_closed());
                    s.send(&hs.answer_alive(!superseded).map_err(|e| e.to_string())?)?;
                    if superseded {
                        return Err(SUPERSEDED.into());
                    }
                }
                InitiatorStep::Status(Status::Nok) => return Err("nok".into()),
                InitiatorStep::Status(st) => return Err(format!("refused: {st:?}")),
                InitiatorStep::Send(bytes) => s.send(&bytes)?,
                InitiatorStep::Done(peer) => return Ok((s, peer)),
            }
        }
    })();
    // A handshake cancelled while it ran fails on its shut socket with some I/O error.
    let result = result.map_err(|e| if abort.is_cancelled() { CANCELLED.into() } else { e });
    match result {
        Ok((s, peer)) => {
            if !run_connection(sh.clone(), s, peer, Some(&abort)) {
                attempt_failed(&sh, &name, true);
            }
        }
        Err(e) if e == "nok" || e == SUPERSEDED || e == CANCELLED => {
            // Simultaneous connect that the peer's own attempt wins: wait for it.
            let (tx, mut rx) = channel::oneshot();
            let waiting = match sh.conns.lock().get_mut(&*name) {
                Some(Slot::Pending(p)) => {
                    p.waiters.push(tx);
                    true
                }
                _ => false,
            };
            if waiting {
                let _ = rx.recv_timeout(sh.cfg.setup_time);
            }
            attempt_failed(&sh, &name, true);
        }
        Err(e) => {
            sh.log(format_args!("connecting to {name}: {e}"));
            attempt_failed(&sh, &name, true);
        }
    }
}

/// The end of an incoming handshake that crossed one of ours and lost (we answered `nok`), or
/// whose initiator withdrew because the crossing one won (`alive` answered `false`): the
/// protocol working, not an error to log.
const CROSSED: &str = "crossed by another handshake";

/// The error of an outgoing handshake withdrawn because a connection came up meanwhile.
const SUPERSEDED: &str = "superseded by a connection the peer started";

/// The error of an outgoing handshake cancelled by the peer's crossing one (see [`Abort`]).
const CANCELLED: &str = "cancelled: the peer's crossing handshake wins";

/// An outgoing handshake to start: the peer's name and the handshake's cancel switch.
struct Attempt {
    name: Arc<str>,
    abort: Arc<Abort>,
}

/// Marks an outgoing attempt to `name` as started unless a handshake with it is in progress; the caller holds
/// `conns`' lock. Returns the attempt to spawn, which the caller must hand to
/// [`spawn_outgoing`] once it has released the lock: a spawn may yield the thread (its
/// preemption check), and an actor suspended while holding a `RawMutex` would leave every
/// thread that then takes the lock blocked in the kernel, with nobody to resume the holder.
#[must_use]
fn start_outgoing(conns: &mut std::collections::HashMap<Arc<str>, Slot>, name: &str) -> Option<Attempt> {
    let key: Arc<str> = Arc::from(name);
    let p = match conns.entry(key.clone()).or_insert_with(|| Slot::Pending(Pending::default())) {
        Slot::Pending(p) => p,
        Slot::Up(_) => return None,
    };
    // Any handshake in progress (ours, or one the peer started) is waited for: a second,
    // crossing one could complete too, and whichever of the two connections one side then
    // closes as stale would take the other's only connection with it (OTP's net_kernel
    // likewise queues a connect behind a pending connection in either direction).
    if p.attempts > 0 {
        return None;
    }
    let abort = Arc::new(Abort::default());
    p.outgoing = true;
    p.tried_outgoing = true;
    p.attempts += 1;
    p.abort = Some(abort.clone());
    Some(Attempt { name: key, abort })
}

/// Spawns the attempt [`start_outgoing`] started (called without `conns`' lock).
fn spawn_outgoing(sh: &Arc<NodeShared>, attempt: Option<Attempt>) {
    if let Some(a) = attempt {
        let sh = sh.clone();
        crate::task::spawn(move || outgoing(sh, a));
    }
}

/// The connection to `name` if it is up.
pub(crate) fn up(sh: &NodeShared, name: &str) -> Option<Arc<Conn>> {
    match sh.conns.lock().get(name) {
        Some(Slot::Up(c)) if !c.is_closed() => Some(c.clone()),
        _ => None,
    }
}

/// Connects to `name` (see `cluster::connect`).
pub(crate) fn connect(sh: &Arc<NodeShared>, name: &str) -> Option<Arc<Conn>> {
    if handshake::validate_node_name(name).is_err() || name == &*sh.local.name {
        return None;
    }
    // A connection that is closing (disconnect, a lost peer) is not up: let it leave first.
    let closing = match sh.conns.lock().get(name) {
        Some(Slot::Up(c)) if c.is_closed() => Some(c.clone()),
        _ => None,
    };
    if let Some(c) = closing {
        c.wait_removed(sh.cfg.setup_time);
    }
    let (tx, mut rx) = channel::oneshot();
    let attempt = {
        let mut conns = sh.conns.lock();
        if let Some(Slot::Up(c)) = conns.get(name) {
            if !c.is_closed() {
                return Some(c.clone());
            }
            // Still closing after the wait: a new connection replaces it in the table.
            conns.remove(name);
        }
        let attempt = start_outgoing(&mut conns, name);
        if let Some(Slot::Pending(p)) = conns.get_mut(name) {
            p.waiters.push(tx);
        }
        attempt
    };
    spawn_outgoing(sh, attempt);
    // Locate, connect, and each handshake step: a few setup times at most.
    let _ = rx.recv_timeout(sh.cfg.setup_time * 4);
    match sh.conns.lock().get(name) {
        Some(Slot::Up(c)) => Some(c.clone()),
        _ => None,
    }
}

/// Whether a send may set up a connection to its node.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Connect {
    /// Connect on demand (Erlang's `!` with `dist_auto_connect`).
    OnDemand,
    /// Send only over a connection that is up, else drop (`erlang:send/3`'s `noconnect`).
    /// Protocol traffic (`pg`'s) uses it, so a message sent after a disconnect does not
    /// reconnect on its own.
    No,
}

/// Queues an encoded frame for node `name` (incarnation `creation`, if known), connecting on
/// demand if `connect` allows. False if it was dropped.
fn route(sh: &Arc<NodeShared>, name: &str, creation: Option<u32>, frame: Vec<u8>, connect: Connect) -> bool {
    if handshake::validate_node_name(name).is_err() || name == &*sh.local.name {
        return false;
    }
    let mut conns = sh.conns.lock();
    if connect == Connect::No && !matches!(conns.get(name), Some(Slot::Up(_))) {
        return false;
    }
    match conns.get_mut(name) {
        Some(Slot::Up(c)) => {
            if creation.is_some_and(|cr| cr != c.peer.creation) {
                drop(conns);
                sh.count_drop(format_args!("to a pid of an earlier incarnation of {name}"));
                return false;
            }
            let c = c.clone();
            drop(conns);
            if c.enqueue_user(&frame, sh.cfg.busy_limit) {
                return true;
            }
            // It was closing: let it leave (its NodeDown then precedes the next connection's
            // NodeUp), then route again, which connects anew. Only this rare path pays.
            if connect == Connect::No {
                return false;
            }
            c.wait_removed(sh.cfg.setup_time);
            if matches!(sh.conns.lock().get(name), Some(Slot::Up(u)) if Arc::ptr_eq(u, &c)) {
                return false; // still not gone within the setup time
            }
            route(sh, name, creation, frame, connect)
        }
        Some(Slot::Pending(p)) => {
            if p.queued.len() + frame.len() > MAX_PENDING_BYTES {
                drop(conns);
                sh.count_drop(format_args!("{name} is connecting and {MAX_PENDING_BYTES} bytes already wait"));
                return false;
            }
            // A handshake is in progress (entries without one are removed): the frame waits
            // for it.
            p.queued.extend_from_slice(&frame);
            true
        }
        None => {
            let attempt = start_outgoing(&mut conns, name);
            if let Some(Slot::Pending(p)) = conns.get_mut(name) {
                p.queued = frame;
            }
            drop(conns);
            spawn_outgoing(sh, attempt);
            true
        }
    }
}

/// Sends `term` to `pid` (remote, or local through its mailbox's decoder).
pub(crate) fn send_term(sh: &Arc<NodeShared>, pid: Pid, term: Term, connect: Connect) -> bool {
    if !pid.is_remote() {
        deliver(sh, pid, term);
        return true;
    }
    let Some((name, creation)) = super::nodes::node_of(pid) else { return false };
    let ctrl = tuple(vec![int(tag::SEND), atom(""), Term::Pid(sh.local.pid_term(pid))]);
    let mut frame = Vec::new();
    if ctrl::encode_frame(&mut frame, &ctrl, Some(&term)).is_err() {
        return false;
    }
    route(sh, &name, Some(creation), frame, connect)
}

/// Sends `term` to `{name, node}`.
pub(crate) fn send_named_term(sh: &Arc<NodeShared>, name: &str, node: &str, term: Term, connect: Connect) -> bool {
    if node == &*sh.local.name {
        deliver_named(sh, name, term);
        return true;
    }
    let from = crate::task::try_current_pid().unwrap_or(Pid::NOBODY);
    let ctrl = tuple(vec![int(tag::REG_SEND), Term::Pid(sh.local.pid_term(from)), atom(""), atom(name)]);
    let mut frame = Vec::new();
    if ctrl::encode_frame(&mut frame, &ctrl, Some(&term)).is_err() {
        return false;
    }
    route(sh, node, None, frame, connect)
}

/// Delivers a term to a local pid's mailbox.
pub(crate) fn deliver(sh: &NodeShared, to: Pid, term: Term) {
    use crate::mailbox::TermRejected;
    let Some(rt) = crate::process::current_runtime() else { return };
    let sink = match crate::process::signal_sink_of(rt, to) {
        Ok(s) => s,
        Err(_) => {
            // Erlang drops a message to a dead process silently; smarm counts it. Relaxed: a
            // statistics counter; nothing else is published through it.
            sh.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    match sink.push_term(term) {
        Ok(()) => {}
        Err(TermRejected::NotAccepted) => {
            sh.count_drop(format_args!("{to} does not accept remote messages (Mailbox::accept_remote)"))
        }
        Err(TermRejected::Undecodable(e)) => sh.count_drop(format_args!("to {to}: {e}")),
        Err(TermRejected::Dead) => {
            // Relaxed: a statistics counter.
            sh.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// OTP services that other nodes' kernels message on their own (`global` announces itself
/// to every new connection; OTP 25 asks `rex` for its features): smarm runs none of them, and
/// ignores their messages without counting them as drops. (An `rpc:call` to a smarm node
/// returns `{badrpc, notsup}` on the caller's side: smarm offers no spawn requests.)
const OTP_SERVICES: &[&str] = &["global_name_server", "global_group", "global_group_check", "rex"];

/// Names smarm answers for itself: `net_kernel` (pings). Monitors of them are accepted and
/// fire only with the connection.
pub(crate) const SYSTEM_NAMES: &[&str] = &["net_kernel"];

/// Delivers a term to a locally registered name.
fn deliver_named(sh: &NodeShared, name: &str, term: Term) {
    let Some(rt) = crate::process::current_runtime() else { return };
    match crate::registry::whereis_in(rt, name) {
        Some(pid) => deliver(sh, pid, term),
        None if OTP_SERVICES.contains(&name) => {}
        None => sh.count_drop(format_args!("no process is registered as {name} ({term})")),
    }
}

/// Runs an established connection: registers it, spawns its writer, announces it, reads
/// until it ends, then the connection-loss steps.
///
/// An outgoing handshake passes its cancel switch: if it was cancelled by the time the
/// connection would enter the table, the connection is dropped and this returns false (the
/// caller counts the attempt as failed). True once the connection has run and ended.
fn run_connection(sh: Arc<NodeShared>, t: Transport, peer: NodeIdent, abort: Option<&Abort>) -> bool {
    let _ = t.sock.set_read_timeout(None);
    let Transport { r, w, sock, .. } = t;
    let (kick, kick_rx) = channel::bounded(1);
    let name: Arc<str> = Arc::from(peer.name.as_str());
    let conn = Arc::new(Conn {
        peer,
        sock,
        out: Mutex::new(Out { buf: Vec::new(), closed: false, busy_waiters: Vec::new() }),
        kick,
        wrote: AtomicBool::new(false),
        received: AtomicU64::new(0),
        tick_state: Mutex::new((0, 0)),
        remote: remote::ConnLinks::default(),
    });
    let (queued, waiters) = {
        let mut conns = sh.conns.lock();
        // Checked under the table's lock, which the cancel is made under too.
        if abort.is_some_and(Abort::is_cancelled) {
            drop(conns);
            conn.close("cancelled by a crossing handshake");
            return false;
        }
        match conns.insert(name.clone(), Slot::Up(conn.clone())) {
            Some(Slot::Pending(p)) => (p.queued, p.waiters),
            _ => (Vec::new(), Vec::new()),
        }
    };
    let c = conn.clone();
    crate::task::spawn(move || writer(c, w, kick_rx));
    if !queued.is_empty() {
        conn.enqueue(&queued);
    }
    // Guard: whatever ends the reader (the peer, a decode error, the runtime's shutdown), the
    // connection leaves the table and its monitors and links fire.
    struct Cleanup(Arc<NodeShared>, Arc<Conn>, Arc<str>);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let Cleanup(sh, conn, name) = self;
            {
                let mut conns = sh.conns.lock();
                if matches!(conns.get(&**name), Some(Slot::Up(c)) if Arc::ptr_eq(c, conn)) {
                    conns.remove(&**name);
                }
            }
            conn.close("connection ended");
            remote::connection_lost(sh, conn);
            sh.notify(&NodeEvent::Down(name.to_string()));
            conn.remote.removed();
        }
    }
    let _cleanup = Cleanup(sh.clone(), conn.clone(), name.clone());
    sh.notify(&NodeEvent::Up(name.to_string()));
    for w in waiters {
        let _ = w.send(true);
    }
    match read_loop(&sh, &conn, r) {
        Ok(()) => {}
        Err(e) => sh.log(format_args!("{name}: connection closed: {e}")),
    }
    true
}

/// Reads and dispatches frames until the connection ends (Ok on a clean end).
fn read_loop(sh: &Arc<NodeShared>, conn: &Arc<Conn>, r: Box<dyn Read + Send>) -> Result<(), String> {
    let mut r = std::io::BufReader::with_capacity(64 << 10, r);
    let mut body = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if let Err(e) = r.read_exact(&mut len) {
            return if conn.is_closed() || e.kind() == std::io::ErrorKind::UnexpectedEof {
                Ok(())
            } else {
                Err(e.to_string())
            };
        }
        // Relaxed: a counter the ticker reads for change only.
        conn.received.fetch_add(1, Ordering::Relaxed);
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 {
            continue; // a tick
        }
        if len > sh.cfg.max_frame {
            conn.close("oversized frame");
            return Err(format!("a frame of {len} bytes exceeds max_frame ({})", sh.cfg.max_frame));
        }
        // Grown as the bytes arrive (at most 64 KiB ahead of them), not from the length field.
        body.clear();
        while body.len() < len {
            let start = body.len();
            body.resize(start + (len - start).min(64 << 10), 0);
            r.read_exact(&mut body[start..]).map_err(|e| format!("truncated frame: {e}"))?;
        }
        #[cfg(feature = "smarm-trace")]
        crate::runtime::trace_event(crate::trace_ring::EventKind::FrameIn, len as u64);
        if let Err(e) = dispatch(sh, conn, &body) {
            conn.close("bad frame");
            return Err(e);
        }
        if body.capacity() > 1 << 20 {
            body = Vec::new(); // do not keep a large frame's buffer for the connection's life
        }
    }
}

/// The writer actor: drains the connection's buffer into the socket.
fn writer(conn: Arc<Conn>, mut s: Box<dyn Write + Send>, kick: Receiver<()>) {
    let mut spare = Vec::new();
    while kick.recv().is_ok() {
        {
            let mut o = conn.out.lock();
            if o.closed {
                return;
            }
            std::mem::swap(&mut o.buf, &mut spare);
            for w in o.busy_waiters.drain(..) {
                let _ = w.send(());
            }
        }
        if spare.is_empty() {
            continue;
        }
        if s.write_all(&spare).and_then(|()| s.flush()).is_err() {
            conn.close("write failed");
            return;
        }
        #[cfg(feature = "smarm-trace")]
        crate::runtime::trace_event(crate::trace_ring::EventKind::FrameOut, spare.len() as u64);
        // Relaxed: see `Conn::tick`.
        conn.wrote.store(true, Ordering::Relaxed);
        spare.clear();
        if spare.capacity() > 4 << 20 {
            spare = Vec::new();
        }
    }
}

fn pid_at(sh: &NodeShared, t: &Term, i: usize) -> Result<Pid, String> {
    match elem(t, i) {
        Some(Term::Pid(p)) => sh.local.pid_of(p).ok_or_else(|| "node table full".to_string()),
        other => Err(format!("expected a pid at position {i}, found {other:?}")),
    }
}

fn need_payload(p: Option<Term>) -> Result<Term, String> {
    p.ok_or_else(|| "a message control without its message".to_string())
}

/// Handles one frame's control message.
fn dispatch(sh: &Arc<NodeShared>, conn: &Arc<Conn>, body: &[u8]) -> Result<(), String> {
    let f = ctrl::decode_frame(body, &sh.limits)?;
    let t = elem(&f.ctrl, 0).and_then(as_int).ok_or("a control message that is not {Tag, ...}")? as i32;
    match t {
        tag::SEND | tag::SEND_TT | tag::SEND_SENDER | tag::SEND_SENDER_TT => {
            let to = pid_at(sh, &f.ctrl, 2)?;
            let msg = need_payload(f.payload)?;
            if to.is_remote() {
                sh.count_drop(format_args!("{} sent to {to}, which is not a pid of this node", conn.peer.name));
            } else {
                deliver(sh, to, msg);
            }
        }
        tag::REG_SEND | tag::REG_SEND_TT => {
            let from = pid_at(sh, &f.ctrl, 1)?;
            let name = elem(&f.ctrl, 3).and_then(as_atom).ok_or("REG_SEND without an atom name")?;
            let msg = need_payload(f.payload)?;
            match name {
                "net_kernel" => net_kernel(sh, conn, from, msg),
                _ => deliver_named(sh, name, msg),
            }
        }
        tag::ALIAS_SEND | tag::ALIAS_SEND_TT => {
            let msg = need_payload(f.payload)?;
            let alias = elem(&f.ctrl, 2).ok_or("ALIAS_SEND without an alias")?;
            remote::alias_send(sh, alias, msg);
        }
        tag::GROUP_LEADER => {} // smarm has no group leaders (no io protocol): ignored
        tag::LINK
        | tag::EXIT
        | tag::EXIT_TT
        | tag::EXIT2
        | tag::EXIT2_TT
        | tag::MONITOR_P
        | tag::DEMONITOR_P
        | tag::MONITOR_P_EXIT
        | tag::UNLINK_ID
        | tag::UNLINK_ID_ACK => remote::signal(sh, conn, t, &f.ctrl, f.payload)?,
        other => return Err(format!("unknown control message {other}")),
    }
    Ok(())
}

/// The requests OTP nodes make of `net_kernel`: `{is_auth, Node}` (`net_adm:ping`) is
/// answered `yes`; anything else is dropped.
fn net_kernel(sh: &NodeShared, conn: &Conn, from: Pid, msg: Term) {
    let is_call = elem(&msg, 0).and_then(as_atom) == Some("$gen_call");
    let req = elem(&msg, 2);
    if is_call && req.and_then(|r| elem(r, 0)).and_then(as_atom) == Some("is_auth") {
        if let Some(from_tag) = elem(&msg, 1) {
            if let Some(tag) = elem(from_tag, 1) {
                gen_reply(sh, conn, from, tag, atom("yes"));
                return;
            }
        }
    }
    sh.count_drop(format_args!("net_kernel request {msg} from {from} is not one smarm answers"));
}

/// Answers an OTP `gen:call` made from the other node: `{Tag, Reply}` to the caller, or, when
/// the tag is OTP 24+'s `[alias | Ref]`, to that alias (ALIAS_SEND).
pub(crate) fn gen_reply(sh: &NodeShared, conn: &Conn, to: Pid, tag: &Term, reply: Term) -> bool {
    let me = crate::task::try_current_pid().unwrap_or(Pid::NOBODY);
    let msg = tuple(vec![tag.clone(), reply]);
    let ctrl = match tag {
        Term::ImproperList(l) if l.elements.first().and_then(as_atom) == Some("alias") => {
            tuple(vec![int(tag::ALIAS_SEND), Term::Pid(sh.local.pid_term(me)), (*l.last).clone()])
        }
        _ => tuple(vec![int(tag::SEND), atom(""), Term::Pid(sh.local.pid_term(to))]),
    };
    conn.send_frame(&ctrl, Some(&msg))
}
