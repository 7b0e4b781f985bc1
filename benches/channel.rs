//! channel: ready-path latency of smarm's channel and sync primitives, side by side with
//! tokio's equivalents, in the same run.
//!
//! Every operation measured here completes at once (nothing parks): it is the cost a user
//! pays on the fast path. Each criterion group is one operation with up to three entries:
//!
//! - `smarm_actor`: the timed loop runs inside the root actor of a one-thread smarm runtime
//!   (the realistic context; a fresh runtime per sample, started and stopped outside the
//!   timed region);
//! - `smarm_thread`: the same smarm code on the bench's plain OS thread, outside any runtime;
//! - `tokio`: the tokio equivalent, awaited inside `block_on` of a current-thread runtime
//!   (default coop budget, as a user gets it).
//!
//! Operations: unbounded send+recv pair, bounded(1024) send+recv pair, oneshot
//! create+send+recv, watch send+changed, barrier(1) wait, uncontended mutex lock+unlock.
//!
//! One group is not a ready path: `gen_server_call`, a call round trip to a server (the
//! caller parks until the reply), on one thread: a smarm gen_server called from the root
//! actor, and tokio's usual request/reply (an unbounded mpsc request carrying a oneshot
//! reply, served by a spawned task) on a current-thread runtime. It has no `smarm_thread`
//! entry: a plain thread's call goes to a server on a runtime's scheduler thread, which is a
//! cross-thread round trip, not the same operation.
//!
//! Run: `cargo bench --bench channel` (or `-- GROUP` for one group, e.g. `-- unbounded`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};

/// Runs `body(iters)` as the root actor of a fresh one-thread smarm runtime and returns the
/// duration it measured (runtime start and shutdown are outside the timed region).
fn in_actor(iters: u64, body: fn(u64) -> Duration) -> Duration {
    smarm::Runtime::builder().threads(1).build().unwrap().run(move || body(iters)).unwrap()
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().unwrap()
}

/// Adds the `smarm_actor` and `smarm_thread` entries for `body` to the group.
fn smarm_pair(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, body: fn(u64) -> Duration) {
    g.bench_function("smarm_actor", |b| b.iter_custom(|iters| in_actor(iters, body)));
    g.bench_function("smarm_thread", |b| b.iter_custom(body));
}

// ---- smarm bodies: each sets up outside the timed loop, times `iters` operations ----

fn smarm_unbounded(iters: u64) -> Duration {
    let (tx, rx) = smarm::channel::channel::<u64>();
    // First push allocates the queue's block; keep that out of the timed loop.
    tx.send(0).unwrap();
    rx.recv().unwrap();
    let start = Instant::now();
    for i in 0..iters {
        tx.send(black_box(i)).unwrap();
        black_box(rx.recv().unwrap());
    }
    start.elapsed()
}

fn smarm_bounded(iters: u64) -> Duration {
    let (tx, rx) = smarm::channel::bounded::<u64>(1024);
    tx.send(0).unwrap();
    rx.recv().unwrap();
    let start = Instant::now();
    for i in 0..iters {
        tx.send(black_box(i)).unwrap();
        black_box(rx.recv().unwrap());
    }
    start.elapsed()
}

fn smarm_oneshot(iters: u64) -> Duration {
    let start = Instant::now();
    for i in 0..iters {
        let (tx, rx) = smarm::channel::oneshot::<u64>();
        tx.send(black_box(i)).unwrap();
        black_box(rx.recv().unwrap());
    }
    start.elapsed()
}

fn smarm_watch(iters: u64) -> Duration {
    let (tx, mut rx) = smarm::channel::watch::<u64>(0);
    let start = Instant::now();
    for i in 0..iters {
        tx.send(black_box(i));
        rx.changed().unwrap();
    }
    let elapsed = start.elapsed();
    black_box(rx.get());
    elapsed
}

fn smarm_barrier(iters: u64) -> Duration {
    let barrier = smarm::sync::Barrier::new(1);
    let start = Instant::now();
    for _ in 0..iters {
        black_box(black_box(&barrier).wait());
    }
    start.elapsed()
}

fn smarm_mutex(iters: u64) -> Duration {
    let m = smarm::sync::Mutex::new(0u64);
    let start = Instant::now();
    for i in 0..iters {
        let mut g = black_box(&m).lock();
        *g = g.wrapping_add(black_box(i));
    }
    let elapsed = start.elapsed();
    black_box(m.into_inner());
    elapsed
}

// ---- groups ----

fn unbounded(c: &mut Criterion) {
    let mut g = c.benchmark_group("unbounded_send_recv");
    smarm_pair(&mut g, smarm_unbounded);
    let rt = tokio_rt();
    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async move {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
                tx.send(0).unwrap();
                rx.recv().await.unwrap();
                let start = Instant::now();
                for i in 0..iters {
                    tx.send(black_box(i)).unwrap();
                    black_box(rx.recv().await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    g.finish();
}

fn bounded(c: &mut Criterion) {
    let mut g = c.benchmark_group("bounded1024_send_recv");
    smarm_pair(&mut g, smarm_bounded);
    let rt = tokio_rt();
    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async move {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(1024);
                tx.send(0).await.unwrap();
                rx.recv().await.unwrap();
                let start = Instant::now();
                for i in 0..iters {
                    tx.send(black_box(i)).await.unwrap();
                    black_box(rx.recv().await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    g.finish();
}

fn oneshot(c: &mut Criterion) {
    let mut g = c.benchmark_group("oneshot_create_send_recv");
    smarm_pair(&mut g, smarm_oneshot);
    let rt = tokio_rt();
    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async move {
                let start = Instant::now();
                for i in 0..iters {
                    let (tx, rx) = tokio::sync::oneshot::channel::<u64>();
                    tx.send(black_box(i)).unwrap();
                    black_box(rx.await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    g.finish();
}

fn watch(c: &mut Criterion) {
    let mut g = c.benchmark_group("watch_send_changed");
    smarm_pair(&mut g, smarm_watch);
    let rt = tokio_rt();
    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async move {
                let (tx, mut rx) = tokio::sync::watch::channel::<u64>(0);
                let start = Instant::now();
                for i in 0..iters {
                    tx.send(black_box(i)).unwrap();
                    rx.changed().await.unwrap();
                }
                let elapsed = start.elapsed();
                black_box(*rx.borrow_and_update());
                elapsed
            })
        })
    });
    g.finish();
}

fn barrier(c: &mut Criterion) {
    let mut g = c.benchmark_group("barrier1_wait");
    smarm_pair(&mut g, smarm_barrier);
    let rt = tokio_rt();
    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async move {
                let barrier = tokio::sync::Barrier::new(1);
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(black_box(&barrier).wait().await);
                }
                start.elapsed()
            })
        })
    });
    g.finish();
}

fn mutex(c: &mut Criterion) {
    let mut g = c.benchmark_group("mutex_lock_unlock");
    smarm_pair(&mut g, smarm_mutex);
    let rt = tokio_rt();
    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async move {
                let m = tokio::sync::Mutex::new(0u64);
                let start = Instant::now();
                for i in 0..iters {
                    let mut g = black_box(&m).lock().await;
                    *g = g.wrapping_add(black_box(i));
                }
                let elapsed = start.elapsed();
                black_box(m.into_inner());
                elapsed
            })
        })
    });
    g.finish();
}

/// Replies with its request.
struct Echo;

impl smarm::gen_server::GenServer for Echo {
    type Call = u64;
    type Reply = u64;
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn handle_call(
        &mut self,
        x: u64,
        _from: &smarm::gen_server::Caller<u64>,
        _ctx: &smarm::gen_server::Ctx<Self>,
    ) -> smarm::gen_server::CallResult<u64> {
        smarm::gen_server::CallResult::Reply(x)
    }
}

fn smarm_call(iters: u64) -> Duration {
    let server = smarm::gen_server::start(Echo).unwrap();
    let t = Instant::now();
    for i in 0..iters {
        black_box(server.call(black_box(i)).unwrap());
    }
    // The server is stopped by the runtime when the root returns, outside the timed region.
    t.elapsed()
}

fn gen_server_call(c: &mut Criterion) {
    let mut g = c.benchmark_group("gen_server_call");
    g.bench_function("smarm_actor", |b| b.iter_custom(|iters| in_actor(iters, smarm_call)));
    g.bench_function("tokio", |b| {
        let rt = tokio_rt();
        b.iter_custom(|iters| {
            rt.block_on(async move {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, tokio::sync::oneshot::Sender<u64>)>();
                let server = tokio::spawn(async move {
                    while let Some((req, reply)) = rx.recv().await {
                        let _ = reply.send(req);
                    }
                });
                let t = Instant::now();
                for i in 0..iters {
                    let (reply, answer) = tokio::sync::oneshot::channel();
                    tx.send((black_box(i), reply)).unwrap();
                    black_box(answer.await.unwrap());
                }
                let elapsed = t.elapsed();
                drop(tx);
                server.await.unwrap();
                elapsed
            })
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2)).sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = unbounded, bounded, oneshot, watch, barrier, mutex, gen_server_call
}
criterion_main!(benches);
