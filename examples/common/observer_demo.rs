//! A small system for the observer to show (examples/observer.rs, examples/top.rs and
//! tests/observer_browser.rs): a supervision tree of named gen_servers, `pg` groups, and
//! actors parked on each kind of thing, with some steady load so the counters move.
//!
//! The tree:
//!
//! ```text
//! app (supervisor, one_for_one)
//! ├── cache      gen_server, registered "cache"
//! ├── db_sup     supervisor
//! │   ├── db_pool    gen_server, registered "db_pool"
//! │   ├── conn_1     worker parked on its mailbox
//! │   └── conn_2     worker parked on its mailbox
//! └── web        gen_server, registered "web"
//! ```
//!
//! Beside it: `client` (calls the three servers by name, in a loop), `sleeper`, `backlog` (a
//! mailbox with messages it does not read), `waiter` (a channel), `joiner` (another actor's
//! end), `cruncher` (CPU-bound slices), and `pg` groups `web_handlers` and `caches`.

#![allow(dead_code)] // each includer uses part of it

use std::time::Duration;

use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, StartOpts};
use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags, SupervisorRef};
use smarm::DownReason;

/// A gen_server standing for a service: counts the calls it answers.
pub struct Service {
    served: u64,
}

impl GenServer for Service {
    type Call = u64;
    type Reply = u64;
    type Cast = ();
    type Info = ();
    type Continue = ();

    fn handle_call(&mut self, x: u64, _from: &Caller<u64>, _ctx: &Ctx<Self>) -> CallResult<u64> {
        self.served += 1;
        CallResult::Reply(x.wrapping_add(self.served))
    }
}

/// A child spec for a `Service` registered as `name`.
fn service(name: &'static str) -> ChildSpec {
    ChildSpec::worker(name, move || {
        gen_server::start_opts(Service { served: 0 }, StartOpts { name: Some(name.into()), link: true })
            .map(|s| s.pid())
            .map_err(|e| DownReason::Custom(e.to_string()))
    })
}

/// A child parked on its mailbox until stopped.
fn parked(id: &'static str) -> ChildSpec {
    ChildSpec::worker(id, || {
        Ok(smarm::spawn_link(|| loop {
            smarm::recv_signal();
        })
        .pid())
    })
}

/// Starts the demo system from an actor and returns its root supervisor; everything else
/// runs detached until the runtime stops.
pub fn start() -> SupervisorRef {
    let db_sup = ChildSpec::supervisor("db_sup", || {
        supervisor::start_link(
            SupFlags::new(Strategy::OneForOne),
            vec![service("db_pool"), parked("conn_1"), parked("conn_2")],
        )
        .map(|s| s.pid())
        .map_err(|e| DownReason::Custom(e.to_string()))
    });
    let app = supervisor::start_link(
        SupFlags::new(Strategy::OneForOne).named("app"),
        vec![service("cache"), db_sup, service("web")],
    )
    .expect("demo supervision tree");

    // pg groups: the web server and two handlers; the cache.
    if let Some(web) = smarm::whereis("web") {
        smarm::pg::join("web_handlers", web).expect("pg join");
    }
    for _ in 0..2 {
        let h = smarm::spawn(|| loop {
            smarm::recv_signal();
        });
        smarm::pg::join("web_handlers", h.pid()).expect("pg join");
    }
    if let Some(cache) = smarm::whereis("cache") {
        smarm::pg::join("caches", cache).expect("pg join");
    }

    // A client calling the three servers by name, so their counters move.
    let client = smarm::spawn(|| {
        let mut n = 0u64;
        loop {
            {
                let _request = smarm::profile::site("client_request");
                for name in ["cache", "db_pool", "web", "cache"] {
                    if let Some(s) = gen_server::named::<Service>(name) {
                        n = s.call(n).unwrap_or(n);
                    }
                }
            }
            let _pause = smarm::profile::site("client_pause");
            smarm::sleep(Duration::from_millis(20));
        }
    });
    register("client", client.pid());

    let sleeper = smarm::spawn(|| loop {
        smarm::sleep(Duration::from_secs(3600));
    });
    register("sleeper", sleeper.pid());

    // A mailbox filling up: it sleeps and never reads.
    let backlog = smarm::spawn_actor(|_mb: smarm::Mailbox<String>| loop {
        smarm::sleep(Duration::from_secs(3600));
    });
    for i in 0..25 {
        backlog.send(format!("job {i}"));
    }
    register("backlog", backlog.pid());

    // Parked on a channel no one sends on (the sender lives in the sleeper-like keeper).
    let (tx, rx) = smarm::channel::channel::<u64>();
    let waiter = smarm::spawn(move || {
        let _ = rx.recv();
    });
    register("waiter", waiter.pid());
    let keeper = smarm::spawn(move || {
        let _keep = tx;
        loop {
            smarm::sleep(Duration::from_secs(3600));
        }
    });

    // Parked on another actor's end.
    let joiner = smarm::spawn(move || {
        let _ = keeper.join();
    });
    register("joiner", joiner.pid());

    // CPU-bound slices: shows up running or runnable, with CPU time.
    let cruncher = smarm::spawn(|| {
        let mut x = 1u64;
        loop {
            let _crunch = smarm::profile::site("crunch");
            let until = std::time::Instant::now() + Duration::from_millis(3);
            while std::time::Instant::now() < until {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                smarm::maybe_preempt();
            }
            std::hint::black_box(x);
            smarm::sleep(Duration::from_millis(7));
        }
    });
    register("cruncher", cruncher.pid());
    app
}

fn register(name: &str, pid: smarm::Pid) {
    smarm::register(name, pid).expect("register");
}
