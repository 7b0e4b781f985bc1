//! Supervision: a supervisor keeps a registered gen_server alive. The server crashes every
//! few requests; the supervisor restarts it and re-registers its name; a client keeps
//! calling it *by name* across the restarts. When the root returns, the tree is shut down
//! in order (the server's `terminate` runs) before `run` returns.
//!
//! Run: `cargo run --release --example supervision`

use std::time::Duration;

use smarm::gen_server::{self, CallError, CallResult, Caller, Ctx, GenServer, StartOpts};
use smarm::supervisor::{self, ChildSpec, Shutdown, Strategy, SupFlags};
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

fn main() {
    let rt = smarm::Runtime::builder().quiet_panics(true).build().expect("runtime");
    let summary = rt
        .run(|| {
            let flags = SupFlags { intensity: 10, ..SupFlags::new(Strategy::OneForOne) };
            let child = ChildSpec::worker("flaky", || {
                gen_server::start_opts(Flaky { served: 0 }, StartOpts { name: Some("flaky".into()), link: true })
                    .map(|s| s.pid())
                    .map_err(|e| DownReason::Custom(e.to_string()))
            })
            .shutdown(Shutdown::Timeout(Duration::from_secs(1)));
            let sup = supervisor::start_link(flags, vec![child]).expect("supervisor");
            println!("supervisor {} started; children {:?}", sup.pid(), sup.which_children());

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
            println!("children now {:?}", sup.which_children());
            println!("root returns: the supervision tree is shut down in order");
            (ok, crashes)
        })
        .expect("root");
    println!("run returned: {} calls answered, {} crashes survived", summary.0, summary.1);
}
