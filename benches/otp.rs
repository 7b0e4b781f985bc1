//! OTP figures of the process-semantics issue, on one scheduler thread:
//! - gen_server `call` round trip (1 client, 1 server);
//! - `spawn_monitor` + panic + `Down` observed, per actor (and the same with a normal exit);
//! - a gen_server crash (panic in `handle_call`) until its supervisor's restarted child
//!   serves calls again under its registered name;
//! - for reference, the floor under the panic figure: std's `catch_unwind` around a function
//!   that panics, on a plain thread, with nothing else (no actor, no spawn, no `Down`).
//!
//! Run: `cargo bench --bench otp` (medians of 7 samples).

use std::time::{Duration, Instant};

use smarm::gen_server::{self, CallResult, From, GenServer, StartOpts};
use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags};

struct Echo;

impl GenServer for Echo {
    type Call = u32;
    type Reply = u32;
    type Cast = ();
    type Info = ();
    fn handle_call(&mut self, x: u32, _from: &From<u32>) -> CallResult<u32> {
        if x == 0 {
            panic!("deliberate crash");
        }
        CallResult::Reply(x)
    }
}

#[inline(never)]
fn panics(i: u32) -> u32 {
    if std::hint::black_box(i) < u32::MAX {
        panic!("x");
    }
    i
}

/// A small catching frame, as smarm's actor entry has (a large one costs the unwinder more).
#[inline(never)]
fn catch_one(i: u32) -> bool {
    std::panic::catch_unwind(|| panics(i)).is_err()
}

/// Per panic caught: the same DWARF two-phase unwind through std's panic frames that an
/// actor's panic takes, without the runtime.
fn plain_catch_unwind() -> Duration {
    let n = 10_000u32;
    median(
        (0..7)
            .map(|_| {
                let t = Instant::now();
                for i in 0..n {
                    assert!(catch_one(i));
                }
                t.elapsed() / n
            })
            .collect(),
    )
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // Before the runtime exists (and installs its own hook): only this silent hook runs.
    std::panic::set_hook(Box::new(|_| {}));
    let floor = plain_catch_unwind();
    let rt = smarm::Runtime::builder().threads(1).quiet_panics(true).build().unwrap();
    rt.run(move || {
        let server = gen_server::start(Echo).unwrap();
        let calls = 100_000u32;
        let per_call = median(
            (0..7)
                .map(|_| {
                    let t = Instant::now();
                    for i in 1..=calls {
                        assert_eq!(server.call(i), Ok(i));
                    }
                    t.elapsed() / calls
                })
                .collect(),
        );
        println!("gen_server call round trip, 1T:             {per_call:?}");

        let n = 10_000u32;
        let observe = |panic: bool| {
            let t = Instant::now();
            for _ in 0..n {
                if panic {
                    smarm::spawn_monitor(|| -> () { panic!("x") });
                } else {
                    smarm::spawn_monitor(|| ());
                }
            }
            let mut downs = 0;
            while downs < n {
                if let smarm::Signal::Down(_) = smarm::recv_signal() {
                    downs += 1;
                }
            }
            t.elapsed() / n
        };
        let panicking = median((0..7).map(|_| observe(true)).collect());
        let normal = median((0..7).map(|_| observe(false)).collect());
        println!("spawn_monitor + panic + Down, per actor:    {panicking:?}");
        println!("spawn_monitor + normal exit + Down:         {normal:?}");
        println!("  floor: catch_unwind(panic!), plain thread:  {floor:?} (std's unwind alone)");

        let flags =
            SupFlags { intensity: u32::MAX, period: Duration::from_secs(1), ..SupFlags::new(Strategy::OneForOne) };
        let spec = ChildSpec::worker("echo", || {
            gen_server::start_opts(Echo, StartOpts { name: Some("echo".into()), link: true })
                .map(|s| s.pid())
                .map_err(|e| smarm::DownReason::Custom(e.to_string()))
        });
        let _sup = supervisor::start_link(flags, vec![spec]).unwrap();
        let rounds = 2_000u32;
        let restart = median(
            (0..7)
                .map(|_| {
                    let mut total = Duration::ZERO;
                    for _ in 0..rounds {
                        let s = gen_server::named::<Echo>("echo").unwrap();
                        let t = Instant::now();
                        let _ = s.call(0);
                        loop {
                            if let Some(s2) = gen_server::named::<Echo>("echo") {
                                if s2.call(1) == Ok(1) {
                                    break;
                                }
                            }
                            smarm::yield_now();
                        }
                        total += t.elapsed();
                    }
                    total / rounds
                })
                .collect(),
        );
        println!("crash + supervisor restart until serving:   {restart:?} (includes the panic itself)");
    })
    .unwrap();
}
