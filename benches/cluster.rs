//! cluster: the figures of issue 14 ("Measured"): remote round trips and one-way throughput
//! on loopback between smarm and Erlang nodes, in one run that starts every node itself.
//!
//! Four nodes, all on 127.0.0.1:
//! - `A`: this process's smarm node, the smarm *driver* (it times with `Instant`);
//! - `B`: a smarm node in a child process (this binary re-executed with `--role peer ...`),
//!   a *target*;
//! - `E1`: an `erl` node, a *target*;
//! - `E2`: an `erl` node, the Erlang *driver* (it times with `erlang:monotonic_time` and
//!   prints the result; it takes its commands on stdin).
//!
//! A target runs three services (the same on both kinds of node): `echo` answers
//! `{ping, From, N}` with `{pong, N}`; `bench_srv`, a gen_server (an OTP `gen_server` on
//! `E1`, a smarm one with `ServerRef::accept_remote` on `B`), answers a call `N` with `N`;
//! `sink` counts `{msg, N}` and answers `{last, From}` with `{done, Count}`. So the pairs
//! are `smarm->smarm` (A to B), `smarm->erl` (A to E1), `erl->smarm` (E2 to B) and
//! `erl->erl` (E2 to E1), each driver addressing the services by name (`{Name, Node}`,
//! REG_SEND) as the other side does.
//!
//! Workloads, per pair:
//! - `send+reply`: `RTT_N` sequential `{ping, Self, N}` -> `{pong, N}` round trips;
//!   reported in us per round trip;
//! - `call`: `CALL_N` sequential gen_server calls (`smarm::cluster::call_named`,
//!   `gen_server:call`), with OTP's protocol (monitor, `$gen_call` with an alias, reply to the
//!   alias, demonitor); us per call;
//! - `one-way`: `TPUT_N` `{msg, N}` sent back to back, then `{last, Self}`; the time from
//!   the first send until `{done, TPUT_N}` arrives; messages/s.
//!
//! Beside the pairs, a `tcp floor` row: the same round trips as plain blocking TCP between
//! the processes of `A` and `B` (a std thread each, no runtime, no codec), the cost of waking
//! a sleeping process twice on this machine at that moment, which no node can go under
//! without busy-polling. Each row also gives the CPU time both processes of the pair used
//! per operation (every thread, `/proc/PID/task/*/schedstat`): on a shared machine it is the
//! steadier measure of what each implementation costs (given for the driver and the target apart).
//!
//! Per (workload, pair): one warm-up run, then `RUNS` runs; within a round every pair of a
//! workload runs once, in turn, so a burst of machine noise lands on all of them. Each row
//! reports the median and min..max, and the ratio to `erl->erl` beside the issue's target
//! (smarm-smarm round trip <= 0.5x erl-erl, throughput >= 2x; a mixed pair no slower than
//! erl-erl). Both smarm nodes use `available_parallelism()` scheduler threads, as `erl` uses
//! one scheduler per core by default, and `Builder::busy_poll(50 us)`, as erl's schedulers
//! busy-wait before sleeping by default (`+sbwt medium`); `SMARM_BENCH_BUSY_POLL_US=0` runs
//! the smarm nodes with smarm's default (no busy-polling), any other value sets the spin.
//!
//! Run: `cargo bench --features cluster --bench cluster` (prints the table and writes
//! `outputs/cluster.md`); `-- --quick` for a smoke test (small counts, one run, nothing
//! written); `-- rtt smarm->smarm --runs 20` runs only the named workloads (`rtt`, `call`,
//! `tput`) and pairs, 20 times (for profiling; nothing written); `SMARM_BENCH_PEER_WRAP`
//! (e.g. `strace -c -f -o FILE`) is put before the smarm peer's command line. Needs `erl` (Debian `erlang-base`). No EPMD is needed: `A` serves the EPMD
//! protocol in-process on a private port and the other nodes register with it; every child
//! is killed when the bench ends (and the children also end when their stdin closes).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use smarm::cluster::{self, NodeConfig};
use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, StartOpts};
use smarm::{Envelope, Mailbox, Pid};

const COOKIE: &str = "smarm_bench_cookie";
/// The longest any one wait (a node starting, one run) may take before the bench fails.
const WAIT: Duration = Duration::from_secs(60);

/// Work sizes (`--quick` divides them by 20).
const RTT_N: u64 = 3_000;
const CALL_N: u64 = 3_000;
const TPUT_N: u64 = 200_000;
/// Measured runs per (workload, pair), after one warm-up run.
const RUNS: usize = 7;

// ---- the messages (the serde mapping gives the Erlang terms in the comments) ----

/// `{ping, From, N}`
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum Ping {
    Ping(Pid, u64),
}

/// `{pong, N}`
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum Pong {
    Pong(u64),
}

/// `{msg, N}` and `{last, From}`
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum SinkMsg {
    Msg(u64),
    Last(Pid),
}

/// `{done, Count}`
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum Done {
    Done(u64),
}

/// The gen_server of a smarm target: a call `N` is answered `N`.
struct BenchSrv;

impl GenServer for BenchSrv {
    type Call = u64;
    type Reply = u64;
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn handle_call(&mut self, n: u64, _from: &Caller<u64>, _ctx: &Ctx<Self>) -> CallResult<u64> {
        CallResult::Reply(n)
    }
}

/// The Erlang side: the same three services, and the driver, which takes commands
/// `{rtt | call | tput, Node, N}.` on stdin and answers `result NANOSECONDS`.
const ERL_MODULE: &str = r#"
-module(smarm_bench).
-behaviour(gen_server).
-export([start/0, init/1, handle_call/3, handle_cast/2, serve/0, rtt/2, call/2, tput/2]).

start() ->
    {ok, _} = gen_server:start({local, bench_srv}, ?MODULE, [], []),
    register(echo, spawn(fun echo/0)),
    register(sink, spawn(fun() -> sink(0) end)),
    ok.

init([]) -> {ok, []}.
handle_call(N, _From, S) -> {reply, N, S}.
handle_cast(_, S) -> {noreply, S}.

echo() ->
    receive {ping, From, N} -> From ! {pong, N} end,
    echo().

sink(C) ->
    receive
        {msg, _} -> sink(C + 1);
        {last, From} -> From ! {done, C}, sink(0)
    end.

elapsed_ns(T0) -> erlang:convert_time_unit(erlang:monotonic_time() - T0, native, nanosecond).

rtt(Node, N) ->
    To = {echo, Node},
    T0 = erlang:monotonic_time(),
    rtt_loop(To, 1, N),
    elapsed_ns(T0).
rtt_loop(_, I, N) when I > N -> ok;
rtt_loop(To, I, N) ->
    To ! {ping, self(), I},
    receive {pong, I} -> rtt_loop(To, I + 1, N) after 10000 -> exit({no_pong, I}) end.

call(Node, N) ->
    To = {bench_srv, Node},
    T0 = erlang:monotonic_time(),
    call_loop(To, 1, N),
    elapsed_ns(T0).
call_loop(_, I, N) when I > N -> ok;
call_loop(To, I, N) ->
    I = gen_server:call(To, I, 10000),
    call_loop(To, I + 1, N).

tput(Node, N) ->
    To = {sink, Node},
    T0 = erlang:monotonic_time(),
    tput_loop(To, 1, N),
    To ! {last, self()},
    receive {done, N} -> elapsed_ns(T0); {done, C} -> exit({lost, N - C}) after 30000 -> exit(no_done) end.
tput_loop(_, I, N) when I > N -> ok;
tput_loop(To, I, N) ->
    To ! {msg, I},
    tput_loop(To, I + 1, N).

serve() ->
    case io:get_line("") of
        eof -> halt();
        {error, _} -> halt();
        Line ->
            {ok, Toks, _} = erl_scan:string(Line),
            {ok, {F, Node, N}} = erl_parse:parse_term(Toks),
            case catch ?MODULE:F(Node, N) of
                R when is_integer(R) -> io:format("result ~p~n", [R]);
                Other -> io:format("failed ~p~n", [Other])
            end,
            serve()
    end.
"#;

// ---- the smarm services and drivers ----

/// Starts `echo`, `sink` and `bench_srv` on this smarm node.
fn serve_targets() {
    let echo = smarm::spawn_actor(|mb: Mailbox<Ping>| {
        mb.accept_remote();
        loop {
            if let Envelope::Msg(Ping::Ping(from, n)) = mb.recv() {
                smarm::Addr::<Pong>::remote(from).send(Pong::Pong(n));
            }
        }
    });
    smarm::register("echo", echo.pid()).unwrap();
    let sink = smarm::spawn_actor(|mb: Mailbox<SinkMsg>| {
        mb.accept_remote();
        let mut count = 0u64;
        loop {
            match mb.recv() {
                Envelope::Msg(SinkMsg::Msg(_)) => count += 1,
                Envelope::Msg(SinkMsg::Last(from)) => {
                    smarm::Addr::<Done>::remote(from).send(Done::Done(count));
                    count = 0;
                }
                _ => {}
            }
        }
    });
    smarm::register("sink", sink.pid()).unwrap();
    let srv = gen_server::start_opts(BenchSrv, StartOpts { name: Some("bench_srv".into()), link: false }).unwrap();
    srv.accept_remote();
}

/// Runs `f` in a new actor with a mailbox of `M` that takes remote messages; its result.
fn in_actor<M, T>(f: impl FnOnce(&Mailbox<M>) -> T + Send + 'static) -> T
where
    M: serde::de::DeserializeOwned + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = smarm::channel::oneshot();
    smarm::spawn_actor(move |mb: Mailbox<M>| {
        mb.accept_remote();
        let _ = tx.send(f(&mb));
    });
    rx.recv().expect("the driver actor failed (see its panic above)")
}

fn expect_msg<M: std::fmt::Debug + Send + 'static>(mb: &Mailbox<M>) -> M {
    match mb.recv_timeout(WAIT) {
        Ok(Envelope::Msg(m)) => m,
        other => panic!("expected a message, got {other:?}"),
    }
}

fn smarm_rtt(node: &str, n: u64) -> Duration {
    let node = node.to_string();
    in_actor(move |mb: &Mailbox<Pong>| {
        let me = smarm::current_pid();
        let t = Instant::now();
        for i in 1..=n {
            cluster::send_named("echo", &node, &Ping::Ping(me, i));
            let Pong::Pong(j) = expect_msg(mb);
            assert_eq!(i, j, "pongs in order");
        }
        t.elapsed()
    })
}

fn smarm_call(node: &str, n: u64) -> Duration {
    let t = Instant::now();
    for i in 1..=n {
        let r: u64 = cluster::call_named("bench_srv", node, &i, WAIT).expect("a remote call");
        assert_eq!(r, i);
    }
    t.elapsed()
}

fn smarm_tput(node: &str, n: u64) -> Duration {
    let node = node.to_string();
    in_actor(move |mb: &Mailbox<Done>| {
        let me = smarm::current_pid();
        let t = Instant::now();
        for i in 1..=n {
            cluster::send_named("sink", &node, &SinkMsg::Msg(i));
        }
        cluster::send_named("sink", &node, &SinkMsg::Last(me));
        let Done::Done(c) = expect_msg(mb);
        assert_eq!(c, n, "every message arrived");
        t.elapsed()
    })
}

fn config(name: &str, epmd_port: u16) -> NodeConfig {
    NodeConfig::new(name).cookie(COOKIE).epmd_port(epmd_port).listen("127.0.0.1".parse().unwrap())
}

/// The smarm target node `B` (`--role peer NAME EPMD_PORT`): serves until stdin closes.
fn role_peer(name: String, epmd_port: u16) {
    smarm::Runtime::builder()
        .threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
        .busy_poll(busy_poll())
        .build()
        .unwrap()
        .run(move || {
            cluster::start(config(&name, epmd_port)).unwrap();
            serve_targets();
            println!("floor {}", tcp_floor_server());
            println!("ready");
            smarm::spawn_blocking(|| {
                let _ = std::io::stdin().read_to_end(&mut Vec::new());
            })
            .join()
            .unwrap();
            std::process::exit(0);
        })
        .unwrap();
}

/// The floor under a round trip on this machine: a plain blocking TCP echo on a std thread
/// (no runtime, no codec); returns its port. Frames of `FLOOR_FRAME` bytes, one connection.
fn tcp_floor_server() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let _ = s.set_nodelay(true);
        let mut buf = [0u8; FLOOR_FRAME];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
    });
    port
}

/// About the size of a `{ping, Pid, N}` distribution frame.
const FLOOR_FRAME: usize = 64;

/// `n` round trips of the floor (on the blocking pool: plain blocking I/O).
fn tcp_floor(s: &Arc<Mutex<std::net::TcpStream>>, n: u64) -> Duration {
    let s = s.clone();
    smarm::spawn_blocking(move || {
        let mut s = s.lock().unwrap();
        let mut buf = [7u8; FLOOR_FRAME];
        let t = Instant::now();
        for _ in 0..n {
            s.write_all(&buf).unwrap();
            s.read_exact(&mut buf).unwrap();
        }
        t.elapsed()
    })
    .join()
    .unwrap()
}

/// CPU time used so far by every thread of process `pid` (`/proc/PID/task/*/schedstat`).
fn cpu_time(pid: u32) -> Duration {
    let mut ns = 0u64;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(st) = std::fs::read_to_string(t.path().join("schedstat")) {
                ns += st.split_whitespace().next().and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
            }
        }
    }
    Duration::from_nanos(ns)
}

// ---- child processes ----

/// A child node (the smarm peer or an `erl`): its stdin (commands; closing it ends the
/// child) and its stdout lines. Killed on drop.
struct Node {
    name: String,
    child: Child,
    stdin: Mutex<Option<ChildStdin>>,
    lines: Mutex<mpsc::Receiver<String>>,
}

impl Node {
    fn spawn(name: &str, cmd: &mut Command) -> Arc<Node> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e} (erl: install Debian's erlang-base)"));
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stdin = Mutex::new(child.stdin.take());
        Arc::new(Node { name: name.to_string(), child, stdin, lines: Mutex::new(rx) })
    }

    /// Reads lines (bounded, on the blocking pool) until one starts with `prefix`; the rest.
    fn expect(self: &Arc<Self>, prefix: &str) -> String {
        let (me, prefix) = (self.clone(), prefix.to_string());
        smarm::spawn_blocking(move || loop {
            let l = me
                .lines
                .lock()
                .unwrap()
                .recv_timeout(WAIT)
                .unwrap_or_else(|_| panic!("no {prefix:?} from {}", me.name));
            if let Some(rest) = l.strip_prefix(&prefix) {
                return rest.to_string();
            }
            if l.starts_with("failed ") {
                panic!("{}: {l}", me.name);
            }
            eprintln!("[{}] {l}", me.name);
        })
        .join()
        .unwrap()
    }

    /// Has the Erlang driver run `{what, 'target', n}.` and returns its own timing.
    fn erl_run(self: &Arc<Self>, what: &str, target: &str, n: u64) -> Duration {
        let cmd = format!("{{{what}, '{target}', {n}}}.\n");
        self.stdin.lock().unwrap().as_mut().unwrap().write_all(cmd.as_bytes()).unwrap();
        let ns: u64 = self.expect("result ").trim().parse().expect("nanoseconds");
        Duration::from_nanos(ns)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Closing stdin ends the node; give it a moment (a profiler wrapping it writes its
        // report then), and kill it if it has not gone.
        drop(self.stdin.lock().unwrap().take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn erl_node(name: &str, epmd_port: u16, module: &std::path::Path) -> Arc<Node> {
    let script = format!(
        "{{ok, smarm_bench, Bin}} = compile:file(\"{}\", [binary, report]), \
         {{module, _}} = code:load_binary(smarm_bench, \"smarm_bench.erl\", Bin), ok = smarm_bench:start(), \
         io:format(\"ready~n\"), smarm_bench:serve().",
        module.display()
    );
    Node::spawn(
        name,
        Command::new("erl")
            .args(["-name", name, "-setcookie", COOKIE, "-noshell", "-start_epmd", "false"])
            .args(["-eval", &script])
            .env("ERL_EPMD_PORT", epmd_port.to_string())
            .env("ERL_CRASH_DUMP_SECONDS", "0"),
    )
}

// ---- the run ----

#[derive(Clone, Copy, PartialEq)]
enum Work {
    Rtt,
    Call,
    Tput,
}

impl Work {
    fn label(self) -> &'static str {
        match self {
            Work::Rtt => "send+reply round trip",
            Work::Call => "gen_server call round trip",
            Work::Tput => "one-way throughput",
        }
    }
    fn erl(self) -> &'static str {
        match self {
            Work::Rtt => "rtt",
            Work::Call => "call",
            Work::Tput => "tput",
        }
    }
}

const PAIRS: [&str; 4] = ["smarm->smarm", "smarm->erl", "erl->smarm", "erl->erl"];
/// The round-trip floor (see [`tcp_floor_server`]), between the processes of `A` and `B`.
const FLOOR: &str = "tcp floor";

struct Row {
    work: Work,
    pair: &'static str,
    n: u64,
    /// Elapsed time of each measured run.
    runs: Vec<Duration>,
    /// CPU time of the driver's and of the target's process, per run.
    cpu: Vec<[Duration; 2]>,
}

impl Row {
    /// The figure of one run: us per round trip, or messages/s.
    fn figure(&self, d: Duration) -> f64 {
        match self.work {
            Work::Tput => self.n as f64 / d.as_secs_f64(),
            _ => d.as_secs_f64() * 1e6 / self.n as f64,
        }
    }
    /// Median, min and max of the figures.
    fn stats(&self) -> (f64, f64, f64) {
        let mut v: Vec<f64> = self.runs.iter().map(|&d| self.figure(d)).collect();
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    }
    /// Median CPU time per round trip or message of the driver's and of the target's
    /// process, in us.
    fn cpu_per_op(&self) -> [f64; 2] {
        [0, 1].map(|i| {
            let mut v: Vec<f64> = self.cpu.iter().map(|d| d[i].as_secs_f64() * 1e6 / self.n as f64).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
    }
}

fn unique(p: &str) -> String {
    format!("bench_{p}_{}@127.0.0.1", std::process::id())
}

/// The smarm nodes' `Builder::busy_poll`: `BUSY_POLL_US` unless `SMARM_BENCH_BUSY_POLL_US`
/// says otherwise (0: off, smarm's default).
fn busy_poll() -> Duration {
    Duration::from_micros(
        std::env::var("SMARM_BENCH_BUSY_POLL_US").map_or(BUSY_POLL_US, |v| v.parse().expect("microseconds")),
    )
}

/// erl's schedulers busy-wait before sleeping by default (`+sbwt medium`); the smarm nodes
/// get the same chance through `Builder::busy_poll`.
const BUSY_POLL_US: u64 = 50;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--role") {
        match (args.get(i + 1).map(String::as_str), args.get(i + 2), args.get(i + 3)) {
            (Some("peer"), Some(name), Some(port)) => role_peer(name.clone(), port.parse().expect("an EPMD port")),
            _ => panic!("usage: --role peer NAME EPMD_PORT"),
        }
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let (scale, mut runs) = if quick { (20, 1) } else { (1, RUNS) };
    if let Some(r) = args.iter().position(|a| a == "--runs").and_then(|i| args.get(i + 1)) {
        runs = r.parse::<usize>().expect("--runs N").max(1);
    }
    // Filters (for profiling one cell): workloads `rtt`, `call`, `tput`, and pairs.
    let filters: Vec<String> =
        args.iter().skip(1).filter(|a| !a.starts_with("--") && a.parse::<usize>().is_err()).cloned().collect();
    let (work_f, pair_f): (Vec<String>, Vec<String>) =
        filters.iter().cloned().partition(|f| ["rtt", "call", "tput"].contains(&f.as_str()));
    let partial = !filters.is_empty() || runs != RUNS;

    let dir = std::env::temp_dir().join(format!("smarm_cluster_bench_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let module = dir.join("smarm_bench.erl");
    std::fs::write(&module, ERL_MODULE).unwrap();
    let epmd_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();

    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rows = smarm::Runtime::builder()
        .threads(threads)
        .busy_poll(busy_poll())
        .build()
        .unwrap()
        .run(move || {
            // A first: with no EPMD on the port it serves the protocol, and the others register.
            let a = cluster::start(config(&unique("a"), epmd_port)).unwrap();
            let exe = std::env::current_exe().unwrap();
            let b_name = unique("b");
            // SMARM_BENCH_PEER_WRAP="strace -c -f -o FILE" (or valgrind ...) wraps the peer.
            let wrap: Vec<String> = std::env::var("SMARM_BENCH_PEER_WRAP")
                .map(|w| w.split_whitespace().map(String::from).collect())
                .unwrap_or_default();
            let mut cmd = match wrap.split_first() {
                Some((prog, rest)) => {
                    let mut c = Command::new(prog);
                    c.args(rest).arg(&exe);
                    c
                }
                None => Command::new(&exe),
            };
            let b = Node::spawn(&b_name, cmd.args(["--role", "peer", &b_name, &epmd_port.to_string()]));
            let e1 = erl_node(&unique("e1"), epmd_port, &module);
            let e2 = erl_node(&unique("e2"), epmd_port, &module);
            let floor_port: u16 = b.expect("floor ").parse().unwrap();
            for n in [&b, &e1, &e2] {
                n.expect("ready");
            }
            let floor = Arc::new(Mutex::new(std::net::TcpStream::connect(("127.0.0.1", floor_port)).unwrap()));
            floor.lock().unwrap().set_nodelay(true).unwrap();
            let (pa, pb, pe1, pe2) = (std::process::id(), b.child.id(), e1.child.id(), e2.child.id());
            eprintln!(
                "cluster bench: nodes {} (driver), {}, {}, {} (driver); {} scheduler threads",
                a.name(),
                b.name,
                e1.name,
                e2.name,
                threads
            );
            let mut rows = Vec::new();
            for work in [Work::Rtt, Work::Call, Work::Tput] {
                if !work_f.is_empty() && !work_f.iter().any(|f| f == work.erl()) {
                    continue;
                }
                let n = match work {
                    Work::Rtt => RTT_N,
                    Work::Call => CALL_N,
                    Work::Tput => TPUT_N,
                } / scale;
                let one = |pair: &str| -> (Duration, [Duration; 2]) {
                    let procs = match pair {
                        "smarm->smarm" | FLOOR => [pa, pb],
                        "smarm->erl" => [pa, pe1],
                        "erl->smarm" => [pe2, pb],
                        _ => [pe2, pe1],
                    };
                    let cpu = || procs.map(cpu_time);
                    let cpu0 = cpu();
                    let d = match pair {
                        FLOOR => tcp_floor(&floor, n),
                        "smarm->smarm" | "smarm->erl" => {
                            let target = if pair == "smarm->smarm" { &b.name } else { &e1.name };
                            match work {
                                Work::Rtt => smarm_rtt(target, n),
                                Work::Call => smarm_call(target, n),
                                Work::Tput => smarm_tput(target, n),
                            }
                        }
                        _ => {
                            let target = if pair == "erl->smarm" { &b.name } else { &e1.name };
                            e2.erl_run(work.erl(), target, n)
                        }
                    };
                    let cpu1 = cpu();
                    (d, [0, 1].map(|i| cpu1[i].saturating_sub(cpu0[i])))
                };
                let floor_pair = (work == Work::Rtt).then_some(FLOOR);
                let mut these: Vec<Row> = PAIRS
                    .iter()
                    .copied()
                    .chain(floor_pair)
                    .filter(|&pair| pair_f.is_empty() || pair_f.iter().any(|f| f == pair))
                    .map(|pair| Row { work, pair, n, runs: Vec::new(), cpu: Vec::new() })
                    .collect();
                for round in 0..=runs {
                    for row in these.iter_mut() {
                        let (d, cpu) = one(row.pair);
                        if round > 0 {
                            row.runs.push(d);
                            row.cpu.push(cpu);
                        }
                    }
                }
                for row in &these {
                    let (med, _, _) = row.stats();
                    eprintln!("  {} {}: {med:.1}", work.label(), row.pair);
                }
                rows.extend(these);
            }
            assert_eq!(a.dropped(), 0, "node A dropped messages");
            drop((b, e1, e2));
            rows
        })
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let report = report(&rows, runs, scale);
    println!("{report}");
    if !quick && !partial {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("outputs/cluster.md");
        std::fs::write(&path, &report).unwrap();
        eprintln!("written to {}", path.display());
    }
}

/// The issue's target for a pair, as (ratio to erl->erl, true if higher is better, label).
fn target(work: Work, pair: &str) -> Option<(f64, bool, &'static str)> {
    let tput = work == Work::Tput;
    match pair {
        "smarm->smarm" if tput => Some((2.0, true, ">= 2x erl->erl")),
        "smarm->smarm" => Some((0.5, false, "<= 0.5x erl->erl")),
        "smarm->erl" | "erl->smarm" if tput => Some((1.0, true, ">= erl->erl")),
        "smarm->erl" | "erl->smarm" => Some((1.0, false, "<= erl->erl")),
        _ => None,
    }
}

fn report(rows: &[Row], runs: usize, scale: u64) -> String {
    let mut s = String::new();
    s.push_str("# Cluster: remote round trips and throughput on loopback (issue 14)\n\n");
    s.push_str(&format!("- date: {}\n- commit: {}\n- machine: {}\n", date(), commit(), machine()));
    s.push_str(&format!("- erl: {}\n", erl_version()));
    s.push_str("- command: `cargo bench --features cluster --bench cluster`\n");
    s.push_str(&format!(
        "- each row: median and min..max of {runs} runs after a warm-up run; round trips {} and calls {} in a \
         row per run, throughput {} messages per run{}\n",
        RTT_N / scale,
        CALL_N / scale,
        TPUT_N / scale,
        if scale > 1 { " (--quick)" } else { "" }
    ));
    s.push_str(
        "- pairs: driver->target. smarm timed with `Instant`, erl with `erlang:monotonic_time`; both smarm \
         nodes run available_parallelism() scheduler threads, erl its defaults\n",
    );
    s.push_str(&format!(
        "- smarm nodes' `Builder::busy_poll`: {} us (erl busy-waits by default, `+sbwt medium`; \
         `SMARM_BENCH_BUSY_POLL_US=0` is smarm's default)\n",
        busy_poll().as_micros()
    ));
    s.push_str(&format!(
        "- `{FLOOR}`: the same round trips as plain blocking TCP ({FLOOR_FRAME}-byte frames, one std thread per \
         process, no runtime, no codec) between the two processes of the smarm->smarm pair: what waking a \
         sleeping process twice costs on this machine now\n",
    ));
    s.push_str(
        "- CPU: the CPU time of the driver's process + the target's (every thread, from \
         /proc/PID/task/*/schedstat) per round trip or message, medians over the runs; erl's includes its \
         schedulers' busy-waiting (erl's default `+sbwt medium`)\n\n",
    );
    s.push_str(
        "| workload | pair | median | min..max | unit | ratio to erl->erl | target | met | CPU us per op: driver + target |\n",
    );
    s.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let (med, lo, hi) = r.stats();
        let base = rows.iter().find(|b| b.work == r.work && b.pair == "erl->erl").map(|b| b.stats().0);
        let (unit, fmt): (&str, fn(f64) -> String) = match r.work {
            Work::Tput => ("messages/s", |x| group(x.round() as u64)),
            _ => ("us per round trip", |x| format!("{x:.1}")),
        };
        let ratio = base.map(|b| med / b);
        let (tgt, met) = match (target(r.work, r.pair), ratio) {
            (Some((t, higher, label)), Some(q)) => {
                (label.to_string(), if (higher && q >= t) || (!higher && q <= t) { "yes" } else { "no" })
            }
            _ => ("-".to_string(), "-"),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {}..{} | {unit} | {} | {tgt} | {met} | {:.2} + {:.2} |\n",
            r.work.label(),
            r.pair,
            fmt(med),
            fmt(lo),
            fmt(hi),
            ratio.map_or("-".to_string(), |q| format!("{q:.2}")),
            r.cpu_per_op()[0],
            r.cpu_per_op()[1]
        ));
    }
    s
}

/// 1234567 -> "1,234,567".
fn group(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn erl_version() -> String {
    Command::new("erl")
        .args([
            "-noshell",
            "-eval",
            "io:format(\"OTP ~s, erts ~s\", [erlang:system_info(otp_release), erlang:system_info(version)]), halt().",
        ])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

/// "model name, N cores" from /proc/cpuinfo.
fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_owned()))
        .unwrap_or_else(|| "unknown cpu".to_owned());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cores} cores")
}

fn commit() -> String {
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Now (UTC) as YYYY-MM-DD HH:MM (civil-from-days, H. Hinnant).
fn date() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}
