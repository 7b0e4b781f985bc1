//! Two smarm nodes and, when `erl` is installed, an Erlang node: a `pg` group of workers
//! across all of them answers calls.
//!
//! ```sh
//! cargo run --release --features cluster --example cluster
//! ```
//!
//! This process is node `main`; it starts node `helper` (this same binary, re-executed with
//! `--helper`) and an Erlang node `erl` (`erl -name ...`, OTP 25+). Each node runs workers,
//! gen_servers that square numbers, and joins them to the `pg` group `squares`. `main` then
//! calls members picked at random from the group, and prints which node answered. No EPMD has
//! to run: the first node serves the EPMD protocol in-process on a free port, and the others
//! register with it.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use smarm::cluster::{self, NodeConfig};
use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
use smarm::pg;

const COOKIE: &str = "smarm_example_cookie";

/// A worker: `{square, N}` -> `N * N`.
struct Squarer;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Req {
    Square(i64),
}

impl GenServer for Squarer {
    type Call = Req;
    type Reply = i64;
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn handle_call(&mut self, Req::Square(n): Req, _: &Caller<i64>, _: &Ctx<Self>) -> CallResult<i64> {
        CallResult::Reply(n * n)
    }
}

/// Starts `n` workers on this node, each accepting remote calls and joined to `squares`.
fn start_workers(n: usize) {
    for _ in 0..n {
        let w = gen_server::start(Squarer).unwrap();
        w.accept_remote();
        pg::join("squares", w.pid()).unwrap();
    }
}

fn config(name: &str, epmd_port: u16) -> NodeConfig {
    NodeConfig::new(name).cookie(COOKIE).epmd_port(epmd_port).listen("127.0.0.1".parse().unwrap())
}

/// The helper node: two workers, until stdin closes.
fn helper(epmd_port: u16) {
    smarm::run(move || {
        cluster::start(config("helper@127.0.0.1", epmd_port)).unwrap();
        start_workers(2);
        println!("ready");
        smarm::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).join().unwrap().unwrap();
    });
}

/// The Erlang node's worker: a gen_server module compiled at start, joined to `squares`.
const SQUARER_ERL: &str = r#"
-module(squarer).
-behaviour(gen_server).
-export([start/0, init/1, handle_call/3, handle_cast/2]).
start() -> gen_server:start(?MODULE, [], []).
init([]) -> ok = pg:join(squares, self()), {ok, nil}.
handle_call({square, N}, _From, S) -> {reply, N * N, S}.
handle_cast(_, S) -> {noreply, S}.
"#;

fn start_erl(epmd_port: u16) -> Option<Child> {
    let dir = std::env::temp_dir().join(format!("smarm_example_{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join("squarer.erl");
    std::fs::write(&src, SQUARER_ERL).ok()?;
    let script = format!(
        "{{ok, squarer, Bin}} = compile:file(\"{}\", [binary, report]), \
         {{module, squarer}} = code:load_binary(squarer, \"squarer.erl\", Bin), \
         {{ok, _}} = pg:start_link(), {{ok, _}} = squarer:start(), \
         pong = net_adm:ping('main@127.0.0.1'), io:format(\"ready~n\"), receive after infinity -> ok end.",
        src.display()
    );
    let mut child = Command::new("erl")
        .args(["-name", "erl@127.0.0.1", "-setcookie", COOKIE, "-noshell", "-start_epmd", "false"])
        .args(["-eval", &script])
        .env("ERL_EPMD_PORT", epmd_port.to_string())
        .env("ERL_CRASH_DUMP_SECONDS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    wait_ready(&mut child);
    Some(child)
}

fn wait_ready(child: &mut Child) {
    let out = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).expect("the node's first line");
    assert_eq!(line.trim(), "ready", "the node did not start");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--helper") {
        return helper(args[2].parse().unwrap());
    }
    let epmd_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    smarm::Runtime::builder()
        .threads(2)
        .build()
        .unwrap()
        .run(move || {
            // First node up: it serves EPMD on the free port.
            cluster::start(config("main@127.0.0.1", epmd_port)).unwrap();
            start_workers(2);
            let mut helper = Command::new(std::env::current_exe().unwrap())
                .args(["--helper", &epmd_port.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut helper = smarm::spawn_blocking(move || {
                wait_ready(&mut helper);
                helper
            })
            .join()
            .unwrap();
            assert!(smarm::connect("helper@127.0.0.1"));
            let erl = smarm::spawn_blocking(move || start_erl(epmd_port)).join().unwrap();
            if erl.is_none() {
                println!("(erl not found: install Debian's erlang-base to add an Erlang node)");
            }
            // The pg scopes exchange their members once the connections are up: wait for them.
            let want = 4 + usize::from(erl.is_some());
            let (mut seen, events) = pg::monitor_scope();
            let mut members = seen.remove("squares").unwrap_or_default().len();
            while members < want {
                match events.recv_timeout(Duration::from_secs(10)).expect("pg members in time") {
                    pg::PgEvent::Join { group, pids } if group == "squares" => members += pids.len(),
                    pg::PgEvent::Leave { group, pids } if group == "squares" => members -= pids.len(),
                    _ => {}
                }
            }
            println!("nodes: {:?}", smarm::nodes());
            let call = |worker: smarm::Pid, n: i64| -> i64 {
                if worker.is_remote() {
                    cluster::call(worker, &Req::Square(n), Duration::from_secs(5)).unwrap()
                } else {
                    gen_server::ServerRef::<Squarer>::from_pid(worker).unwrap().call(Req::Square(n)).unwrap()
                }
            };
            // Every member once, then members picked at random.
            let all = pg::members("squares");
            println!("squares has {} members", all.len());
            for (i, worker) in all.into_iter().enumerate() {
                let n = i as i64 + 2;
                assert_eq!(call(worker, n), n * n);
                println!("{n}^2 = {} (worker {worker} on {})", n * n, cluster::node_of(worker).unwrap());
            }
            for n in 100..104 {
                let worker = pg::pick_any("squares").unwrap();
                assert_eq!(call(worker, n), n * n);
                println!("{n}^2 = {} (random pick: {worker} on {})", n * n, cluster::node_of(worker).unwrap());
            }
            drop(helper.stdin.take());
            let _ = helper.wait();
            if let Some(mut erl) = erl {
                let _ = erl.kill();
                let _ = erl.wait();
            }
        })
        .unwrap();
}
