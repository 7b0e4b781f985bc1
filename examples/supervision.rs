//! Supervision: a named supervisor keeps a registered gen_server alive. The server crashes
//! every few requests; the supervisor restarts it and re-registers its name; a client keeps
//! calling it *by name* across the restarts. Then the supervisor's children are managed at run
//! time (`start_child`, `terminate_child`, `restart_child`, `delete_child`, `which_children`,
//! `count_children`), and a `SimpleOneForOne` pool starts dynamic children with arguments,
//! which a restart reuses. When the root returns, the tree is shut down in order (the
//! server's `terminate` runs) before `run` returns.
//!
//! Run: `cargo run --release --example supervision`

use std::time::Duration;

use smarm::gen_server::{self, CallError, CallResult, Caller, Ctx, GenServer, StartOpts};
use smarm::supervisor::{self, ChildSpec, DynamicSpec, Shutdown, Strategy, SupFlags};
use smarm::DownReason;

/// A counter that crashes on every 4th request.
struct Flaky {
    served: u64,
}

impl GenServer for Flaky {
    type Call = u64;
    type Reply = u64;
    type Cast = ();
    type Info = ();
    type Continue = ();

    fn init(&mut self, _ctx: &Ctx<Self>) -> gen_server::InitResult {
        // Trap exits so a supervisor shutdown runs `terminate`.
        smarm::trap_exit(true);
        println!("  [flaky {}] started", smarm::current_pid());
        gen_server::InitResult::Ok
    }

    fn handle_call(&mut self, x: u64, _from: &Caller<u64>, _ctx: &Ctx<Self>) -> CallResult<u64> {
        self.served += 1;
        if self.served % 4 == 0 {
            panic!("flaky crashed after {} requests", self.served);
        }
        CallResult::Reply(x * 2)
    }

    fn terminate(&mut self, reason: &DownReason) {
        println!("  [flaky {}] terminate({reason})", smarm::current_pid());
    }
}

/// Starts a child that parks until it is stopped (a start function: runs in the supervisor).
fn parked(label: String) -> smarm::Pid {
    let pid = smarm::spawn_link(|| loop {
        smarm::recv_signal();
    })
    .pid();
    println!("  [{label} {pid}] started");
    pid
}

/// The running children of `sup`, as `id=pid` (or `id=Restarting`, `id=Undefined`).
fn children(sup: &supervisor::SupervisorRef) -> String {
    let list = sup.which_children().expect("which_children");
    let shown: Vec<String> = list
        .iter()
        .map(|c| match c.pid() {
            Some(pid) => format!("{}={pid}", c.id),
            None => format!("{}={:?}", c.id, c.state),
        })
        .collect();
    shown.join(", ")
}

fn main() {
    let rt = smarm::Runtime::builder().quiet_panics(true).build().expect("runtime");
    let summary = rt
        .run(|| {
            // Named: registered before its children start, found by name afterwards.
            let flags = SupFlags { intensity: 10, ..SupFlags::new(Strategy::OneForOne) }.named("app");
            let child = ChildSpec::worker("flaky", || {
                gen_server::start_opts(Flaky { served: 0 }, StartOpts { name: Some("flaky".into()), link: true })
                    .map(|s| s.pid())
                    .map_err(|e| DownReason::Custom(e.to_string()))
            })
            .shutdown(Shutdown::Timeout(Duration::from_secs(1)));
            supervisor::start_link(flags, vec![child]).expect("supervisor");
            let sup = supervisor::whereis("app").expect("the supervisor is registered");
            println!("supervisor {} started; children: {}", sup.pid(), children(&sup));

            let mut ok = 0;
            let mut crashes = 0;
            for i in 0..12u64 {
                match gen_server::call_named::<Flaky>("flaky", i) {
                    Ok(v) => {
                        ok += 1;
                        println!("call {i:2} -> {v}");
                    }
                    Err(CallError::Down(reason)) => {
                        crashes += 1;
                        println!("call {i:2} -> server died: {reason}");
                    }
                    Err(CallError::NoProc) => {
                        // Between the crash and the restart the name is briefly free.
                        println!("call {i:2} -> not registered yet, retrying");
                        smarm::sleep(Duration::from_millis(1));
                    }
                    Err(e) => println!("call {i:2} -> {e}"),
                }
            }
            println!("children now: {}", children(&sup));

            // Children managed at run time.
            let ticker = ChildSpec::worker("ticker", || Ok(parked("ticker".into())));
            sup.start_child(ticker).expect("start_child");
            println!("after start_child(ticker): {}", children(&sup));
            sup.terminate_child("ticker").expect("terminate_child");
            println!("after terminate_child(ticker): {} (the spec is kept)", children(&sup));
            sup.restart_child("ticker").expect("restart_child");
            println!("after restart_child(ticker): {}", children(&sup));
            sup.terminate_child("ticker").expect("terminate_child");
            sup.delete_child("ticker").expect("delete_child");
            println!("after terminate_child + delete_child(ticker): {}", children(&sup));
            println!("count_children: {:?}", sup.count_children().expect("count_children"));

            // A pool of dynamic children, each started with its own arguments.
            let job = DynamicSpec::worker("job", |n: u64| Ok(parked(format!("job {n}"))));
            let pool = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), job).expect("pool");
            let jobs: Vec<smarm::Pid> =
                (1..=3).map(|n| pool.start_child(n).expect("start_child").expect("a pid")).collect();
            println!("pool: {}", children(pool.supervisor()));
            println!("killing {}: restarted with the same argument", jobs[1]);
            smarm::kill(jobs[1]);
            // Wait until the supervisor has handled the exit (it restarts the job at once).
            while pool.which_children().expect("which_children").iter().any(|c| c.pid() == Some(jobs[1])) {
                smarm::yield_now();
            }
            println!("pool: {}", children(pool.supervisor()));

            println!("root returns: the supervision trees are shut down in order");
            (ok, crashes)
        })
        .expect("root");
    println!("run returned: {} calls answered, {} crashes survived", summary.0, summary.1);
}
