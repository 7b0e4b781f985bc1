//! general: the benchmark contract (`../shared/BENCHMARKS.md`): fourteen sections, each on
//! smarm and on tokio's multi-thread runtime, with the same work, in the same process, back
//! to back, at 1 thread and at `available_parallelism()` threads.
//!
//! What one sample measures: building the runtime, running the root to completion and
//! shutting the runtime down, exactly as a user's `main` pays it:
//!
//! - smarm: `Runtime::builder().threads(n).build()` + `run(root)` (the root is an actor on
//!   scheduler thread 0, the calling thread);
//! - tokio: `Builder::new_multi_thread().worker_threads(n).build()` + `block_on` of the
//!   `JoinHandle` of the root task spawned onto the runtime (so the root runs on a worker,
//!   like smarm's) + dropping the runtime (which joins its workers).
//!
//! Per (section, threads): one warm-up sample of each system, then `--repeats` samples
//! (default 7) interleaved smarm, tokio, smarm, tokio, ... so a burst of machine noise lands
//! on both. Each row reports the median and min..max of the per-unit time (total / work
//! count); the tokio row of each pair carries the smarm/tokio ratio of the medians.
//!
//! `catch_unwind` observes failures through monitors (`spawn_monitor` + `Down`), and
//! `call_roundtrip` uses gen_server `call`, as the contract says; rows can still carry a note
//! (`SMARM_*_NOTE`) when an implementation detail differs from the contract.
//!
//! Run: `cargo bench --bench general` (everything), `cargo bench --bench general -- SECTION`
//! (sections whose name contains SECTION), plus `--json FILE`, `--repeats N`, `--quick`
//! (3 repeats, for smoke tests).

use std::future::Future;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// ---- work sizes (BENCHMARKS.md) ----

const SPAWN_N: usize = 100_000;
const YIELD_ACTORS: usize = 200;
const YIELDS_EACH: usize = 1_000;
const HOT_YIELDS: usize = 1_000_000;
const PING_ROUNDS: usize = 1_000;
const STEADY_ROUNDTRIPS: u64 = 10_000;
const CHAIN: usize = 1_000;
const RECURSE_ACTORS: usize = 100;
const RECURSE_DEPTH: u32 = 1_000;
const FRAME_BYTES: usize = 256;
const FAN_ACTORS: usize = 1_000;
const XORSHIFT_STEPS: u32 = 10_000;
const PANICKERS: usize = 10_000;
const PRODUCERS: usize = 16;
const MSGS_EACH: u64 = 10_000;
const RING_SIZE: usize = 1_000;
const RING_LAPS: u64 = 100;
const SERVER_CLIENTS: usize = 4;
const CALLS_EACH: u64 = 25_000;

// ---- timing one sample ----

/// Times building a smarm runtime with `threads` threads, running `root` on it, and its
/// shutdown.
fn smarm_sample<F, T>(threads: usize, quiet_panics: bool, root: F) -> (Duration, T)
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let start = Instant::now();
    let rt = smarm::Runtime::builder().threads(threads).quiet_panics(quiet_panics).build().expect("smarm: build");
    let out = rt.run(root).expect("smarm: run");
    (start.elapsed(), out)
}

/// Times building a tokio multi-thread runtime with `threads` workers, running `root` as a
/// task spawned onto it (`block_on` only awaits its handle), and dropping the runtime.
fn tokio_sample<F, Fut>(threads: usize, root: F) -> (Duration, Fut::Output)
where
    F: FnOnce() -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let start = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).build().expect("tokio: build");
    let root = rt.spawn(root());
    let out = rt.block_on(root).expect("tokio: root task failed");
    drop(rt);
    (start.elapsed(), out)
}

// ---- spawn_many / spawn_storm_busy ----

/// Counts finished spawns; the one that completes the count signals the root.
struct Countdown<S> {
    done: AtomicUsize,
    signal: Mutex<Option<S>>,
}

impl<S> Countdown<S> {
    fn new(signal: S) -> Arc<Self> {
        Arc::new(Countdown { done: AtomicUsize::new(0), signal: Mutex::new(Some(signal)) })
    }
    /// Bumps the count; returns the signal to the caller that completed it.
    fn bump(&self, total: usize) -> Option<S> {
        // AcqRel: the completing bump sees every earlier one (only the count matters here).
        if self.done.fetch_add(1, Ordering::AcqRel) + 1 == total {
            self.signal.lock().unwrap().take()
        } else {
            None
        }
    }
}

fn smarm_spawn_storm(threads: usize, busy: usize) -> Duration {
    let (t, n) = smarm_sample(threads, false, move || {
        let stop = Arc::new(AtomicBool::new(false));
        let busy: Vec<_> = (0..busy)
            .map(|_| {
                let stop = stop.clone();
                smarm::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        smarm::yield_now();
                    }
                })
            })
            .collect();
        let (tx, rx) = smarm::channel::oneshot();
        let count = Countdown::new(tx);
        for _ in 0..SPAWN_N {
            let count = count.clone();
            drop(smarm::spawn(move || {
                if let Some(tx) = count.bump(SPAWN_N) {
                    tx.send(()).unwrap();
                }
            }));
        }
        rx.recv().unwrap();
        stop.store(true, Ordering::Relaxed);
        for h in busy {
            h.join().unwrap();
        }
        count.done.load(Ordering::Acquire)
    });
    assert_eq!(n, SPAWN_N);
    t
}

fn tokio_spawn_storm(threads: usize, busy: usize) -> Duration {
    let (t, n) = tokio_sample(threads, move || async move {
        let stop = Arc::new(AtomicBool::new(false));
        let busy: Vec<_> = (0..busy)
            .map(|_| {
                let stop = stop.clone();
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let count = Countdown::new(tx);
        for _ in 0..SPAWN_N {
            let count = count.clone();
            drop(tokio::spawn(async move {
                if let Some(tx) = count.bump(SPAWN_N) {
                    tx.send(()).unwrap();
                }
            }));
        }
        rx.await.unwrap();
        stop.store(true, Ordering::Relaxed);
        for h in busy {
            h.await.unwrap();
        }
        count.done.load(Ordering::Acquire)
    });
    assert_eq!(n, SPAWN_N);
    t
}

fn smarm_spawn_many(threads: usize) -> Duration {
    smarm_spawn_storm(threads, 0)
}
fn tokio_spawn_many(threads: usize) -> Duration {
    tokio_spawn_storm(threads, 0)
}
fn smarm_spawn_storm_busy(threads: usize) -> Duration {
    smarm_spawn_storm(threads, threads)
}
fn tokio_spawn_storm_busy(threads: usize) -> Duration {
    tokio_spawn_storm(threads, threads)
}

// ---- yield_many / yield_in_hot_loop ----

fn smarm_yields(threads: usize, actors: usize, each: usize) -> Duration {
    smarm_sample(threads, false, move || {
        let hs: Vec<_> = (0..actors)
            .map(|_| {
                smarm::spawn(move || {
                    for _ in 0..each {
                        smarm::yield_now();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    })
    .0
}

fn tokio_yields(threads: usize, actors: usize, each: usize) -> Duration {
    tokio_sample(threads, move || async move {
        let hs: Vec<_> = (0..actors)
            .map(|_| {
                tokio::spawn(async move {
                    for _ in 0..each {
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for h in hs {
            h.await.unwrap();
        }
    })
    .0
}

fn smarm_yield_many(threads: usize) -> Duration {
    smarm_yields(threads, YIELD_ACTORS, YIELDS_EACH)
}
fn tokio_yield_many(threads: usize) -> Duration {
    tokio_yields(threads, YIELD_ACTORS, YIELDS_EACH)
}
fn smarm_yield_hot(threads: usize) -> Duration {
    smarm_yields(threads, 1, HOT_YIELDS)
}
fn tokio_yield_hot(threads: usize) -> Duration {
    tokio_yields(threads, 1, HOT_YIELDS)
}

// ---- ping_pong_oneshot / spawn_pair_control ----

fn smarm_ping_pong_oneshot(threads: usize) -> Duration {
    let (t, sum) = smarm_sample(threads, false, || {
        let mut sum = 0u64;
        for i in 0..PING_ROUNDS as u64 {
            let (to_b, from_a) = smarm::channel::oneshot::<u64>();
            let (to_a, from_b) = smarm::channel::oneshot::<u64>();
            let b = smarm::spawn(move || to_a.send(from_a.recv().unwrap() + 1).unwrap());
            let a = smarm::spawn(move || {
                to_b.send(i).unwrap();
                from_b.recv().unwrap()
            });
            sum += a.join().unwrap();
            b.join().unwrap();
        }
        sum
    });
    assert_eq!(sum, expected_ping_sum());
    t
}

fn tokio_ping_pong_oneshot(threads: usize) -> Duration {
    let (t, sum) = tokio_sample(threads, || async {
        let mut sum = 0u64;
        for i in 0..PING_ROUNDS as u64 {
            let (to_b, from_a) = tokio::sync::oneshot::channel::<u64>();
            let (to_a, from_b) = tokio::sync::oneshot::channel::<u64>();
            let b = tokio::spawn(async move { to_a.send(from_a.await.unwrap() + 1).unwrap() });
            let a = tokio::spawn(async move {
                to_b.send(i).unwrap();
                from_b.await.unwrap()
            });
            sum += a.await.unwrap();
            b.await.unwrap();
        }
        sum
    });
    assert_eq!(sum, expected_ping_sum());
    t
}

fn expected_ping_sum() -> u64 {
    let n = PING_ROUNDS as u64;
    n * (n - 1) / 2 + n
}

fn smarm_spawn_pair_control(threads: usize) -> Duration {
    smarm_sample(threads, false, || {
        for i in 0..PING_ROUNDS as u64 {
            let b = smarm::spawn(move || black_box(i));
            let a = smarm::spawn(move || black_box(i));
            a.join().unwrap();
            b.join().unwrap();
        }
    })
    .0
}

fn tokio_spawn_pair_control(threads: usize) -> Duration {
    tokio_sample(threads, || async {
        for i in 0..PING_ROUNDS as u64 {
            let b = tokio::spawn(async move { black_box(i) });
            let a = tokio::spawn(async move { black_box(i) });
            a.await.unwrap();
            b.await.unwrap();
        }
    })
    .0
}

// ---- ping_pong_steady ----

fn smarm_ping_pong_steady(threads: usize) -> Duration {
    let (t, last) = smarm_sample(threads, false, || {
        let (to_b, from_a) = smarm::channel::channel::<u64>();
        let (to_a, from_b) = smarm::channel::channel::<u64>();
        let b = smarm::spawn(move || {
            for v in &from_a {
                to_a.send(v + 1).unwrap();
            }
        });
        let a = smarm::spawn(move || {
            let mut v = 0;
            for _ in 0..STEADY_ROUNDTRIPS {
                to_b.send(v).unwrap();
                v = from_b.recv().unwrap();
            }
            v
        });
        let last = a.join().unwrap();
        b.join().unwrap();
        last
    });
    assert_eq!(last, STEADY_ROUNDTRIPS);
    t
}

fn tokio_ping_pong_steady(threads: usize) -> Duration {
    let (t, last) = tokio_sample(threads, || async {
        let (to_b, mut from_a) = tokio::sync::mpsc::unbounded_channel::<u64>();
        let (to_a, mut from_b) = tokio::sync::mpsc::unbounded_channel::<u64>();
        let b = tokio::spawn(async move {
            while let Some(v) = from_a.recv().await {
                to_a.send(v + 1).unwrap();
            }
        });
        let a = tokio::spawn(async move {
            let mut v = 0;
            for _ in 0..STEADY_ROUNDTRIPS {
                to_b.send(v).unwrap();
                v = from_b.recv().await.unwrap();
            }
            v
        });
        let last = a.await.unwrap();
        b.await.unwrap();
        last
    });
    assert_eq!(last, STEADY_ROUNDTRIPS);
    t
}

// ---- chained_spawn ----

/// Spawns the next link; the link with `left == 0` signals the root instead.
fn smarm_link(left: usize, done: smarm::channel::OneshotSender<()>) {
    drop(smarm::spawn(move || {
        if left == 0 {
            done.send(()).unwrap();
        } else {
            smarm_link(left - 1, done);
        }
    }));
}

fn tokio_link(left: usize, done: tokio::sync::oneshot::Sender<()>) {
    drop(tokio::spawn(async move {
        if left == 0 {
            done.send(()).unwrap();
        } else {
            tokio_link(left - 1, done);
        }
    }));
}

fn smarm_chained_spawn(threads: usize) -> Duration {
    smarm_sample(threads, false, || {
        let (tx, rx) = smarm::channel::oneshot();
        smarm_link(CHAIN - 1, tx);
        rx.recv().unwrap();
    })
    .0
}

fn tokio_chained_spawn(threads: usize) -> Duration {
    tokio_sample(threads, || async {
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio_link(CHAIN - 1, tx);
        rx.await.unwrap();
    })
    .0
}

// ---- deep_recursion ----

/// Recurses `depth` frames, each writing a `FRAME_BYTES` buffer on the stack and reading it
/// back after the call below returns (so the frame is live across the recursion).
#[inline(never)]
fn recurse(depth: u32) -> u64 {
    let mut frame = [depth as u8; FRAME_BYTES];
    black_box(&mut frame);
    let below = if depth == 0 { 0 } else { recurse(depth - 1) };
    below + u64::from(frame[depth as usize % FRAME_BYTES])
}

fn expected_recursion() -> u64 {
    (0..=RECURSE_DEPTH).map(|d| u64::from(d as u8)).sum()
}

fn smarm_deep_recursion(threads: usize) -> Duration {
    let (t, sum) = smarm_sample(threads, false, || {
        let hs: Vec<_> = (0..RECURSE_ACTORS).map(|_| smarm::spawn(|| recurse(black_box(RECURSE_DEPTH)))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(sum, expected_recursion() * RECURSE_ACTORS as u64);
    t
}

fn tokio_deep_recursion(threads: usize) -> Duration {
    let (t, sum) = tokio_sample(threads, || async {
        let hs: Vec<_> =
            (0..RECURSE_ACTORS).map(|_| tokio::spawn(async { recurse(black_box(RECURSE_DEPTH)) })).collect();
        let mut sum = 0;
        for h in hs {
            sum += h.await.unwrap();
        }
        sum
    });
    assert_eq!(sum, expected_recursion() * RECURSE_ACTORS as u64);
    t
}

// ---- fan_out_compute ----

fn xorshift(seed: u64) -> u64 {
    let mut x = seed;
    for _ in 0..XORSHIFT_STEPS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

fn expected_fan_out() -> u64 {
    static SUM: OnceLock<u64> = OnceLock::new();
    *SUM.get_or_init(|| (0..FAN_ACTORS as u64).map(|i| xorshift(i + 1)).fold(0, u64::wrapping_add))
}

fn smarm_fan_out_compute(threads: usize) -> Duration {
    let (t, sum) = smarm_sample(threads, false, || {
        let (tx, rx) = smarm::channel::channel::<u64>();
        for i in 0..FAN_ACTORS as u64 {
            let tx = tx.clone();
            drop(smarm::spawn(move || tx.send(xorshift(black_box(i + 1))).unwrap()));
        }
        drop(tx);
        (0..FAN_ACTORS).map(|_| rx.recv().unwrap()).fold(0, u64::wrapping_add)
    });
    assert_eq!(sum, expected_fan_out());
    t
}

fn tokio_fan_out_compute(threads: usize) -> Duration {
    let (t, sum) = tokio_sample(threads, || async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
        for i in 0..FAN_ACTORS as u64 {
            let tx = tx.clone();
            drop(tokio::spawn(async move { tx.send(xorshift(black_box(i + 1))).unwrap() }));
        }
        drop(tx);
        let mut sum = 0u64;
        for _ in 0..FAN_ACTORS {
            sum = sum.wrapping_add(rx.recv().await.unwrap());
        }
        sum
    });
    assert_eq!(sum, expected_fan_out());
    t
}

// ---- catch_unwind ----

/// The payload of every deliberate panic in `catch_unwind` (a `&'static str`).
const FAIL_MSG: &str = "general bench: deliberate panic";

fn fail() {
    std::panic::panic_any(FAIL_MSG);
}

/// Notes for the smarm `catch_unwind` row (none: it uses monitors, as the contract says).
const SMARM_CATCH_UNWIND_NOTE: &str = "";

/// smarm's `catch_unwind` root: spawns `PANICKERS` actors with `spawn_monitor`, each of which
/// panics, and observes every failure as a `Down` with `DownReason::Panic`; returns how many
/// it observed.
fn smarm_catch_unwind_root() -> usize {
    let monitors: std::collections::HashSet<_> = (0..PANICKERS).map(|_| smarm::spawn_monitor(fail).1).collect();
    let mut failures = 0;
    while failures < PANICKERS {
        if let smarm::Signal::Down(d) = smarm::recv_signal() {
            if monitors.contains(&d.monitor) && matches!(d.reason, smarm::DownReason::Panic(_)) {
                failures += 1;
            }
        }
    }
    failures
}

fn smarm_catch_unwind(threads: usize) -> Duration {
    let (t, failures) = smarm_sample(threads, true, smarm_catch_unwind_root);
    assert_eq!(failures, PANICKERS);
    t
}

fn tokio_catch_unwind(threads: usize) -> Duration {
    // Silence the report of tokio's deliberate panics (smarm's runs are quiet through
    // `quiet_panics`); any other panic still reaches the previous hook. Swapped outside the
    // timed region and restored before smarm runs again.
    let prev = Arc::new(std::panic::take_hook());
    let chained = prev.clone();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&FAIL_MSG) {
            chained(info);
        }
    }));
    let (t, failures) = tokio_sample(threads, || async {
        let hs: Vec<_> = (0..PANICKERS).map(|_| tokio::spawn(async { fail() })).collect();
        let mut failures = 0;
        for h in hs {
            if h.await.is_err_and(|e| e.is_panic()) {
                failures += 1;
            }
        }
        failures
    });
    drop(std::panic::take_hook()); // drops `chained`, the only other owner of `prev`
    std::panic::set_hook(Arc::try_unwrap(prev).ok().expect("the filtering hook was dropped"));
    assert_eq!(failures, PANICKERS);
    t
}

// ---- mpsc_contention ----

fn smarm_mpsc_contention(threads: usize) -> Duration {
    let (t, sum) = smarm_sample(threads, false, || {
        let (tx, rx) = smarm::channel::channel::<u64>();
        let hs: Vec<_> = (0..PRODUCERS)
            .map(|_| {
                let tx = tx.clone();
                smarm::spawn(move || {
                    for i in 0..MSGS_EACH {
                        tx.send(i).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let sum = (0..PRODUCERS as u64 * MSGS_EACH).map(|_| rx.recv().unwrap()).sum::<u64>();
        for h in hs {
            h.join().unwrap();
        }
        sum
    });
    assert_eq!(sum, PRODUCERS as u64 * MSGS_EACH * (MSGS_EACH - 1) / 2);
    t
}

fn tokio_mpsc_contention(threads: usize) -> Duration {
    let (t, sum) = tokio_sample(threads, || async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
        let hs: Vec<_> = (0..PRODUCERS)
            .map(|_| {
                let tx = tx.clone();
                tokio::spawn(async move {
                    for i in 0..MSGS_EACH {
                        tx.send(i).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let mut sum = 0u64;
        for _ in 0..PRODUCERS as u64 * MSGS_EACH {
            sum += rx.recv().await.unwrap();
        }
        for h in hs {
            h.await.unwrap();
        }
        sum
    });
    assert_eq!(sum, PRODUCERS as u64 * MSGS_EACH * (MSGS_EACH - 1) / 2);
    t
}

// ---- ring ----
//
// Actor i receives from channel i and sends to channel i+1 (mod RING_SIZE). The token is a
// count of hops left; the actor that receives 0 returns, which drops its sender and closes
// the next channel, and so on around the ring until every actor has returned.

fn smarm_ring(threads: usize) -> Duration {
    let (t, finisher) = smarm_sample(threads, false, || {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..RING_SIZE).map(|_| smarm::channel::channel::<u64>()).unzip();
        let inject = txs[0].clone();
        let mut txs: std::collections::VecDeque<_> = txs.into();
        txs.rotate_left(1);
        let hs: Vec<_> = rxs
            .into_iter()
            .zip(txs)
            .map(|(rx, next)| {
                smarm::spawn(move || {
                    while let Ok(left) = rx.recv() {
                        if left == 0 {
                            return true;
                        }
                        next.send(left - 1).unwrap();
                    }
                    false
                })
            })
            .collect();
        inject.send(RING_SIZE as u64 * RING_LAPS).unwrap();
        drop(inject);
        // Join every actor, as tokio_ring awaits every handle: stopping at the finisher
        // would leave the rest of the ring's wind-down to the runtime's shutdown, which
        // cancels (unwinds) actors still parked instead of letting them return.
        let finished: Vec<bool> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        finished.iter().position(|&f| f)
    });
    assert_eq!(finisher, Some(0));
    t
}

fn tokio_ring(threads: usize) -> Duration {
    let (t, finisher) = tokio_sample(threads, || async {
        let (txs, rxs): (Vec<_>, Vec<_>) =
            (0..RING_SIZE).map(|_| tokio::sync::mpsc::unbounded_channel::<u64>()).unzip();
        let inject = txs[0].clone();
        let mut txs: std::collections::VecDeque<_> = txs.into();
        txs.rotate_left(1);
        let hs: Vec<_> = rxs
            .into_iter()
            .zip(txs)
            .map(|(mut rx, next)| {
                tokio::spawn(async move {
                    while let Some(left) = rx.recv().await {
                        if left == 0 {
                            return true;
                        }
                        next.send(left - 1).unwrap();
                    }
                    false
                })
            })
            .collect();
        inject.send(RING_SIZE as u64 * RING_LAPS).unwrap();
        drop(inject);
        let mut finisher = None;
        for (i, h) in hs.into_iter().enumerate() {
            if h.await.unwrap() {
                finisher = Some(i);
            }
        }
        finisher
    });
    assert_eq!(finisher, Some(0));
    t
}

// ---- call_roundtrip ----

/// Notes for the smarm `call_roundtrip` row (none: it uses gen_server `call`).
const SMARM_CALL_NOTE: &str = "";

/// The `call_roundtrip` server: replies `req + 1`.
struct PlusOne;

impl smarm::gen_server::GenServer for PlusOne {
    type Call = u64;
    type Reply = u64;
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn handle_call(
        &mut self,
        req: u64,
        _from: &smarm::gen_server::Caller<u64>,
        _ctx: &smarm::gen_server::Ctx<Self>,
    ) -> smarm::gen_server::CallResult<u64> {
        smarm::gen_server::CallResult::Reply(req + 1)
    }
}

/// smarm's `call_roundtrip` root: one gen_server, `SERVER_CLIENTS` client actors making
/// `CALLS_EACH` `call`s each; returns the sum of the replies.
fn smarm_call_roundtrip_root() -> u64 {
    let server = smarm::gen_server::start(PlusOne).expect("server");
    let clients: Vec<_> = (0..SERVER_CLIENTS)
        .map(|_| {
            let server = server.clone();
            smarm::spawn(move || (0..CALLS_EACH).map(|i| server.call(i).unwrap()).sum::<u64>())
        })
        .collect();
    let sum = clients.into_iter().map(|h| h.join().unwrap()).sum();
    server.stop(smarm::DownReason::Normal).unwrap();
    sum
}

fn expected_calls() -> u64 {
    SERVER_CLIENTS as u64 * (CALLS_EACH * (CALLS_EACH + 1) / 2)
}

fn smarm_call_roundtrip(threads: usize) -> Duration {
    let (t, sum) = smarm_sample(threads, false, smarm_call_roundtrip_root);
    assert_eq!(sum, expected_calls());
    t
}

fn tokio_call_roundtrip(threads: usize) -> Duration {
    let (t, sum) = tokio_sample(threads, || async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, tokio::sync::oneshot::Sender<u64>)>();
        let server = tokio::spawn(async move {
            while let Some((req, reply)) = rx.recv().await {
                let _ = reply.send(req + 1);
            }
        });
        let clients: Vec<_> = (0..SERVER_CLIENTS)
            .map(|_| {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut sum = 0;
                    for i in 0..CALLS_EACH {
                        let (reply, answer) = tokio::sync::oneshot::channel();
                        tx.send((i, reply)).unwrap();
                        sum += answer.await.unwrap();
                    }
                    sum
                })
            })
            .collect();
        drop(tx);
        let mut sum = 0;
        for h in clients {
            sum += h.await.unwrap();
        }
        server.await.unwrap();
        sum
    });
    assert_eq!(sum, expected_calls());
    t
}

// ---- the section table ----

struct Section {
    name: &'static str,
    /// Per-unit time is total time / `count` / `scale` (1 for ns, 1,000 for us).
    count: usize,
    scale: f64,
    unit: &'static str,
    smarm: fn(usize) -> Duration,
    tokio: fn(usize) -> Duration,
    /// Shown on (and saved with) the smarm row when smarm's side is a stand-in.
    smarm_note: &'static str,
}

const fn section(
    name: &'static str,
    count: usize,
    unit: &'static str,
    smarm: fn(usize) -> Duration,
    tokio: fn(usize) -> Duration,
) -> Section {
    Section { name, count, scale: 1.0, unit, smarm, tokio, smarm_note: "" }
}

const SECTIONS: &[Section] = &[
    section("spawn_many", SPAWN_N, "ns/spawn", smarm_spawn_many, tokio_spawn_many),
    section("spawn_storm_busy", SPAWN_N, "ns/spawn", smarm_spawn_storm_busy, tokio_spawn_storm_busy),
    section("yield_many", YIELD_ACTORS * YIELDS_EACH, "ns/yield", smarm_yield_many, tokio_yield_many),
    section("yield_in_hot_loop", HOT_YIELDS, "ns/yield", smarm_yield_hot, tokio_yield_hot),
    section("ping_pong_oneshot", PING_ROUNDS, "ns/round", smarm_ping_pong_oneshot, tokio_ping_pong_oneshot),
    section("spawn_pair_control", PING_ROUNDS, "ns/round", smarm_spawn_pair_control, tokio_spawn_pair_control),
    section(
        "ping_pong_steady",
        STEADY_ROUNDTRIPS as usize,
        "ns/roundtrip",
        smarm_ping_pong_steady,
        tokio_ping_pong_steady,
    ),
    section("chained_spawn", CHAIN, "ns/spawn", smarm_chained_spawn, tokio_chained_spawn),
    Section {
        scale: 1_000.0,
        ..section("deep_recursion", RECURSE_ACTORS, "us/actor", smarm_deep_recursion, tokio_deep_recursion)
    },
    section("fan_out_compute", FAN_ACTORS, "ns/actor", smarm_fan_out_compute, tokio_fan_out_compute),
    Section {
        smarm_note: SMARM_CATCH_UNWIND_NOTE,
        ..section("catch_unwind", PANICKERS, "ns/actor", smarm_catch_unwind, tokio_catch_unwind)
    },
    section(
        "mpsc_contention",
        PRODUCERS * MSGS_EACH as usize,
        "ns/message",
        smarm_mpsc_contention,
        tokio_mpsc_contention,
    ),
    section("ring", RING_SIZE * RING_LAPS as usize, "ns/hop", smarm_ring, tokio_ring),
    Section {
        smarm_note: SMARM_CALL_NOTE,
        ..section(
            "call_roundtrip",
            SERVER_CLIENTS * CALLS_EACH as usize,
            "ns/call",
            smarm_call_roundtrip,
            tokio_call_roundtrip,
        )
    },
];

// ---- statistics, output ----

struct Row {
    section: &'static str,
    threads: String,
    system: &'static str,
    median: f64,
    min: f64,
    max: f64,
    unit: &'static str,
    note: &'static str,
}

fn summarize(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    (median, v[0], v[n - 1])
}

fn fmt_num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn print_header() {
    println!(
        "{:<20} {:>7} {:<6} {:>10} {:>21} {:<13} {:>11}  note",
        "section", "threads", "system", "median", "min..max", "unit", "smarm/tokio"
    );
}

fn print_row(r: &Row, ratio: Option<f64>) {
    let range = format!("{}..{}", fmt_num(r.min), fmt_num(r.max));
    let ratio = ratio.map_or(String::new(), |x| format!("{x:.2}"));
    println!(
        "{:<20} {:>7} {:<6} {:>10} {:>21} {:<13} {:>11}  {}",
        r.section,
        r.threads,
        r.system,
        fmt_num(r.median),
        range,
        r.unit,
        ratio,
        r.note
    );
}

/// Runs one (section, threads) pair: a warm-up of each, then `repeats` interleaved samples.
fn run_pair(s: &Section, threads: usize, repeats: usize) -> [Row; 2] {
    let per_unit = |d: Duration| d.as_nanos() as f64 / s.count as f64 / s.scale;
    (s.smarm)(threads);
    (s.tokio)(threads);
    let (mut sm, mut tk) = (Vec::with_capacity(repeats), Vec::with_capacity(repeats));
    for _ in 0..repeats {
        sm.push(per_unit((s.smarm)(threads)));
        tk.push(per_unit((s.tokio)(threads)));
    }
    let row = |system, samples, note| {
        let (median, min, max) = summarize(samples);
        Row { section: s.name, threads: format!("{threads}T"), system, median, min, max, unit: s.unit, note }
    };
    [row("smarm", sm, s.smarm_note), row("tokio", tk, "")]
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// "model name, N cores" from /proc/cpuinfo.
fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_owned()))
        .unwrap_or_else(|| "unknown cpu".to_owned());
    let cores = info.lines().filter(|l| l.starts_with("processor")).count();
    let cores = if cores == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { cores };
    format!("{model}, {cores} cores")
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Today's UTC date as YYYY-MM-DD (civil-from-days, H. Hinnant).
fn date() -> String {
    let days = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn write_json(path: &str, rows: &[Row], repeats: usize) -> std::io::Result<()> {
    let mut out = format!(
        "{{\"machine\": {}, \"commit\": {}, \"date\": {}, \"repeats\": {repeats},\n \"rows\": [",
        json_str(&machine()),
        json_str(&commit()),
        json_str(&date())
    );
    for (i, r) in rows.iter().enumerate() {
        out.push_str(if i == 0 { "\n  " } else { ",\n  " });
        out.push_str(&format!(
            "{{\"section\": {}, \"threads\": {}, \"system\": {}, \"median\": {}, \"min\": {}, \"max\": {}, \"unit\": {}",
            json_str(r.section),
            json_str(&r.threads),
            json_str(r.system),
            r.median,
            r.min,
            r.max,
            json_str(r.unit)
        ));
        if !r.note.is_empty() {
            out.push_str(&format!(", \"note\": {}", json_str(r.note)));
        }
        out.push('}');
    }
    out.push_str("\n]}\n");
    if let Some(dir) = std::path::Path::new(path).parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, out)
}

struct Args {
    filters: Vec<String>,
    json: Option<String>,
    repeats: usize,
}

fn usage() -> ! {
    eprintln!("usage: cargo bench --bench general -- [SECTION...] [--json FILE] [--repeats N] [--quick]");
    eprintln!("sections:");
    for s in SECTIONS {
        eprintln!("  {}", s.name);
    }
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut args = Args { filters: Vec::new(), json: None, repeats: 7 };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bench" => {}
            "--json" => args.json = Some(it.next().unwrap_or_else(|| usage())),
            "--repeats" => {
                args.repeats = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).unwrap_or_else(|| usage())
            }
            "--quick" => args.repeats = 3,
            "-h" | "--help" => usage(),
            flag if flag.starts_with('-') => {
                eprintln!("general: unknown option {flag}");
                usage()
            }
            filter => args.filters.push(filter.to_owned()),
        }
    }
    args
}

fn main() {
    let args = parse_args();
    let sections: Vec<&Section> = SECTIONS
        .iter()
        .filter(|s| args.filters.is_empty() || args.filters.iter().any(|f| s.name.contains(f.as_str())))
        .collect();
    if sections.is_empty() {
        eprintln!("general: no section matches {:?}", args.filters);
        usage();
    }
    let nt = std::thread::available_parallelism().map_or(1, |n| n.get());
    let thread_counts: Vec<usize> = if nt > 1 { vec![1, nt] } else { vec![1] };
    println!(
        "general: {} section(s) x {:?} threads, {} repeats after 1 warm-up, per-unit times",
        sections.len(),
        thread_counts,
        args.repeats
    );
    print_header();
    let start = Instant::now();
    let mut rows = Vec::new();
    for s in sections {
        for &threads in &thread_counts {
            let [sm, tk] = run_pair(s, threads, args.repeats);
            print_row(&sm, None);
            print_row(&tk, Some(sm.median / tk.median));
            rows.push(sm);
            rows.push(tk);
        }
    }
    println!("general: total {:.1} s", start.elapsed().as_secs_f64());
    if let Some(path) = &args.json {
        match write_json(path, &rows, args.repeats) {
            Ok(()) => println!("general: wrote {path}"),
            Err(e) => {
                eprintln!("general: cannot write {path}: {e}");
                std::process::exit(1);
            }
        }
    }
}
