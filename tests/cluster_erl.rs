//! A smarm node against real Erlang nodes (OTP 25+, Debian `erlang-base`) on loopback: ping,
//! sends both ways, registered names, remote monitors and links with the peer killed or
//! stopped, wrong cookies and names, and the in-process EPMD.
//!
//! Each test runs its own private `epmd` (or none, for the in-process one) and `erl` nodes
//! with unique names and a 2 s `net_ticktime`; every wait is bounded.
#![cfg(feature = "cluster")]

#[path = "common/erl.rs"]
mod erl;

use std::sync::Arc;
use std::time::Duration;

use erl::{unique, Epmd, Erl};
use serde::{Deserialize, Serialize};
use smarm::cluster::{self, NodeConfig, NodeEvent};
use smarm::{DownReason, Envelope, Mailbox, Pid, Signal};

const COOKIE: &str = "smarm_test_cookie";

fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    smarm::Runtime::builder().threads(2).build().unwrap().run(f).unwrap()
}

fn config(alive: &str, epmd_port: u16) -> NodeConfig {
    NodeConfig::new(&format!("{alive}@127.0.0.1"))
        .cookie(COOKIE)
        .epmd_port(epmd_port)
        .listen("127.0.0.1".parse().unwrap())
        .net_ticktime(Duration::from_secs(2))
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum EchoReq {
    Ping(Pid),
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum EchoReply {
    Pong(String),
}

/// Starts an actor registered as `echo` that answers `{ping, From}` with `{pong, <<"hi">>}`.
fn spawn_echo() {
    let echo = smarm::spawn_actor(|mb: Mailbox<EchoReq>| {
        mb.accept_remote();
        while let Envelope::Msg(EchoReq::Ping(from)) = mb.recv() {
            smarm::Addr::<EchoReply>::remote(from).send(EchoReply::Pong("hi".into()));
        }
    });
    smarm::register("echo", echo.pid()).unwrap();
}

#[test]
fn erl_pings_and_calls_into_smarm() {
    let epmd = Epmd::start();
    let me = unique("smarm_a");
    let port = epmd.port;
    run(move || {
        let node = cluster::start(config(&me, port)).unwrap();
        assert_eq!(smarm::node().as_deref(), Some(node.name()));
        spawn_echo();
        let script = format!(
            "S = '{me}@127.0.0.1', io:format(\"ping ~p~n\", [net_adm:ping(S)]), \
             {{echo, S}} ! {{ping, self()}}, \
             receive M -> io:format(\"reply ~p~n\", [M]) after 10000 -> io:format(\"reply timeout~n\") end, \
             io:format(\"nodes ~p~n\", [nodes()]), \
             io:format(\"rpc ~p~n\", [rpc:call(S, erlang, node, [], 5000)]), halt()."
        );
        let erl = Arc::new(Erl::start(&unique("erl_a"), COOKIE, port, &script));
        assert_eq!(erl.expect_in_actor("ping "), "pong");
        assert_eq!(erl.expect_in_actor("reply "), "{pong,<<\"hi\">>}");
        assert_eq!(erl.expect_in_actor("nodes "), format!("['{me}@127.0.0.1']"));
        // smarm runs no Erlang code and offers no spawn requests: OTP answers an rpc itself.
        assert_eq!(erl.expect_in_actor("rpc "), "{badrpc,notsup}");
        assert_eq!(node.dropped(), 0);
    });
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum ToErl {
    Hello(Pid, u32),
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
enum FromErl {
    Thanks(Pid),
}

#[derive(Serialize)]
#[serde(rename = "stop")]
struct Stop;

#[test]
fn smarm_sends_to_erl_names_and_pids_and_monitors_them() {
    let epmd = Epmd::start();
    let me = unique("smarm_b");
    let port = epmd.port;
    run(move || {
        let _node = cluster::start(config(&me, port)).unwrap();
        // The process that exits is spawned: if the -eval process itself exited, init would
        // halt the node at once, racing the DOWN it owes us against the connection's close
        // (and `noconnection` would then be the right answer).
        let script = "spawn(fun() -> register(sink, self()), io:format(\"ready~n\"), \
             receive {hello, From, N} -> io:format(\"got ~p~n\", [N]), From ! {thanks, self()} end, \
             receive stop -> io:format(\"stopping~n\"), exit(bye) end end), \
             receive after infinity -> ok end.";
        let erl = Arc::new(Erl::start(&unique("erl_b"), COOKIE, port, script));
        erl.expect_in_actor("ready");
        assert!(smarm::connect(&erl.name), "connect to {}", erl.name);
        assert_eq!(smarm::nodes(), vec![erl.name.clone()]);

        let (tx, rx) = smarm::channel::oneshot();
        let inbox = smarm::spawn_actor(move |mb: Mailbox<FromErl>| {
            mb.accept_remote();
            let Envelope::Msg(FromErl::Thanks(erl_pid)) = mb.recv() else { panic!("expected thanks") };
            assert!(erl_pid.is_remote());
            let m = smarm::monitor(erl_pid);
            assert!(cluster::send(erl_pid, &Stop));
            match mb.recv() {
                Envelope::Down(d) => {
                    assert_eq!((d.monitor, d.pid), (m, erl_pid));
                    tx.send(d.reason).unwrap();
                }
                other => panic!("expected a Down, got {other:?}"),
            }
        });
        assert!(cluster::send_named("sink", &erl.name, &ToErl::Hello(inbox.pid(), 42)));
        assert_eq!(erl.expect_in_actor("got "), "42");
        assert_eq!(rx.recv(), Ok(DownReason::Custom("bye".into())));
    });
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Hi {
    HelloFrom(Pid),
}

/// An Erlang node that connects to `smarm` and sends `{hello_from, self()}` to `inbox` there,
/// then waits forever.
fn greeter(smarm: &str, port: u16) -> Arc<Erl> {
    let script = format!(
        "{{inbox, '{smarm}@127.0.0.1'}} ! {{hello_from, self()}}, io:format(\"sent~n\"), \
         receive after infinity -> ok end."
    );
    Arc::new(Erl::start(&unique("erl_g"), COOKIE, port, &script))
}

/// Monitors and links to the greeter's process, then `signal`s the erl OS process: the
/// monitor and the link fire with `noconnection`, and the node monitor sees Up then Down.
fn lose_peer(signal: &'static str) {
    let epmd = Epmd::start();
    let me = unique("smarm_c");
    let port = epmd.port;
    run(move || {
        cluster::start(config(&me, port)).unwrap();
        #[derive(Debug)]
        enum In {
            Hi(Hi),
            Node(NodeEvent),
        }
        impl From<NodeEvent> for In {
            fn from(e: NodeEvent) -> In {
                In::Node(e)
            }
        }
        impl<'de> Deserialize<'de> for In {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<In, D::Error> {
                Hi::deserialize(d).map(In::Hi)
            }
        }
        let (tx, rx) = smarm::channel::channel();
        let inbox = smarm::spawn_actor(move |mb: Mailbox<In>| {
            mb.accept_remote();
            smarm::trap_exit(true);
            assert!(cluster::monitor_nodes(&mb.addr()));
            let Envelope::Msg(In::Node(NodeEvent::Up(n))) = mb.recv() else { panic!("expected nodeup first") };
            let Envelope::Msg(In::Hi(Hi::HelloFrom(pid))) = mb.recv() else { panic!("expected hello") };
            assert!(pid.to_string().starts_with('<') && pid.is_remote(), "{pid}");
            smarm::link(pid).unwrap();
            let m = smarm::monitor(pid);
            tx.send(()).unwrap();
            let mut got = Vec::new();
            while got.len() < 3 {
                match mb.recv() {
                    Envelope::Down(d) => {
                        assert_eq!(d.monitor, m);
                        got.push(format!("down {}", d.reason));
                    }
                    Envelope::Exit(x) => {
                        assert_eq!(x.from, pid);
                        got.push(format!("exit {}", x.reason));
                    }
                    Envelope::Msg(In::Node(NodeEvent::Down(d))) => {
                        assert_eq!(d, n);
                        got.push("nodedown".into());
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            // Down and exit in either order, nodedown after both (OTP's order).
            assert_eq!(got[2], "nodedown", "{got:?}");
            got.sort();
            tx.send(()).unwrap();
            got
        });
        smarm::register("inbox", inbox.pid()).unwrap();
        let erl = greeter(&me, port);
        erl.expect_in_actor("sent");
        rx.recv().unwrap(); // linked and monitored
        erl.signal(signal);
        rx.recv().unwrap();
        let _ = inbox;
    });
}

#[test]
fn sigkill_of_the_peer_fires_monitors_and_links_with_noconnection() {
    lose_peer("KILL");
}

#[test]
fn sigstop_of_the_peer_is_detected_by_ticks() {
    lose_peer("STOP");
}

#[test]
fn wrong_cookie_is_refused_both_ways() {
    let epmd = Epmd::start();
    let me = unique("smarm_d");
    let port = epmd.port;
    run(move || {
        let node = cluster::start(config(&me, port)).unwrap();
        let script = format!(
            "io:format(\"ready~n\"), io:format(\"ping ~p~n\", [net_adm:ping('{me}@127.0.0.1')]), \
             receive after infinity -> ok end."
        );
        let erl = Arc::new(Erl::start(&unique("erl_d"), "another_cookie", port, &script));
        erl.expect_in_actor("ready");
        assert_eq!(erl.expect_in_actor("ping "), "pang");
        assert!(!smarm::connect(&erl.name));
        assert!(smarm::nodes().is_empty());
        assert_eq!(node.dropped(), 0);
    });
}

#[test]
fn a_node_answering_under_another_name_is_refused() {
    let epmd = Epmd::start();
    let me = unique("smarm_e");
    let port = epmd.port;
    run(move || {
        let erl = Arc::new(Erl::start(
            &unique("erl_e"),
            COOKIE,
            port,
            "io:format(\"ready~n\"), receive after infinity -> ok end.",
        ));
        erl.expect_in_actor("ready");
        // Ask EPMD for the real node's port, then dial it under a name it does not have.
        let real = {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let alive = erl.name.split('@').next().unwrap().to_string();
            let mut req = vec![0, (alive.len() + 1) as u8, 122];
            req.extend_from_slice(alive.as_bytes());
            use std::io::{Read, Write};
            s.write_all(&req).unwrap();
            let mut resp = [0u8; 4];
            s.read_exact(&mut resp).unwrap();
            assert_eq!(&resp[..2], &[119, 0]);
            u16::from_be_bytes([resp[2], resp[3]])
        };
        let fake = "impostor@127.0.0.1";
        let cfg = config(&me, port).peer(fake, ([127, 0, 0, 1], real).into());
        cluster::start(cfg).unwrap();
        assert!(!smarm::connect(fake));
        assert!(smarm::nodes().is_empty());
    });
}

#[test]
fn in_process_epmd_serves_erl_when_none_runs() {
    // No epmd: smarm serves the protocol on a private port, and erl registers with it.
    let port = erl::free_port();
    let me = unique("smarm_f");
    run(move || {
        let node = cluster::start(config(&me, port)).unwrap();
        assert!(node.creation() != 0);
        spawn_echo();
        let script = format!(
            "S = '{me}@127.0.0.1', io:format(\"ping ~p~n\", [net_adm:ping(S)]), \
             {{echo, S}} ! {{ping, self()}}, \
             receive M -> io:format(\"reply ~p~n\", [M]) after 10000 -> io:format(\"reply timeout~n\") end, \
             halt()."
        );
        let erl = Arc::new(Erl::start(&unique("erl_f"), COOKIE, port, &script));
        assert_eq!(erl.expect_in_actor("ping "), "pong");
        assert_eq!(erl.expect_in_actor("reply "), "{pong,<<\"hi\">>}");
    });
}

#[test]
fn messages_that_do_not_decode_are_dropped_and_counted() {
    let epmd = Epmd::start();
    let me = unique("smarm_g");
    let port = epmd.port;
    run(move || {
        let node = cluster::start(config(&me, port).quiet(true)).unwrap();
        spawn_echo();
        // A plain actor that never accepts remote messages.
        let (_keep, wait) = smarm::channel::oneshot::<()>();
        let deaf = smarm::spawn_actor(move |_mb: Mailbox<u32>| {
            let _ = wait.recv();
        });
        smarm::register("deaf", deaf.pid()).unwrap();
        let script = format!(
            "S = '{me}@127.0.0.1', {{echo, S}} ! not_a_ping, {{deaf, S}} ! 1, {{nobody, S}} ! 2, \
             {{echo, S}} ! {{ping, self()}}, \
             receive M -> io:format(\"reply ~p~n\", [M]) after 10000 -> io:format(\"reply timeout~n\") end, \
             halt()."
        );
        let erl = Arc::new(Erl::start(&unique("erl_g"), COOKIE, port, &script));
        // The echo survived the bad message and answers the good one.
        assert_eq!(erl.expect_in_actor("reply "), "{pong,<<\"hi\">>}");
        assert_eq!(node.dropped(), 3);
        let _ = Signal::Down;
    });
}

/// A real OTP gen_server module, compiled and loaded by the erl node at start.
const CALC_ERL: &str = r#"
-module(calc).
-behaviour(gen_server).
-export([start/0, init/1, handle_call/3, handle_cast/2]).
start() -> gen_server:start({local, calc}, ?MODULE, 0, []).
init(N) -> {ok, N}.
handle_call({add, A, B}, _From, N) -> {reply, A + B, N + 1};
handle_call(count, _From, N) -> {reply, N, N};
handle_call(whoami, _From, N) -> {reply, self(), N};
handle_call(slow, _From, N) -> timer:sleep(2000), {reply, late, N};
handle_call(crash, _From, _N) -> exit(crashed).
handle_cast({bump, K}, N) -> {noreply, N + K}.
"#;

#[derive(Serialize, Debug)]
#[serde(rename_all = "snake_case")]
enum CalcReq {
    Add(i32, i32),
    Count,
    Whoami,
    Slow,
    Crash,
}

#[test]
fn smarm_calls_an_erlang_gen_server() {
    use smarm::gen_server::CallError;
    let epmd = Epmd::start();
    let me = unique("smarm_h");
    let port = epmd.port;
    let dir = std::env::temp_dir().join(unique("calc_src"));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("calc.erl");
    std::fs::write(&src, CALC_ERL).unwrap();
    let script = format!(
        "{{ok, calc, Bin}} = compile:file(\"{}\", [binary, report]), \
         {{module, calc}} = code:load_binary(calc, \"calc.erl\", Bin), {{ok, _}} = calc:start(), \
         io:format(\"ready~n\"), receive after infinity -> ok end.",
        src.display()
    );
    run(move || {
        cluster::start(config(&me, port).quiet(true)).unwrap();
        let erl = Arc::new(Erl::start(&unique("erl_h"), COOKIE, port, &script));
        erl.expect_in_actor("ready");
        let t = Duration::from_secs(10);
        let node = erl.name.clone();
        assert_eq!(cluster::call_named::<i64>("calc", &node, &CalcReq::Add(2, 3), t), Ok(5));
        assert_eq!(cluster::call_named::<i64>("calc", &node, &CalcReq::Count, t), Ok(1));
        // By pid.
        let calc: Pid = cluster::call_named("calc", &node, &CalcReq::Whoami, t).unwrap();
        assert!(calc.is_remote());
        assert_eq!(cluster::call::<i64>(calc, &CalcReq::Add(40, 2), t), Ok(42));
        // A cast in OTP's format reaches it: {'$gen_cast', {bump, 10}}.
        #[derive(Serialize)]
        enum Cast {
            #[serde(rename = "$gen_cast")]
            GenCast(Bump),
        }
        #[derive(Serialize)]
        #[serde(rename_all = "snake_case")]
        enum Bump {
            Bump(i32),
        }
        assert!(cluster::send(calc, &Cast::GenCast(Bump::Bump(10))));
        assert_eq!(cluster::call::<i64>(calc, &CalcReq::Count, t), Ok(12));
        // A reply of the wrong type, a timeout, an unknown name, a server that dies.
        assert!(matches!(
            cluster::call_named::<String>("calc", &node, &CalcReq::Count, t),
            Err(CallError::BadReply(_))
        ));
        assert_eq!(
            cluster::call_named::<String>("calc", &node, &CalcReq::Slow, Duration::from_millis(100)),
            Err(CallError::Timeout)
        );
        assert_eq!(cluster::call_named::<i64>("nobody", &node, &CalcReq::Count, t), Err(CallError::NoProc));
        assert_eq!(
            cluster::call::<i64>(calc, &CalcReq::Crash, t),
            Err(CallError::Down(DownReason::Custom("crashed".into())))
        );
        // Once the server is gone: noproc, at once.
        assert_eq!(cluster::call::<i64>(calc, &CalcReq::Count, t), Err(CallError::NoProc));
    });
    let _ = std::fs::remove_dir_all(dir);
}

/// A smarm gen_server that Erlang calls.
struct Counter(i64);

#[derive(Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum CounterCall {
    Add(i64),
    Get,
    Die,
    /// Answered later, from another actor (a deferred reply).
    Later(i64),
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum CounterCast {
    Reset,
}

impl smarm::gen_server::GenServer for Counter {
    type Call = CounterCall;
    type Reply = i64;
    type Cast = CounterCast;
    type Info = ();
    type Continue = ();
    fn handle_call(
        &mut self,
        c: CounterCall,
        from: &smarm::gen_server::Caller<i64>,
        _ctx: &smarm::gen_server::Ctx<Self>,
    ) -> smarm::gen_server::CallResult<i64> {
        use smarm::gen_server::CallResult;
        match c {
            CounterCall::Add(n) => {
                self.0 += n;
                CallResult::Reply(self.0)
            }
            CounterCall::Get => CallResult::Reply(self.0),
            CounterCall::Die => CallResult::Stop(DownReason::Custom("asked_to".into()), None),
            CounterCall::Later(n) => {
                let reply = from.defer();
                smarm::spawn(move || reply.reply(n * 10));
                CallResult::NoReply
            }
        }
    }
    fn handle_cast(&mut self, _c: CounterCast, _ctx: &smarm::gen_server::Ctx<Self>) -> smarm::gen_server::Flow {
        self.0 = 0;
        smarm::gen_server::Flow::Continue
    }
}

#[test]
fn erlang_calls_a_smarm_gen_server() {
    let epmd = Epmd::start();
    let me = unique("smarm_i");
    let port = epmd.port;
    run(move || {
        cluster::start(config(&me, port).quiet(true)).unwrap();
        let opts = smarm::gen_server::StartOpts { name: Some("counter".into()), link: false };
        let server = smarm::gen_server::start_opts(Counter(0), opts).unwrap();
        server.accept_remote();
        let script = format!(
            "S = '{me}@127.0.0.1', C = {{counter, S}}, \
             R1 = gen_server:call(C, {{add, 5}}), R2 = gen_server:call(C, {{add, 2}}), \
             ok = gen_server:cast(C, reset), R3 = gen_server:call(C, get), \
             R4 = gen_server:call(C, {{later, 4}}), \
             io:format(\"calls ~p~n\", [{{R1, R2, R3, R4}}]), \
             {{'EXIT', {{E1, _}}}} = (catch gen_server:call({{nobody, S}}, get, 5000)), \
             io:format(\"unknown ~p~n\", [E1]), \
             {{'EXIT', {{E2, _}}}} = (catch gen_server:call(C, die, 5000)), \
             io:format(\"died ~p~n\", [E2]), halt()."
        );
        let erl = Arc::new(Erl::start(&unique("erl_i"), COOKIE, port, &script));
        assert_eq!(erl.expect_in_actor("calls "), "{5,7,0,40}");
        assert_eq!(erl.expect_in_actor("unknown "), "noproc");
        // The server stopped during the call (without replying): the caller's monitor tells it.
        assert_eq!(erl.expect_in_actor("died "), "asked_to");
    });
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum WorkerMsg {
    HelloFromErl(Pid),
}

#[test]
fn pg_groups_span_smarm_and_erlang() {
    use smarm::pg::{self, PgEvent};
    let epmd = Epmd::start();
    let me = unique("smarm_j");
    let port = epmd.port;
    run(move || {
        cluster::start(config(&me, port).quiet(true)).unwrap();
        let (_, events) = pg::monitor_scope();
        let (tx, rx) = smarm::channel::oneshot();
        let (done_tx, done_rx) = smarm::channel::oneshot::<()>();
        let worker = smarm::spawn_actor(move |mb: Mailbox<WorkerMsg>| {
            mb.accept_remote();
            let Envelope::Msg(WorkerMsg::HelloFromErl(from)) = mb.recv() else { panic!("hello") };
            tx.send(from).unwrap();
            let _ = done_rx.recv(); // stays a member until the test ends
        });
        pg::join("workers", worker.pid()).unwrap();
        let script = format!(
            "{{ok, _}} = pg:start_link(), S = '{me}@127.0.0.1', pong = net_adm:ping(S), \
             ok = pg:join(workers, self()), \
             Wait = fun W(0) -> []; W(N) -> case [P || P <- pg:get_members(workers), node(P) =:= S] of \
                 [] -> timer:sleep(20), W(N - 1); Ps -> Ps end end, \
             Ps = Wait(500), io:format(\"remote members ~p~n\", [length(Ps)]), \
             [P ! {{hello_from_erl, self()}} || P <- Ps], \
             receive after infinity -> ok end."
        );
        let erl = Arc::new(Erl::start(&unique("erl_j"), COOKIE, port, &script));
        // Erlang sees the smarm member...
        assert_eq!(erl.expect_in_actor("remote members "), "1");
        // ...which hears from the Erlang member; and smarm sees that member join.
        let erl_member = rx.recv().unwrap();
        let joined = loop {
            match events.recv_timeout(erl::ERL_TIMEOUT).expect("a pg event in time") {
                PgEvent::Join { group, pids } if group == "workers" && pids.iter().any(|p| p.is_remote()) => {
                    break pids
                }
                _ => {}
            }
        };
        assert_eq!(joined, [erl_member]);
        assert!(pg::members("workers").contains(&erl_member));
        assert_eq!(pg::local_members("workers"), [worker.pid()]);
        // The members of a lost node disappear.
        erl.signal("KILL");
        loop {
            match events.recv_timeout(erl::ERL_TIMEOUT).expect("a pg event in time") {
                PgEvent::Leave { group, pids } if group == "workers" && pids == [erl_member] => break,
                _ => {}
            }
        }
        assert_eq!(pg::members("workers"), [worker.pid()]);
        done_tx.send(()).unwrap();
    });
}

#[test]
fn epmd_none_reaches_a_node_at_a_fixed_port() {
    // erl without EPMD, listening at a fixed port; smarm without EPMD, told the address.
    let erl_port = erl::free_port();
    let me = unique("smarm_k");
    run(move || {
        let alive = unique("erl_k");
        let erl = Arc::new(Erl::start_with(
            &alive,
            COOKIE,
            1, // no EPMD is asked: -erl_epmd_port below
            "register(sink, self()), io:format(\"ready~n\"), \
             receive {hello, From, N} -> io:format(\"got ~p~n\", [N]), From ! {thanks, self()} end, \
             receive after infinity -> ok end.",
            &["-erl_epmd_port", &erl_port.to_string()],
        ));
        erl.expect_in_actor("ready");
        let my_port = erl::free_port();
        let cfg = config(&me, 1)
            .epmd(cluster::Epmd::None)
            .ports(my_port, my_port)
            .peer(&erl.name, ([127, 0, 0, 1], erl_port).into());
        let node = cluster::start(cfg).unwrap();
        assert_eq!(node.port(), my_port);
        let (tx, rx) = smarm::channel::oneshot();
        let inbox = smarm::spawn_actor(move |mb: Mailbox<FromErl>| {
            mb.accept_remote();
            let Envelope::Msg(FromErl::Thanks(p)) = mb.recv() else { panic!("thanks") };
            tx.send(p).unwrap();
        });
        assert!(cluster::send_named("sink", &erl.name, &ToErl::Hello(inbox.pid(), 7)));
        assert_eq!(erl.expect_in_actor("got "), "7");
        assert!(rx.recv().unwrap().is_remote());
    });
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
enum Ctl {
    Go,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum ToCtl {
    Pids(Pid, Pid, Pid),
}

#[test]
fn links_and_exit_signals_from_erlang() {
    let epmd = Epmd::start();
    let me = unique("smarm_l");
    let port = epmd.port;
    run(move || {
        cluster::start(config(&me, port).quiet(true)).unwrap();
        // Three actors: one an Erlang process links to and then dies with `boom`, one that
        // Erlang sends `exit(P, kill)`, one that panics while an Erlang process that traps
        // exits is linked to it.
        let victim = || {
            smarm::spawn_actor(|mb: Mailbox<Ctl>| {
                mb.accept_remote();
                match mb.recv() {
                    Envelope::Msg(Ctl::Go) => panic!("told to fail"),
                    other => panic!("{other:?}"),
                }
            })
            .pid()
        };
        let (linked, killed, panicker) = (victim(), victim(), victim());
        let mons: Vec<_> = [linked, killed, panicker].iter().map(|p| smarm::monitor(*p)).collect();
        let script = format!(
            "S = '{me}@127.0.0.1', register(ctl, self()), pong = net_adm:ping(S), io:format(\"ready~n\"), \
             receive {{pids, Linked, Killed, Panicker}} -> \
               spawn(fun() -> link(Linked), exit(boom) end), \
               exit(Killed, kill), \
               process_flag(trap_exit, true), link(Panicker), Panicker ! go, \
               receive {{'EXIT', Panicker, R}} -> io:format(\"exit ~p~n\", [R]) end \
             end, halt()."
        );
        let erl = Arc::new(Erl::start(&unique("erl_l"), COOKIE, port, &script));
        erl.expect_in_actor("ready");
        assert!(cluster::send_named("ctl", &erl.name, &ToCtl::Pids(linked, killed, panicker)));
        let mut reasons = Vec::new();
        while reasons.len() < 3 {
            let Signal::Down(d) = smarm::recv_signal() else { panic!("a Down") };
            let i = mons.iter().position(|m| *m == d.monitor).unwrap();
            reasons.push((i, d.reason));
        }
        reasons.sort_by_key(|(i, _)| *i);
        assert_eq!(
            reasons,
            [
                (0, DownReason::Custom("boom".into())),
                (1, DownReason::Killed),
                (2, DownReason::Panic("told to fail".into()))
            ]
        );
        // The Erlang side saw the panic as smarm encodes it.
        assert_eq!(erl.expect_in_actor("exit "), "{panic,<<\"told to fail\">>}");
    });
}

#[path = "common/pki.rs"]
mod pki;

/// TLS distribution both ways with `erl -proto_dist inet_tls` (Debian erlang-ssl), mutual
/// certificates; a node with a certificate from another CA is refused both ways.
#[test]
fn tls_distribution_with_erlang() {
    let pki = Arc::new(pki::Pki::new("erl"));
    let epmd = Epmd::start();
    let me = unique("smarm_t");
    let port = epmd.port;
    run(move || {
        let tls = pki.tls(&pki.node, &pki.ca);
        cluster::start(config(&me, port).tls(tls)).unwrap();
        spawn_echo();
        let good = pki.erl_optfile(&pki.node, &pki.ca, "good");
        let tls_args = ["-proto_dist", "inet_tls", "-ssl_dist_optfile"];
        // erl -> smarm: ping and an echo over TLS; then smarm -> erl: a send to a name.
        let script = format!(
            "S = '{me}@127.0.0.1', io:format(\"ping ~p~n\", [net_adm:ping(S)]), \
             {{echo, S}} ! {{ping, self()}}, \
             receive M -> io:format(\"reply ~p~n\", [M]) after 10000 -> io:format(\"reply timeout~n\") end, \
             register(sink, self()), io:format(\"ready~n\"), \
             receive {{hello, From, N}} -> io:format(\"got ~p~n\", [N]), From ! {{thanks, self()}} end, \
             receive after infinity -> ok end."
        );
        let args: Vec<&str> = tls_args.iter().copied().chain([good.to_str().unwrap()]).collect();
        let erl = Arc::new(Erl::start_with(&unique("erl_t"), COOKIE, port, &script, &args));
        assert_eq!(erl.expect_in_actor("ping "), "pong");
        assert_eq!(erl.expect_in_actor("reply "), "{pong,<<\"hi\">>}");
        erl.expect_in_actor("ready");
        // The other way: disconnect, and let smarm dial (TLS client side).
        assert!(smarm::disconnect(&erl.name));
        let (tx, rx) = smarm::channel::oneshot();
        let inbox = smarm::spawn_actor(move |mb: Mailbox<FromErl>| {
            mb.accept_remote();
            let Envelope::Msg(FromErl::Thanks(p)) = mb.recv() else { panic!("thanks") };
            tx.send(p).unwrap();
        });
        assert!(smarm::connect(&erl.name));
        assert!(cluster::send_named("sink", &erl.name, &ToErl::Hello(inbox.pid(), 5)));
        assert_eq!(erl.expect_in_actor("got "), "5");
        assert!(rx.recv().unwrap().is_remote());

        // A node whose certificate the CA did not sign: refused both ways.
        let rogue = pki.erl_optfile(&pki.rogue, &pki.rogue_ca, "rogue");
        let args: Vec<&str> = tls_args.iter().copied().chain([rogue.to_str().unwrap()]).collect();
        let script = format!(
            "io:format(\"ready~n\"), io:format(\"ping ~p~n\", [net_adm:ping('{me}@127.0.0.1')]), \
             receive after infinity -> ok end."
        );
        let bad = Arc::new(Erl::start_with(&unique("erl_r"), COOKIE, port, &script, &args));
        bad.expect_in_actor("ready");
        assert_eq!(bad.expect_in_actor("ping "), "pang");
        assert!(!smarm::connect(&bad.name));
    });
}
