//! OTP figures of the process-semantics issue, on one scheduler thread:
//! - gen_server `call` round trip (1 client, 1 server);
//! - `spawn_monitor` + panic + `Down` observed, per actor (and the same with a normal exit);
//! - a gen_server crash (panic in `handle_call`) until its supervisor's restarted child
//!   serves calls again under its registered name;
//! - for reference, the floor under the panic figure: std's `catch_unwind` around a function
//!   that panics, on a plain thread, with nothing else (no actor, no spawn, no `Down`);
//! - a `SimpleOneForOne` supervisor with N dynamic children (parked, not trapping exits,
//!   the default 5 s shutdown timeout), at N = 1,000 and 10,000: `stop` per child, and the
//!   N `start_child` calls before it per child. Equal per-child figures at both sizes mean
//!   linear; a per-child cost that grows tenfold with N means quadratic. Under each, its
//!   floor: the same N actors spawned, stopped and awaited by a plain actor, no supervisor
//!   (what the runtime itself pays per actor at that N).
//!
//! Run: `cargo bench --bench otp` (medians of 7 samples), or `cargo bench --bench otp --
//! FILTER...` for the sections whose name contains a filter: `call`, `monitor`, `restart`,
//! `supervisor_stop`.

use std::time::{Duration, Instant};

use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, StartOpts};
use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags};

struct Echo;

impl GenServer for Echo {
    type Call = u32;
    type Reply = u32;
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn handle_call(&mut self, x: u32, _from: &Caller<u32>, _ctx: &Ctx<Self>) -> CallResult<u32> {
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

/// Starts a `SimpleOneForOne` supervisor, `n` dynamic children, and stops it. Returns the
/// time per child of the `n` `start_child` calls and of the `stop`.
fn start_stop_dynamic(n: u32) -> (Duration, Duration) {
    let spec = ChildSpec::worker("w", || {
        // Parks for good: never trapping exits, it ends with the supervisor's `Shutdown`.
        Ok(smarm::spawn_link(|| loop {
            smarm::recv_signal();
        })
        .pid())
    });
    let sup = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
    let t = Instant::now();
    for _ in 0..n {
        sup.start_child(()).unwrap();
    }
    let start = t.elapsed() / n;
    let t = Instant::now();
    sup.stop().unwrap();
    (start, t.elapsed() / n)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench` passes `--bench`; the other arguments are section filters.
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = move |section: &str| filters.is_empty() || filters.iter().any(|f| section.contains(f.as_str()));
    // Before the runtime exists (and installs its own hook): only this silent hook runs.
    std::panic::set_hook(Box::new(|_| {}));
    let floor = if wanted("monitor") { plain_catch_unwind() } else { Duration::ZERO };
    let rt = smarm::Runtime::builder().threads(1).quiet_panics(true).build().unwrap();
    rt.run(move || {
        if wanted("call") {
            call_roundtrip();
        }
        if wanted("monitor") {
            spawn_monitor_down(floor);
        }
        if wanted("restart") {
            crash_restart();
        }
        if wanted("supervisor_stop") {
            supervisor_stop();
        }
    })
    .unwrap();
}

fn call_roundtrip() {
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
}

fn spawn_monitor_down(floor: Duration) {
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
}

fn crash_restart() {
    let flags = SupFlags { intensity: u32::MAX, period: Duration::from_secs(1), ..SupFlags::new(Strategy::OneForOne) };
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
}

/// The floor under [`start_stop_dynamic`]: the same children spawned linked by a trapping
/// actor, no supervisor; then each monitored and unlinked, all sent `Shutdown`, and their
/// Downs taken in arrival order: the runtime's own cost per actor at this N.
fn start_stop_plain(n: u32) -> (Duration, Duration) {
    smarm::spawn(move || {
        smarm::trap_exit(true);
        let t = Instant::now();
        let pids: Vec<smarm::Pid> = (0..n)
            .map(|_| {
                smarm::spawn_link(|| loop {
                    smarm::recv_signal();
                })
                .pid()
            })
            .collect();
        let start = t.elapsed() / n;
        let t = Instant::now();
        for &pid in &pids {
            smarm::monitor(pid);
            smarm::unlink(pid);
        }
        for &pid in &pids {
            smarm::exit(pid, smarm::DownReason::Shutdown);
        }
        let mut downs = 0;
        while downs < n {
            if let smarm::Signal::Down(_) = smarm::recv_signal() {
                downs += 1;
            }
        }
        (start, t.elapsed() / n)
    })
    .join()
    .unwrap()
}

/// The sizes alternate within each of the 7 rounds, so that a slow phase of a noisy machine
/// falls on both.
fn supervisor_stop() {
    let sizes = [1_000u32, 10_000];
    // [size][supervisor, floor] -> samples of (start, stop) per child.
    let mut samples = vec![[Vec::new(), Vec::new()]; sizes.len()];
    for _ in 0..7 {
        for (i, &n) in sizes.iter().enumerate() {
            samples[i][0].push(start_stop_dynamic(n));
            samples[i][1].push(start_stop_plain(n));
        }
    }
    for (i, n) in sizes.iter().enumerate() {
        let [sup, floor] = std::mem::take(&mut samples[i]);
        let stop = median(sup.iter().map(|s| s.1).collect());
        let start = median(sup.iter().map(|s| s.0).collect());
        println!("supervisor stop {n:>6} dynamic children, per child: {stop:?} (start_child: {start:?})");
        let stop = median(floor.iter().map(|s| s.1).collect());
        let start = median(floor.iter().map(|s| s.0).collect());
        println!("  floor: {n:>6} linked actors, no supervisor: {stop:?} (spawn_link: {start:?})");
    }
}
