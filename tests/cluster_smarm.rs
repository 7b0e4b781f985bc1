//! smarm nodes in separate processes: this test binary re-executes itself with a role
//! (`--role echo ...`) to run the other node. No EPMD is started: the first node serves the
//! EPMD protocol in-process and the second registers with it (two smarm processes find each
//! other with no setup).
//!
//! `harness = false`: `main` runs the scenarios in order and exits non-zero on the first
//! failure (a panic), or runs a role when asked to.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use smarm::cluster::{self, NodeConfig, NodeEvent};
use smarm::{Envelope, Mailbox, Pid};

const COOKIE: &str = "smarm_pair_cookie";
const WAIT: Duration = Duration::from_secs(30);

fn config(name: &str, epmd_port: u16, cookie: &str) -> NodeConfig {
    NodeConfig::new(name)
        .cookie(cookie)
        .epmd_port(epmd_port)
        .listen("127.0.0.1".parse().unwrap())
        .net_ticktime(Duration::from_secs(2))
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Echo {
    Ping(Pid, u64),
    Pong(Pid, u64),
    /// Asks the echo node to call `calc` on the given node with `Add(n)` and answer
    /// `Pong(self, result)`.
    CallBack(Pid, String, u64),
    /// Asks how many members the echo node sees in `workers`: `Pong(self, count)`.
    PgCount(Pid),
    /// A payload to count: the echo node answers `Pong(self, n)` after the `n`-th blob whose
    /// second field is true.
    Blob(Pid, bool, Vec<u8>),
}

/// A gen_server on both nodes: `{add, N}` adds to a total and returns it.
struct Calc(u64);

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum CalcCall {
    Add(u64),
}

impl smarm::gen_server::GenServer for Calc {
    type Call = CalcCall;
    type Reply = u64;
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn handle_call(
        &mut self,
        CalcCall::Add(n): CalcCall,
        _: &smarm::gen_server::Caller<u64>,
        _: &smarm::gen_server::Ctx<Self>,
    ) -> smarm::gen_server::CallResult<u64> {
        self.0 += n;
        smarm::gen_server::CallResult::Reply(self.0)
    }
}

fn start_calc() {
    let opts = smarm::gen_server::StartOpts { name: Some("calc".into()), link: false };
    smarm::gen_server::start_opts(Calc(0), opts).unwrap().accept_remote();
}

/// The other node: an `echo` actor (see [`Echo`]), a `calc` server, the echo actor in the
/// `pg` group `workers`; commands on stdin (`connect <node>`, `disconnect <node>`) until
/// stdin closes.
fn role_echo(name: &str, port: u16, cookie: &str) {
    let (name, cookie) = (name.to_string(), cookie.to_string());
    let rt = smarm::Runtime::builder().threads(2).build().unwrap();
    rt.run(move || {
        cluster::start(config(&name, port, &cookie)).unwrap();
        start_calc();
        let echo = smarm::spawn_actor(|mb: Mailbox<Echo>| {
            mb.accept_remote();
            let me = smarm::current_pid();
            let (mut blobs, mut bytes) = (0u64, 0u64);
            loop {
                let reply = match mb.recv() {
                    Envelope::Msg(Echo::Ping(from, n)) => (from, n),
                    Envelope::Msg(Echo::CallBack(from, node, n)) => {
                        (from, cluster::call_named("calc", &node, &CalcCall::Add(n), WAIT).unwrap())
                    }
                    Envelope::Msg(Echo::PgCount(from)) => (from, smarm::pg::members("workers").len() as u64),
                    Envelope::Msg(Echo::Blob(from, last, data)) => {
                        blobs += 1;
                        bytes += data.len() as u64;
                        if !last {
                            continue;
                        }
                        (from, blobs * 1_000_000_000 + bytes)
                    }
                    _ => continue,
                };
                smarm::Addr::<Echo>::remote(reply.0).send(Echo::Pong(me, reply.1));
            }
        });
        smarm::register("echo", echo.pid()).unwrap();
        smarm::pg::join("workers", echo.pid()).unwrap();
        println!("ready");
        let (tx, rx) = smarm::channel::channel::<String>();
        smarm::spawn_blocking(move || {
            for line in std::io::stdin().lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        while let Ok(line) = rx.recv() {
            if let Some(node) = line.strip_prefix("connect ") {
                let ok = smarm::connect(node);
                println!("connected {ok} {:?}", smarm::nodes());
            } else if let Some(node) = line.strip_prefix("disconnect ") {
                // Returns once the connection is gone, whoever closed it.
                smarm::disconnect(node);
                println!("disconnected {:?}", smarm::nodes());
            }
        }
    })
    .unwrap();
}

/// A child process running a role; killed on drop.
struct Peer {
    child: Child,
    stdin: Mutex<Option<std::process::ChildStdin>>,
    lines: Mutex<mpsc::Receiver<String>>,
    name: String,
}

impl Peer {
    fn start(role: &str, name: &str, port: u16, cookie: &str) -> Arc<Peer> {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--role", role, name, &port.to_string(), cookie])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let stdin = Mutex::new(child.stdin.take());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Arc::new(Peer { child, stdin, lines: Mutex::new(rx), name: name.to_string() })
    }

    /// Waits (bounded, on the blocking pool when called from an actor) for an output line.
    fn expect(self: &Arc<Self>, want: &str) {
        let (me, want) = (self.clone(), want.to_string());
        let line = move || loop {
            let l = me.lines.lock().unwrap().recv_timeout(WAIT).expect("peer output in time");
            if l == want {
                return;
            }
        };
        smarm::spawn_blocking(line).join().unwrap();
    }

    /// Waits (bounded) for a line starting with `prefix`; returns the rest.
    fn expect_prefix(self: &Arc<Self>, prefix: &str) -> String {
        let (me, prefix) = (self.clone(), prefix.to_string());
        let line = move || loop {
            let l = me.lines.lock().unwrap().recv_timeout(WAIT).expect("peer output in time");
            if let Some(rest) = l.strip_prefix(&prefix) {
                return rest.to_string();
            }
        };
        smarm::spawn_blocking(line).join().unwrap()
    }

    fn say(&self, line: &str) {
        let mut stdin = self.stdin.lock().unwrap();
        writeln!(stdin.as_mut().unwrap(), "{line}").unwrap();
    }

    fn signal(&self, sig: &str) {
        Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status().unwrap();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.stdin.lock().unwrap().take());
        self.signal("CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn unique(p: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{p}_{}_{}@127.0.0.1", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    smarm::Runtime::builder().threads(2).build().unwrap().run(f).unwrap()
}

#[derive(Debug)]
enum In {
    Echo(Echo),
    Node(NodeEvent),
}
impl From<NodeEvent> for In {
    fn from(e: NodeEvent) -> In {
        In::Node(e)
    }
}
impl<'de> Deserialize<'de> for In {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<In, D::Error> {
        Echo::deserialize(d).map(In::Echo)
    }
}

/// Sends by name and by pid both ways, in order, with node monitoring.
fn sends_both_ways() {
    let port = free_port();
    let peer = Peer::start("echo", &unique("echo_a"), port, COOKIE);
    run(move || {
        peer.expect("ready");
        cluster::start(config(&unique("main_a"), port, COOKIE)).unwrap();
        let (tx, rx) = smarm::channel::oneshot();
        let p = peer.clone();
        let me = smarm::spawn_actor(move |mb: Mailbox<In>| {
            mb.accept_remote();
            cluster::monitor_nodes(&mb.addr());
            let me = smarm::current_pid();
            for n in 0..100 {
                cluster::send_named("echo", &p.name, &Echo::Ping(me, n));
            }
            let Envelope::Msg(In::Node(NodeEvent::Up(up))) = mb.recv() else { panic!("nodeup first") };
            assert_eq!(up, p.name);
            let mut echo_pid = None;
            for n in 0..100 {
                match mb.recv() {
                    Envelope::Msg(In::Echo(Echo::Pong(from, m))) => {
                        assert_eq!(m, n, "in order");
                        assert!(from.is_remote());
                        echo_pid = Some(from);
                    }
                    other => panic!("{other:?}"),
                }
            }
            // By pid now.
            let echo = smarm::Addr::<Echo>::remote(echo_pid.unwrap());
            echo.send(Echo::Ping(me, 1000));
            let Envelope::Msg(In::Echo(Echo::Pong(_, 1000))) = mb.recv() else { panic!("pong by pid") };
            assert_eq!(smarm::nodes(), vec![p.name.clone()]);
            assert!(smarm::disconnect(&p.name));
            let Envelope::Msg(In::Node(NodeEvent::Down(down))) = mb.recv() else { panic!("nodedown") };
            assert_eq!(down, p.name);
            assert!(smarm::nodes().is_empty());
            // A send reconnects on demand.
            echo.send(Echo::Ping(me, 2000));
            let Envelope::Msg(In::Node(NodeEvent::Up(_))) = mb.recv() else { panic!("nodeup again") };
            let Envelope::Msg(In::Echo(Echo::Pong(_, 2000))) = mb.recv() else { panic!("pong after reconnect") };
            tx.send(()).unwrap();
        });
        let _ = me;
        rx.recv().unwrap();
    });
}

/// A remote monitor and link, then the peer is killed (`KILL`) or stopped (`STOP`).
fn lose_peer(sig: &'static str) {
    let port = free_port();
    let peer = Peer::start("echo", &unique("echo_b"), port, COOKIE);
    run(move || {
        peer.expect("ready");
        cluster::start(config(&unique("main_b"), port, COOKIE)).unwrap();
        let (tx, rx) = smarm::channel::channel();
        let p = peer.clone();
        let _a = smarm::spawn_actor(move |mb: Mailbox<In>| {
            mb.accept_remote();
            smarm::trap_exit(true);
            cluster::send_named("echo", &p.name, &Echo::Ping(smarm::current_pid(), 1));
            let Envelope::Msg(In::Echo(Echo::Pong(echo, 1))) = mb.recv() else { panic!("pong") };
            let m = smarm::monitor(echo);
            smarm::link(echo).unwrap();
            tx.send(()).unwrap();
            let mut got = Vec::new();
            while got.len() < 2 {
                match mb.recv() {
                    Envelope::Down(d) if d.monitor == m => got.push(format!("down {}", d.reason)),
                    Envelope::Exit(x) if x.from == echo => got.push(format!("exit {}", x.reason)),
                    other => panic!("{other:?}"),
                }
            }
            got.sort();
            assert_eq!(got, ["down noconnection", "exit noconnection"]);
            tx.send(()).unwrap();
        });
        rx.recv().unwrap();
        peer.signal(sig);
        rx.recv().unwrap();
    });
}

/// A monitor of a pid on a node nobody can reach fires at once with noconnection.
fn unreachable_node_monitor_fires_at_once() {
    let port = free_port();
    run(move || {
        cluster::start(config(&unique("main_c"), port, COOKIE)).unwrap();
        // A pid of a node that does not exist: learned from a term, as any remote pid is.
        let ghost: Pid =
            cluster::from_term(cluster::Term::Pid(cluster::eetf::Pid::new("ghost@127.0.0.1", 1, 0, 1))).unwrap();
        let h = smarm::spawn(move || {
            let m = smarm::monitor(ghost);
            match smarm::recv_signal() {
                smarm::Signal::Down(d) => (d.monitor == m, d.reason),
                other => panic!("{other:?}"),
            }
        });
        assert_eq!(h.join().unwrap(), (true, smarm::DownReason::NoConnection));
    });
}

/// gen_server calls both ways between smarm nodes.
fn calls_both_ways() {
    let port = free_port();
    let peer = Peer::start("echo", &unique("echo_e"), port, COOKIE);
    run(move || {
        peer.expect("ready");
        let main = unique("main_e");
        cluster::start(config(&main, port, COOKIE)).unwrap();
        start_calc();
        // main -> peer
        assert_eq!(cluster::call_named::<u64>("calc", &peer.name, &CalcCall::Add(5), WAIT), Ok(5));
        assert_eq!(cluster::call_named::<u64>("calc", &peer.name, &CalcCall::Add(2), WAIT), Ok(7));
        // peer -> main, asked through its echo actor
        let (tx, rx) = smarm::channel::oneshot();
        let p = peer.clone();
        smarm::spawn_actor(move |mb: Mailbox<Echo>| {
            mb.accept_remote();
            cluster::send_named("echo", &p.name, &Echo::CallBack(smarm::current_pid(), main.clone(), 40));
            let Envelope::Msg(Echo::Pong(_, r)) = mb.recv() else { panic!("pong") };
            tx.send(r).unwrap();
        });
        assert_eq!(rx.recv(), Ok(40));
        assert_eq!(smarm::gen_server::named::<Calc>("calc").unwrap().call(CalcCall::Add(2)), Ok(42));
    });
}

/// pg groups span smarm nodes; a lost node's members leave.
fn pg_both_ways() {
    use smarm::pg::{self, PgEvent};
    let port = free_port();
    let peer = Peer::start("echo", &unique("echo_f"), port, COOKIE);
    run(move || {
        peer.expect("ready");
        cluster::start(config(&unique("main_f"), port, COOKIE)).unwrap();
        let (_, events) = pg::monitor_scope();
        let (done_tx, done_rx) = smarm::channel::oneshot::<()>();
        let p = peer.clone();
        let (tx, rx) = smarm::channel::channel();
        let me = smarm::spawn_actor(move |mb: Mailbox<Echo>| {
            mb.accept_remote();
            smarm::pg::join("workers", smarm::current_pid()).unwrap();
            assert!(smarm::connect(&p.name));
            // Ask until the peer counts both members (its view converges after the sync).
            for _ in 0..1000 {
                cluster::send_named("echo", &p.name, &Echo::PgCount(smarm::current_pid()));
                let Envelope::Msg(Echo::Pong(_, n)) = mb.recv() else { panic!("pong") };
                if n == 2 {
                    tx.send(()).unwrap();
                    break;
                }
                smarm::yield_now();
            }
            let _ = done_rx.recv();
        });
        rx.recv_timeout(WAIT).expect("the peer sees our member");
        let remote = loop {
            match events.recv_timeout(WAIT).expect("a pg event") {
                PgEvent::Join { group, pids } if group == "workers" && pids[0].is_remote() => break pids[0],
                _ => {}
            }
        };
        assert_eq!(pg::members("workers").len(), 2);
        assert_eq!(pg::local_members("workers"), [me.pid()]);
        peer.signal("KILL");
        loop {
            match events.recv_timeout(WAIT).expect("a pg event") {
                PgEvent::Leave { group, pids } if group == "workers" && pids == [remote] => break,
                _ => {}
            }
        }
        assert_eq!(pg::members("workers"), [me.pid()]);
        done_tx.send(()).unwrap();
    });
}

/// Both nodes connect to each other at once: one connection survives on both sides, and
/// both `connect`s return with it up. Several rounds, each ending with both sides
/// disconnecting, so the two handshakes cross in several orders (the peer's arriving before
/// ours starts, ours being refused, ours cancelled by the peer's, a late one after a
/// disconnect).
fn simultaneous_connect() {
    const ROUNDS: usize = 12;
    let port = free_port();
    let peer = Peer::start("echo", &unique("echo_g"), port, COOKIE);
    run(move || {
        peer.expect("ready");
        let main = unique("main_g");
        cluster::start(config(&main, port, COOKIE)).unwrap();
        for round in 0..ROUNDS {
            peer.say(&format!("connect {main}"));
            assert!(smarm::connect(&peer.name), "round {round}");
            assert_eq!(peer.expect_prefix("connected "), format!("true [{main:?}]"), "round {round}");
            assert_eq!(smarm::nodes(), vec![peer.name.clone()], "round {round}");
            if round + 1 < ROUNDS {
                // Both sides drop the connection. Nothing is asserted about what follows: a
                // `pg` discover still in flight may make its scope monitor the peer's again,
                // which connects on demand (as in OTP); the next round then meets that
                // handshake or its connection.
                smarm::disconnect(&peer.name);
                peer.say(&format!("disconnect {main}"));
                peer.expect_prefix("disconnected ");
            }
        }
        // The surviving connection carries messages both ways.
        let (tx, rx) = smarm::channel::oneshot();
        let p = peer.clone();
        smarm::spawn_actor(move |mb: Mailbox<Echo>| {
            mb.accept_remote();
            cluster::send_named("echo", &p.name, &Echo::Ping(smarm::current_pid(), 9));
            let Envelope::Msg(Echo::Pong(_, 9)) = mb.recv() else { panic!("pong") };
            tx.send(()).unwrap();
        });
        rx.recv().unwrap();
    });
}

/// A sender to a stopped peer parks once the connection's buffer is over the busy limit:
/// the buffer never holds more than the limit and one frame; everything arrives once the
/// peer runs again.
fn busy_limit_bounds_the_output_buffer() {
    const LIMIT: usize = 256 << 10;
    const BLOB: usize = 64 << 10;
    const N: u64 = 200;
    let port = free_port();
    let peer = Peer::start("echo", &unique("echo_h"), port, COOKIE);
    run(move || {
        peer.expect("ready");
        let node = cluster::start(config(&unique("main_h"), port, COOKIE).busy_limit(LIMIT)).unwrap();
        assert!(smarm::connect(&peer.name));
        peer.signal("STOP");
        let (tx, rx) = smarm::channel::oneshot();
        let (p, n2) = (peer.clone(), node.clone());
        smarm::spawn_actor(move |mb: Mailbox<Echo>| {
            mb.accept_remote();
            let me = smarm::current_pid();
            let mut most = 0;
            for i in 1..=N {
                cluster::send_named("echo", &p.name, &Echo::Blob(me, i == N, vec![7u8; BLOB]));
                most = most.max(n2.queued_bytes(&p.name).unwrap());
            }
            let Envelope::Msg(Echo::Pong(_, got)) = mb.recv() else { panic!("pong") };
            tx.send((most, got)).unwrap();
        });
        // Wait (bounded) until the sender has filled the buffer, then let the peer run.
        let deadline = std::time::Instant::now() + WAIT;
        while node.queued_bytes(&peer.name).unwrap() < LIMIT {
            assert!(std::time::Instant::now() < deadline, "the buffer never filled");
            smarm::sleep(Duration::from_millis(2));
        }
        peer.signal("CONT");
        let (most, got) = rx.recv().unwrap();
        assert!(most <= LIMIT + BLOB + 1024, "the buffer held {most} bytes (limit {LIMIT})");
        assert_eq!(got, N * 1_000_000_000 + N * BLOB as u64, "every blob arrived");
    });
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A node that ends with its runtime leaves no socket behind: three runtimes in a row, each
/// with a node that connects to the peer and exchanges a message.
fn nodes_end_with_their_runtime() {
    let port = free_port();
    let peer = Peer::start("echo", &unique("echo_i"), port, COOKIE);
    let p = peer.clone();
    run(move || p.expect("ready"));
    let before = open_fds();
    for round in 0..3 {
        let p = peer.clone();
        run(move || {
            cluster::start(config(&unique("main_i"), port, COOKIE)).unwrap();
            let (tx, rx) = smarm::channel::oneshot();
            smarm::spawn_actor(move |mb: Mailbox<Echo>| {
                mb.accept_remote();
                cluster::send_named("echo", &p.name, &Echo::Ping(smarm::current_pid(), round));
                let Envelope::Msg(Echo::Pong(_, n)) = mb.recv() else { panic!("pong") };
                tx.send(n).unwrap();
            });
            assert_eq!(rx.recv(), Ok(round));
        });
        assert_eq!(open_fds(), before, "file descriptors left open after round {round}");
    }
}

/// An idle connection outlives the setup time: the handshake's read deadline ends with the
/// handshake (ticks every 0.5 s, setup time 0.1 s, 1.5 s of silence but for ticks).
fn idle_connections_outlive_the_setup_time() {
    let port = free_port();
    let peer = Peer::start("echo", &unique("echo_j"), port, COOKIE);
    run(move || {
        peer.expect("ready");
        let cfg = config(&unique("main_j"), port, COOKIE).setup_time(Duration::from_millis(100));
        cluster::start(cfg).unwrap();
        let (tx, rx) = smarm::channel::oneshot();
        let p = peer.clone();
        smarm::spawn_actor(move |mb: Mailbox<In>| {
            mb.accept_remote();
            cluster::monitor_nodes(&mb.addr());
            assert!(smarm::connect(&p.name));
            let Envelope::Msg(In::Node(NodeEvent::Up(_))) = mb.recv() else { panic!("nodeup") };
            // Nothing but ticks for 1.5 s: no NodeDown may arrive.
            let quiet = mb.recv_timeout(Duration::from_millis(1500));
            assert!(quiet.is_err(), "{quiet:?}");
            cluster::send_named("echo", &p.name, &Echo::Ping(smarm::current_pid(), 3));
            let Envelope::Msg(In::Echo(Echo::Pong(_, 3))) = mb.recv() else { panic!("pong") };
            tx.send(()).unwrap();
        });
        rx.recv().unwrap();
    });
}

fn wrong_cookie_is_refused() {
    let port = free_port();
    let peer = Peer::start("echo", &unique("echo_d"), port, "other_cookie");
    run(move || {
        peer.expect("ready");
        cluster::start(config(&unique("main_d"), port, COOKIE).quiet(true)).unwrap();
        assert!(!smarm::connect(&peer.name));
        assert!(smarm::nodes().is_empty());
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--role") {
        match args[2].as_str() {
            "echo" => role_echo(&args[3], args[4].parse().unwrap(), &args[5]),
            r => panic!("unknown role {r}"),
        }
        return;
    }
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-'));
    let scenarios: &[(&str, fn())] = &[
        ("sends_both_ways", sends_both_ways),
        ("sigkill_gives_noconnection", || lose_peer("KILL")),
        ("sigstop_detected_by_ticks", || lose_peer("STOP")),
        ("unreachable_node_monitor_fires_at_once", unreachable_node_monitor_fires_at_once),
        ("wrong_cookie_is_refused", wrong_cookie_is_refused),
        ("calls_both_ways", calls_both_ways),
        ("pg_both_ways", pg_both_ways),
        ("simultaneous_connect", simultaneous_connect),
        ("busy_limit_bounds_the_output_buffer", busy_limit_bounds_the_output_buffer),
        ("nodes_end_with_their_runtime", nodes_end_with_their_runtime),
        ("idle_connections_outlive_the_setup_time", idle_connections_outlive_the_setup_time),
    ];
    for (name, f) in scenarios {
        if filter.is_some_and(|flt| !name.contains(flt.as_str())) {
            continue;
        }
        eprintln!("cluster_smarm {name} ...");
        f();
        eprintln!("cluster_smarm {name} ok");
    }
}
