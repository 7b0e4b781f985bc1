//! Malformed and hostile input against a running smarm node (issue 14, "Security and bad
//! input"). The node runs in this process (its own runtime on a thread, `Epmd::None`, an
//! ephemeral port); the test thread attacks it over plain `std::net::TcpStream`s with bytes
//! built by hand or with the wire codecs of `smarm::cluster::__wire`.
//!
//! After every attack the test proves two things: the attacked connection was closed (a read
//! returns end-of-file or an error within a bounded time), and the node is still healthy (a
//! fresh, correct handshake completes and messages sent on it, both `REG_SEND` to a registered
//! name and `SEND` to a pid, reach the registered actor, in order, with nothing of the attack
//! delivered before them).
//!
//! Every wait is bounded. The tests take one lock, so they run one at a time: the RSS check of
//! the oversized-frame test must not see another test's node starting.
#![cfg(feature = "cluster")]

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use smarm::cluster::__wire::{
    encode_versioned, frame, read_frame, Initiator, InitiatorStep, NodeIdent, Status, OUR_FLAGS, REQUIRED_FLAGS,
};
use smarm::cluster::eetf::{self, Atom, FixInteger, Term, Tuple};
use smarm::cluster::{self, Epmd, NodeConfig, RawTerm};
use smarm::{Envelope, Mailbox};

const COOKIE: &str = "malformed_input_cookie";
/// The frame cap of the attacked nodes: small, yet above the 10 000-level term (20 000 bytes),
/// so that term reaches the decoder's depth limit instead of the cap.
const MAX_FRAME: usize = 32 << 10;
/// How long a connection may take to be closed after an attack, and a healthy exchange to
/// complete (generous: the machine is shared).
const WAIT: Duration = Duration::from_secs(5);
/// Longest handshake frame payload the node accepts (`handshake::MAX_FRAME`).
const HS_MAX_FRAME: usize = 1024;

const DFLAG_MAP_TAG: u64 = 0x2_0000;
const DFLAG_HANDSHAKE_23: u64 = 0x100_0000;
const DFLAG_MANDATORY_25_DIGEST: u64 = 0x400_0000;
const DFLAG_NAME_ME: u64 = 1 << 33;

const SMALL_TUPLE_EXT: u8 = 104;
const NIL_EXT: u8 = 106;
const ATOM_CACHE_REF: u8 = 82;
const VERSION: u8 = 131;
const PASS_THROUGH: u8 = 112;

/// One test at a time (see the module doc); a failed test must not fail the others.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A node name no other test or run uses.
fn unique(alive: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{alive}_{}_{}@127.0.0.1", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

fn atom(s: &str) -> Term {
    Term::Atom(Atom::from(s))
}

fn int(i: i32) -> Term {
    Term::FixInteger(FixInteger::from(i))
}

fn tuple(elements: Vec<Term>) -> Term {
    Term::Tuple(Tuple::from(elements))
}

/// A pid of the attacking (fake) node `node`.
fn our_pid(node: &str) -> Term {
    Term::Pid(eetf::Pid::new(node, 1, 0, 1))
}

/// `REG_SEND` from a pid of `from_node` to the name `to`: `{6, From, '', To}`.
fn reg_send(from_node: &str, to: &str) -> Term {
    tuple(vec![int(6), our_pid(from_node), atom(""), atom(to)])
}

/// `SEND` to `to`: `{2, '', To}`.
fn send(to: &Term) -> Term {
    tuple(vec![int(2), atom(""), to.clone()])
}

/// A versioned term.
fn etf(t: &Term) -> Vec<u8> {
    let mut out = Vec::new();
    encode_versioned(t, &mut out).expect("test terms encode");
    out
}

/// A distribution frame (4-byte length, then `body`).
fn dist_frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// A pass-through frame with the control message and payload already encoded.
fn raw_frame(ctrl: &[u8], payload: Option<&[u8]>) -> Vec<u8> {
    let mut body = vec![PASS_THROUGH];
    body.extend_from_slice(ctrl);
    body.extend_from_slice(payload.unwrap_or_default());
    dist_frame(&body)
}

/// A pass-through frame of terms.
fn term_frame(ctrl: &Term, payload: Option<&Term>) -> Vec<u8> {
    raw_frame(&etf(ctrl), payload.map(etf).as_deref())
}

/// A handshake name message ('N') with the given flags and name bytes, framed.
fn name_msg(flags: u64, name: &[u8]) -> Vec<u8> {
    let mut p = vec![b'N'];
    p.extend_from_slice(&flags.to_be_bytes());
    p.extend_from_slice(&1u32.to_be_bytes());
    p.extend_from_slice(&(name.len() as u16).to_be_bytes());
    p.extend_from_slice(name);
    frame(&p)
}

/// `levels` nested 1-tuples around `[]`, versioned: `{{{...{[]}...}}}`.
fn nested(levels: usize) -> Vec<u8> {
    let mut out = vec![VERSION];
    for _ in 0..levels {
        out.extend_from_slice(&[SMALL_TUPLE_EXT, 1]);
    }
    out.push(NIL_EXT);
    out
}

/// This process's resident set (`VmRSS` of /proc/self/status), in bytes.
fn vm_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("a VmRSS line");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS in kB");
    kib * 1024
}

/// Reads until the peer closes (end-of-file or a reset) and returns what arrived before and
/// how long it took; panics if the connection is still open after `within`.
fn closed_within(s: &mut TcpStream, within: Duration, what: &str) -> (Vec<u8>, Duration) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.saturating_sub(start.elapsed());
        assert!(!left.is_zero(), "{what}: the node did not close the connection within {within:?}");
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return (got, start.elapsed()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            // A reset: the node closed with our bytes unread.
            Err(_) => return (got, start.elapsed()),
        }
    }
}

/// The connection was closed within [`WAIT`].
fn assert_closed(mut s: TcpStream, what: &str) {
    closed_within(&mut s, WAIT, what);
}

/// The connection was closed within [`WAIT`] and the node sent nothing on it first.
fn assert_closed_silently(mut s: TcpStream, what: &str) {
    let (got, _) = closed_within(&mut s, WAIT, what);
    assert!(got.is_empty(), "{what}: the node answered {got:?} before closing");
}

/// The connection stays open for `time` (the control for the closures above: well-formed
/// traffic is not cut).
fn assert_open(s: &mut TcpStream, time: Duration, what: &str) {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = time.saturating_sub(start.elapsed());
        if left.is_zero() {
            return;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => panic!("{what}: the node closed the connection"),
            Ok(_) => {} // ticks
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// A smarm node on its own runtime thread, with an actor registered as `sink` that forwards
/// every term it receives to the test thread. Stops (bounded) on drop.
struct TestNode {
    name: String,
    addr: SocketAddr,
    node: cluster::Node,
    /// The wire form of the sink's pid.
    sink: Term,
    delivered: mpsc::Receiver<Term>,
    stop: Option<mpsc::Sender<()>>,
    stopped: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
    probes: i32,
}

impl TestNode {
    fn start(alive: &str, configure: impl FnOnce(NodeConfig) -> NodeConfig) -> TestNode {
        let name = unique(alive);
        let cfg = configure(
            NodeConfig::new(&name)
                .cookie(COOKIE)
                .epmd(Epmd::None)
                .listen("127.0.0.1".parse().unwrap())
                .ports(0, 0)
                .max_frame(MAX_FRAME)
                .quiet(true),
        );
        let (ready_tx, ready_rx) = mpsc::channel();
        let (term_tx, term_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (stopped_tx, stopped_rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _stopped = stopped_tx;
            let rt = smarm::Runtime::builder().threads(2).build().unwrap();
            rt.run(move || {
                let node = cluster::start(cfg).unwrap();
                let sink = smarm::spawn_actor(move |mb: Mailbox<RawTerm>| {
                    mb.accept_remote();
                    loop {
                        if let Envelope::Msg(RawTerm(t)) = mb.recv() {
                            if term_tx.send(t).is_err() {
                                return;
                            }
                        }
                    }
                });
                smarm::register("sink", sink.pid()).unwrap();
                let sink_term = cluster::to_term(&sink.pid()).unwrap();
                ready_tx.send((node.clone(), sink_term)).unwrap();
                smarm::spawn_blocking(move || {
                    let _ = stop_rx.recv();
                })
                .join()
                .unwrap();
            })
            .unwrap();
        });
        let (node, sink) = match ready_rx.recv_timeout(WAIT * 2) {
            Ok(r) => r,
            Err(_) => match thread.join() {
                Err(p) => std::panic::resume_unwind(p),
                Ok(()) => panic!("the node did not start"),
            },
        };
        TestNode {
            name,
            addr: SocketAddr::from(([127, 0, 0, 1], node.port())),
            node,
            sink,
            delivered: term_rx,
            stop: Some(stop_tx),
            stopped: stopped_rx,
            thread: Some(thread),
            probes: 0,
        }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect_timeout(&self.addr, WAIT).expect("the node accepts connections");
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.set_write_timeout(Some(WAIT)).unwrap();
        let _ = s.set_nodelay(true);
        s
    }

    /// A complete, correct handshake as node `me`; returns the connection and the status the
    /// node answered our name with (`Alive` is answered `true`, as a restarted node does).
    fn handshake_as(&self, me: &str, cookie: &str, flags: u64) -> Result<(TcpStream, Status), String> {
        let mut s = self.connect();
        let ours = NodeIdent { name: me.to_string(), flags, creation: 1 };
        let mut hs = Initiator::new(ours, cookie.into(), self.name.clone(), 0x5eed_1234).map_err(|e| e.to_string())?;
        s.write_all(&hs.start()).map_err(|e| e.to_string())?;
        let mut status = None;
        loop {
            let f = read_frame(&mut s).map_err(|e| format!("reading a handshake frame: {e}"))?;
            match hs.on_frame(&f).map_err(|e| e.to_string())? {
                InitiatorStep::Status(Status::Alive) => {
                    status = Some(Status::Alive);
                    s.write_all(&hs.answer_alive(true).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
                }
                InitiatorStep::Status(st @ (Status::Ok | Status::OkSimultaneous)) => status = Some(st),
                InitiatorStep::Status(st) => return Err(format!("refused: {st:?}")),
                InitiatorStep::Send(bytes) => s.write_all(&bytes).map_err(|e| e.to_string())?,
                InitiatorStep::Done(peer) => {
                    assert_eq!(peer.name, self.name);
                    return Ok((s, status.expect("a status before the end")));
                }
            }
        }
    }

    /// A completed handshake as a new node named after `alive`; returns the connection and our
    /// node name.
    fn attacker(&self, alive: &str) -> (TcpStream, String) {
        let me = unique(alive);
        let (s, _) = self.handshake_as(&me, COOKIE, OUR_FLAGS).expect("a correct handshake completes");
        (s, me)
    }

    /// The next terms the sink receives are exactly `want`, in order.
    fn expect_delivered(&self, want: &[Term], what: &str) {
        for w in want {
            match self.delivered.recv_timeout(WAIT) {
                Ok(got) => assert_eq!(&got, w, "{what}: the sink received something else first"),
                Err(_) => panic!("{what}: {w} was not delivered within {WAIT:?}"),
            }
        }
    }

    /// Proves the node healthy after `what`: a fresh handshake as `me` (a new name if `None`)
    /// completes, and a `REG_SEND` to `sink` and a `SEND` to its pid, sent on it, are delivered
    /// in order, before anything else. Returns the status the node answered the name with.
    fn assert_healthy_as(&mut self, me: Option<&str>, what: &str) -> Status {
        self.probes += 1;
        let n = self.probes;
        let me = me.map_or_else(|| unique("probe"), str::to_string);
        let (mut s, status) =
            self.handshake_as(&me, COOKIE, OUR_FLAGS).unwrap_or_else(|e| panic!("after {what}: handshake: {e}"));
        let (by_name, by_pid) = (tuple(vec![atom("by_name"), int(n)]), tuple(vec![atom("by_pid"), int(n)]));
        let mut bytes = term_frame(&reg_send(&me, "sink"), Some(&by_name));
        bytes.extend_from_slice(&term_frame(&send(&self.sink), Some(&by_pid)));
        s.write_all(&bytes).unwrap_or_else(|e| panic!("after {what}: writing the probe: {e}"));
        self.expect_delivered(&[by_name, by_pid], &format!("after {what}"));
        status
    }

    fn assert_healthy(&mut self, what: &str) {
        self.assert_healthy_as(None, what);
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        drop(self.stop.take());
        if std::thread::panicking() {
            return; // a failed test: do not risk a second panic; the thread is left behind
        }
        match self.stopped.recv_timeout(WAIT * 2) {
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("the node's runtime did not stop within {:?}", WAIT * 2),
            _ => {
                if let Some(t) = self.thread.take() {
                    if let Err(p) = t.join() {
                        std::panic::resume_unwind(p);
                    }
                }
            }
        }
    }
}

#[test]
fn the_handshake_refuses_bad_input_and_the_node_stays_healthy() {
    let _serial = serial();
    let mut node = TestNode::start("hs_target", |c| c);
    node.assert_healthy("start");

    // A frame longer than a handshake frame may be: closed on the length alone, before the
    // node reads (or allocates for) the body, which is never sent.
    for len in [HS_MAX_FRAME as u16 + 1, u16::MAX] {
        let mut s = node.connect();
        s.write_all(&len.to_be_bytes()).unwrap();
        assert_closed_silently(s, &format!("a handshake frame of {len} bytes"));
        node.assert_healthy(&format!("a handshake frame of {len} bytes"));
    }

    // Truncated: the length, part of the body, then our end closed.
    for sent in [&[0u8][..], &[0, 40, b'N', 0, 0, 0][..]] {
        let mut s = node.connect();
        s.write_all(sent).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        assert_closed_silently(s, "a truncated handshake frame");
        node.assert_healthy("a truncated handshake frame");
    }

    // The wrong cookie: the node checks our digest of its challenge and closes without the
    // challenge ack. Then the same name is welcome again (the failed attempt left no entry).
    let me = unique("wrong_cookie");
    match node.handshake_as(&me, "not_the_cookie", OUR_FLAGS) {
        Ok(_) => panic!("a handshake with the wrong cookie completed"),
        Err(e) => assert!(e.contains("reading a handshake frame"), "unexpected failure: {e}"),
    }
    assert_eq!(node.assert_healthy_as(Some(&me), "a wrong digest"), Status::Ok);

    // The same, by hand: a challenge reply with a bad digest, checked for silence.
    let mut s = node.connect();
    s.write_all(&name_msg(OUR_FLAGS, unique("bad_digest").as_bytes())).unwrap();
    let status = read_frame(&mut s).unwrap();
    assert_eq!(status, b"sok");
    let challenge = read_frame(&mut s).unwrap();
    assert_eq!(challenge.first(), Some(&b'N'));
    let mut reply = vec![b'r', 0, 0, 0, 1];
    reply.extend_from_slice(&[0xAB; 16]);
    s.write_all(&frame(&reply)).unwrap();
    assert_closed_silently(s, "a challenge reply with a bad digest");
    node.assert_healthy("a challenge reply with a bad digest");

    // Out of order: a challenge reply, a challenge ack, a status or a complement instead of
    // the name.
    let mut reply = vec![b'r', 0, 0, 0, 1];
    reply.extend_from_slice(&[0; 16]);
    let mut ack = vec![b'a'];
    ack.extend_from_slice(&[0; 16]);
    for (first, what) in [
        (reply, "a challenge reply first"),
        (ack, "a challenge ack first"),
        (b"sok".to_vec(), "a status first"),
        (vec![b'c', 0, 0, 0, 0, 0, 0, 0, 1], "a complement first"),
    ] {
        let mut s = node.connect();
        s.write_all(&frame(&first)).unwrap();
        assert_closed_silently(s, what);
        node.assert_healthy(what);
    }

    // Out of order: the name twice (the second where the challenge reply belongs).
    let me = unique("twice");
    let mut s = node.connect();
    s.write_all(&name_msg(OUR_FLAGS, me.as_bytes())).unwrap();
    assert_eq!(read_frame(&mut s).unwrap(), b"sok");
    assert_eq!(read_frame(&mut s).unwrap().first(), Some(&b'N'));
    s.write_all(&name_msg(OUR_FLAGS, me.as_bytes())).unwrap();
    assert_closed_silently(s, "the name twice");
    assert_eq!(node.assert_healthy_as(Some(&me), "the name twice"), Status::Ok);

    // Flags: without a mandatory one (and without the OTP 25 digest that implies them all),
    // and asking for a dynamic name. Refused before any status.
    for (flags, what) in [
        (DFLAG_HANDSHAKE_23, "only HANDSHAKE_23"),
        ((REQUIRED_FLAGS | OUR_FLAGS) & !DFLAG_MANDATORY_25_DIGEST & !DFLAG_MAP_TAG, "no MAP_TAG"),
        (OUR_FLAGS | DFLAG_NAME_ME, "NAME_ME"),
    ] {
        let mut s = node.connect();
        s.write_all(&name_msg(flags, unique("flags").as_bytes())).unwrap();
        assert_closed_silently(s, &format!("a name with flags {what}"));
        node.assert_healthy(&format!("a name with flags {what}"));
    }
    // Flags the node does not know are ignored, as Erlang's: the handshake completes.
    let me = unique("unknown_flags");
    node.handshake_as(&me, COOKIE, OUR_FLAGS | 1 << 60).expect("unknown flags are ignored");
    node.assert_healthy("unknown flags");

    // Invalid node names.
    let long = format!("{}@127.0.0.1", "a".repeat(250));
    for name in [
        &b"no_at_sign"[..],
        b"",
        b"@127.0.0.1",
        b"alive@",
        b"two@at@signs",
        b"sp ace@127.0.0.1",
        b"alive@.host",
        b"alive@-host",
        b"\xff\xfe@127.0.0.1",
        b"nul\0@127.0.0.1",
        long.as_bytes(),
    ] {
        let what = format!("the node name {:?}", String::from_utf8_lossy(name));
        let mut s = node.connect();
        s.write_all(&name_msg(OUR_FLAGS, name)).unwrap();
        assert_closed_silently(s, &what);
        node.assert_healthy(&what);
    }
    // Its own name: `not_allowed`, then closed.
    let mut s = node.connect();
    s.write_all(&name_msg(OUR_FLAGS, node.name.as_bytes())).unwrap();
    let (got, _) = closed_within(&mut s, WAIT, "the node's own name");
    assert_eq!(got, frame(b"snot_allowed"));
    node.assert_healthy("the node's own name");

    // Garbage instead of a name: a frame of an unknown message, a name message whose name
    // length exceeds it, one too short for its fields, and bytes that are no frame at all.
    let mut overlong = vec![b'N'];
    overlong.extend_from_slice(&OUR_FLAGS.to_be_bytes());
    overlong.extend_from_slice(&[0, 0, 0, 1, 0, 200, b'x']);
    for (bytes, what) in [
        (frame(&[0xde, 0xad, 0xbe, 0xef, 0x00, 0x42]), "an unknown handshake message"),
        (frame(&overlong), "a name length beyond the message"),
        (frame(&[b'N', 0, 0, 1]), "a name message too short for its fields"),
        (frame(&[]), "an empty handshake frame"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), "an HTTP request"),
    ] {
        let mut s = node.connect();
        s.write_all(&bytes).unwrap();
        assert_closed_silently(s, what);
        node.assert_healthy(what);
    }
}

#[test]
fn bad_frames_after_the_handshake_close_the_connection_and_the_node_stays_healthy() {
    let _serial = serial();
    let mut node = TestNode::start("conn_target", |c| c);
    node.assert_healthy("start");
    let sink_name = "sink";

    // A frame over max_frame, by one byte: closed on the length alone (the body never comes).
    let (mut s, _) = node.attacker("over_cap");
    s.write_all(&(MAX_FRAME as u32 + 1).to_be_bytes()).unwrap();
    assert_closed(s, "a frame of max_frame + 1 bytes");
    node.assert_healthy("a frame of max_frame + 1 bytes");

    // A truncated frame (length, part of the body, our end closed), nothing delivered.
    let (mut s, me) = node.attacker("truncated");
    let whole = term_frame(&reg_send(&me, sink_name), Some(&atom("truncated_must_not_arrive")));
    s.write_all(&whole[..whole.len() - 3]).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert_closed(s, "a truncated frame");
    node.assert_healthy("a truncated frame");

    // Each of these frames alone closes the connection, and nothing of it is delivered.
    let me = unique("bad_frame");
    let good_ctrl = etf(&reg_send(&me, sink_name));
    let payload = etf(&atom("must_not_arrive"));
    let mut with_trailing = payload.clone();
    with_trailing.extend_from_slice(&[0xde, 0xad]);
    let mut two_payloads = payload.clone();
    two_payloads.extend_from_slice(&payload);
    let mut cache_ref_ctrl = vec![VERSION, SMALL_TUPLE_EXT, 4];
    cache_ref_ctrl.extend_from_slice(&etf(&int(6))[1..]);
    cache_ref_ctrl.extend_from_slice(&etf(&our_pid(&me))[1..]);
    cache_ref_ctrl.extend_from_slice(&[ATOM_CACHE_REF, 0, ATOM_CACHE_REF, 1]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (dist_frame(&[113, VERSION, NIL_EXT]), "a frame starting with 113, not 112"),
        (dist_frame(&[68, 0]), "a frame with a distribution header (68), which was not negotiated"),
        (dist_frame(&[PASS_THROUGH]), "a frame with no control message"),
        (dist_frame(&[0xff; 16]), "a frame of 0xff bytes"),
        (term_frame(&tuple(vec![int(99), atom(""), node.sink.clone()]), Some(&atom("x"))), "control tag 99"),
        (term_frame(&tuple(vec![int(-1)]), None), "control tag -1"),
        (term_frame(&atom("hello"), Some(&atom("x"))), "a control message that is an atom"),
        (term_frame(&Term::from(eetf::List::from(vec![int(6), atom("sink")])), None), "a control list"),
        (term_frame(&tuple(vec![]), None), "an empty control tuple"),
        (term_frame(&tuple(vec![atom("send"), atom(""), node.sink.clone()]), None), "a control with an atom tag"),
        (term_frame(&tuple(vec![int(6)]), Some(&atom("x"))), "REG_SEND without its fields"),
        (
            term_frame(&tuple(vec![int(6), atom("nopid"), atom(""), atom("sink")]), Some(&atom("x"))),
            "REG_SEND from a non-pid",
        ),
        (term_frame(&tuple(vec![int(6), our_pid(&me), atom(""), int(5)]), Some(&atom("x"))), "REG_SEND to a non-atom"),
        (term_frame(&tuple(vec![int(2), atom(""), atom("sink")]), Some(&atom("x"))), "SEND to a non-pid"),
        (term_frame(&reg_send(&me, sink_name), None), "REG_SEND without its message"),
        (term_frame(&send(&node.sink), None), "SEND without its message"),
        (raw_frame(&[VERSION, 255], Some(&payload)), "a control message with an unknown ETF tag"),
        (raw_frame(&[VERSION, SMALL_TUPLE_EXT, 4, 97, 6], Some(&payload)), "a truncated control message"),
        (raw_frame(&[99, NIL_EXT], Some(&payload)), "a control message without the version byte"),
        (raw_frame(&good_ctrl, Some(&[VERSION, 255])), "a payload with an unknown ETF tag"),
        (raw_frame(&good_ctrl, Some(&[VERSION, ATOM_CACHE_REF, 0])), "an atom cache ref as the payload"),
        (raw_frame(&cache_ref_ctrl, Some(&payload)), "atom cache refs in the control message"),
        (raw_frame(&good_ctrl, Some(&nested(10_000))), "a payload nested 10 000 levels deep"),
        (raw_frame(&nested(10_000), Some(&payload)), "a control message nested 10 000 levels deep"),
        (raw_frame(&good_ctrl, Some(&with_trailing)), "garbage after the payload, inside the frame"),
        (raw_frame(&good_ctrl, Some(&two_payloads)), "two payloads"),
    ];
    for (bytes, what) in cases {
        assert!(bytes.len() - 4 <= MAX_FRAME, "{what}: the frame must fit max_frame to test the decoder");
        let (mut s, _) = node.attacker("bad_frame");
        s.write_all(&bytes).unwrap();
        assert_closed(s, what);
        node.assert_healthy(what);
    }

    // Garbage after a valid frame: the valid message is delivered, then the connection closed.
    for (garbage, what) in [
        (vec![0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3], "a valid frame, then 0xdeadbeef..."),
        (dist_frame(&[0x42; 8]), "a valid frame, then a frame of 0x42 bytes"),
        (vec![0, 0, 0], "a valid frame, then 3 bytes"),
    ] {
        let (mut s, me) = node.attacker("garbage_after");
        let valid = tuple(vec![atom("valid_before_garbage"), int(node.probes)]);
        let mut bytes = term_frame(&reg_send(&me, sink_name), Some(&valid));
        bytes.extend_from_slice(&garbage);
        s.write_all(&bytes).unwrap();
        if garbage.len() < 4 {
            s.shutdown(Shutdown::Write).unwrap(); // a partial length: closed at our end of file
        }
        node.expect_delivered(&[valid], what);
        assert_closed(s, what);
        node.assert_healthy(what);
    }

    // Ticks (empty frames) are fine, and a message to a pid or name with no process is dropped
    // (and counted) without closing the connection.
    let dropped = node.node.dropped();
    let (mut s, me) = node.attacker("benign");
    let dead = Term::Pid(match &node.sink {
        Term::Pid(p) => eetf::Pid::new(p.node.name.as_str(), p.id + 100_000, p.serial, p.creation),
        other => panic!("the sink's pid is {other}"),
    });
    let mut bytes = [0u8; 12].to_vec();
    bytes.extend_from_slice(&term_frame(&send(&dead), Some(&atom("to_nobody"))));
    bytes.extend_from_slice(&term_frame(&reg_send(&me, "nobody_here"), Some(&atom("to_nobody"))));
    let after = tuple(vec![atom("after_drops")]);
    bytes.extend_from_slice(&term_frame(&reg_send(&me, sink_name), Some(&after)));
    s.write_all(&bytes).unwrap();
    node.expect_delivered(&[after], "ticks and messages to nobody");
    assert_eq!(node.node.dropped(), dropped + 2, "the two messages to nobody are counted");
    assert_open(&mut s, Duration::from_millis(300), "ticks and messages to nobody");
    let again = tuple(vec![atom("still_open")]);
    s.write_all(&term_frame(&send(&node.sink), Some(&again))).unwrap();
    node.expect_delivered(&[again], "ticks and messages to nobody");
    node.assert_healthy("ticks and messages to nobody");
}

#[test]
fn a_huge_frame_length_closes_the_connection_without_allocating() {
    let _serial = serial();
    let mut node = TestNode::start("rss_target", |c| c);
    node.assert_healthy("start");
    for len in [1u32 << 30, u32::MAX] {
        let what = format!("a frame length of {len} bytes");
        let (mut s, _) = node.attacker("huge");
        let before = vm_rss();
        s.write_all(&len.to_be_bytes()).unwrap();
        s.write_all(&[PASS_THROUGH; 64]).unwrap();
        assert_closed(s, &what);
        let after = vm_rss();
        assert!(
            after < before + (8 << 20),
            "{what}: RSS grew from {} to {} KiB: the node allocated for the frame",
            before >> 10,
            after >> 10
        );
        node.assert_healthy(&what);
    }
}

#[test]
fn a_silent_peer_is_dropped_after_the_setup_time() {
    let _serial = serial();
    let setup = Duration::from_millis(300);
    let mut node = TestNode::start("setup_target", |c| c.setup_time(setup));
    node.assert_healthy("start");

    // Connected, and not a byte.
    let mut s = node.connect();
    let (got, took) = closed_within(&mut s, WAIT, "a peer that sends nothing");
    assert!(got.is_empty());
    assert!(took >= setup / 2, "closed after {took:?}, before the setup time ({setup:?})");
    node.assert_healthy("a peer that sends nothing");

    // Half a frame, then silence.
    let mut s = node.connect();
    s.write_all(&[0, 30, b'N']).unwrap();
    closed_within(&mut s, WAIT, "a peer that stops inside its name frame");
    node.assert_healthy("a peer that stops inside its name frame");

    // The name, then silence where the challenge reply belongs.
    let mut s = node.connect();
    s.write_all(&name_msg(OUR_FLAGS, unique("mute").as_bytes())).unwrap();
    assert_eq!(read_frame(&mut s).unwrap(), b"sok");
    closed_within(&mut s, WAIT, "a peer that never replies to the challenge");
    node.assert_healthy("a peer that never replies to the challenge");
}

/// A peer that completed the handshake and then sends a frame a byte at a time, slower than
/// any real peer, is dropped by the tick timeout: only whole frames count as traffic.
#[test]
fn a_frame_dripped_after_the_handshake_is_dropped_by_the_tick_timeout() {
    let _serial = serial();
    let ticktime = Duration::from_secs(1);
    let mut node = TestNode::start("drip_target", |c| c.net_ticktime(ticktime));
    node.assert_healthy("start");
    let (mut s, me) = node.attacker("drip");
    let bytes = term_frame(&reg_send(&me, "sink"), Some(&atom(&"d".repeat(200))));
    let start = Instant::now();
    let mut buf = [0u8; 256];
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    for (i, b) in bytes.iter().enumerate() {
        assert!(
            start.elapsed() < WAIT,
            "still open after {:?} and {i} of {} bytes dripped (net_ticktime {ticktime:?})",
            start.elapsed(),
            bytes.len()
        );
        if s.write_all(&[*b]).is_err() {
            break; // closed (reset)
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {} // ticks
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(_) => break,
        }
    }
    assert!(start.elapsed() >= ticktime / 2, "closed after {:?}", start.elapsed());
    node.assert_healthy("a dripped frame");
}

/// The setup time bounds each handshake step, as OTP's `net_setuptime` does, not each read: a
/// peer that sends its name a byte at a time, each byte within the setup time, must still be
/// dropped after a few setup times.
///
/// Fails today (reported, not fixed here: the fix belongs in `conn.rs`): the acceptor sets the
/// setup time as the socket's read timeout, which every byte renews, so a 1 KiB name frame
/// dripped at one byte per 150 ms holds a handshake open for about 150 s with the default 7 s
/// setup time per step, 7 s per byte, for over 2 hours.
#[test]
fn a_handshake_dripped_a_byte_at_a_time_is_dropped_after_the_setup_time() {
    let _serial = serial();
    let setup = Duration::from_millis(300);
    let mut node = TestNode::start("hs_drip_target", |c| c.setup_time(setup));
    node.assert_healthy("start");
    let mut s = node.connect();
    // A valid name message padded to the largest handshake frame (trailing bytes are allowed).
    let mut msg = name_msg(OUR_FLAGS, unique("hs_drip").as_bytes());
    msg.resize(2 + HS_MAX_FRAME, 0);
    msg[..2].copy_from_slice(&(HS_MAX_FRAME as u16).to_be_bytes());
    let start = Instant::now();
    let mut buf = [0u8; 64];
    s.set_read_timeout(Some(Duration::from_millis(150))).unwrap();
    for (i, b) in msg.iter().enumerate() {
        assert!(
            start.elapsed() < WAIT,
            "still open after {:?} and {i} of {} bytes dripped (setup time {setup:?})",
            start.elapsed(),
            msg.len()
        );
        if s.write_all(&[*b]).is_err() {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => panic!("the node answered {:?} to a partial name", &buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(_) => break,
        }
    }
    node.assert_healthy("a dripped handshake");
}
