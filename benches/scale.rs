//! scale: how costs grow with the amount of work (issue 16 part 3). One measurement per
//! process, printed as one JSON line; `python3 sweep.py scale` (benches/scale.py) runs the
//! sweeps, one process per point, and draws the plots in `outputs/`.
//!
//! ```text
//! cargo bench --bench scale -- spawn  smarm|tokio N   # N actors that park: rate, RSS each
//! cargo bench --bench scale -- ring   smarm|tokio N   # ring of N actors: ns per hop (to the last hop)
//! cargo bench --bench scale -- calls  smarm|tokio C   # C clients of one server: calls/s
//! cargo bench --bench scale -- select VARIANT N       # selective receive behind N queued
//! ```
//!
//! Threads: `spawn`, `ring` and `calls` run on 2 threads (this machine's cores, `NT`);
//! `select` on 1, so that each send in it wakes the receiver once, deterministically.
//!
//! `select` variants (smarm only; tokio has no selective receive), each with N queued
//! envelopes that the receive does not want ahead of the one it does:
//! - `woken`: the receive parks, is woken by 10 unwanted envelopes one at a time, then gets
//!   its match. Without a save marker each wake searches all N again.
//! - `monitor`: `monitor` of a dead pid (its Down is queued at once) and a `recv_match` for
//!   that Down: searches the N.
//! - `monitor_mark`: the same with `Mailbox::mark` before the monitor and
//!   `recv_match_from(mark, ..)`: skips the N. (Not in a `--cfg smarm_scale_before` build,
//!   which compiles this file against a smarm that has no marks.)
//! - `call`: a gen_server `call` made by an actor with N queued envelopes (the reply does
//!   not go through the mailbox).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let usage = "usage: scale spawn|ring|calls smarm|tokio N, or scale select woken|monitor|monitor_mark|call N";
    if args.len() != 3 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let n: usize = args[2].parse().unwrap_or_else(|_| {
        eprintln!("scale: N must be a count, got {:?}\n{usage}", args[2]);
        std::process::exit(2)
    });
    let (mode, system) = (args[0].as_str(), args[1].as_str());
    let line = match (mode, system) {
        ("spawn", "smarm") => spawn_smarm(n),
        ("spawn", "tokio") => spawn_tokio(n),
        ("ring", "smarm") => ring_smarm(n),
        ("ring", "tokio") => ring_tokio(n),
        ("calls", "smarm") => calls_smarm(n),
        ("calls", "tokio") => calls_tokio(n),
        ("select", variant) => select(variant, n),
        _ => {
            eprintln!("scale: unknown {mode} {system}\n{usage}");
            std::process::exit(2)
        }
    };
    println!("{line}");
}

/// Threads of the `spawn`, `ring` and `calls` runs.
const THREADS: usize = 2;

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

// ---- spawn: N actors that park ----

/// The time until all `n` actors have run and parked, and RSS per actor (peak above the
/// level before the runtime was built).
fn spawn_smarm(n: usize) -> String {
    let before = status_kib("VmRSS:");
    let rt = smarm::Runtime::builder().threads(THREADS).max_actors(n + 16).build().expect("runtime");
    let secs = rt
        .run(move || {
            let (release, gate) = smarm::channel::watch(false);
            let parked = Arc::new(AtomicUsize::new(0));
            let start = Instant::now();
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let mut gate = gate.clone();
                    let parked = parked.clone();
                    smarm::spawn(move || {
                        parked.fetch_add(1, Ordering::Relaxed);
                        while !gate.get() {
                            gate.changed().expect("release sender dropped");
                        }
                    })
                })
                .collect();
            while parked.load(Ordering::Relaxed) < n {
                smarm::sleep(Duration::from_micros(200));
            }
            let secs = start.elapsed().as_secs_f64();
            release.send(true);
            for h in handles {
                h.join().expect("actor");
            }
            secs
        })
        .expect("root");
    let peak = status_kib("VmHWM:");
    spawn_line("smarm", n, secs, peak.saturating_sub(before))
}

fn spawn_tokio(n: usize) -> String {
    let before = status_kib("VmRSS:");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(THREADS).enable_time().build().expect("tokio");
    let secs = rt.block_on(async move {
        tokio::spawn(async move {
            let (release, gate) = tokio::sync::watch::channel(false);
            let parked = Arc::new(AtomicUsize::new(0));
            let start = Instant::now();
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let mut gate = gate.clone();
                    let parked = parked.clone();
                    tokio::spawn(async move {
                        parked.fetch_add(1, Ordering::Relaxed);
                        while !*gate.borrow_and_update() {
                            gate.changed().await.expect("release sender dropped");
                        }
                    })
                })
                .collect();
            while parked.load(Ordering::Relaxed) < n {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            let secs = start.elapsed().as_secs_f64();
            release.send(true).expect("receivers");
            for h in handles {
                h.await.expect("task");
            }
            secs
        })
        .await
        .expect("root")
    });
    drop(rt);
    let peak = status_kib("VmHWM:");
    spawn_line("tokio", n, secs, peak.saturating_sub(before))
}

fn spawn_line(system: &str, n: usize, secs: f64, rss_kib: u64) -> String {
    format!(
        "{{\"mode\":\"spawn\",\"system\":\"{system}\",\"n\":{n},\"secs\":{secs:.6},\"per_sec\":{:.0},\"rss_kib_per_actor\":{:.3}}}",
        n as f64 / secs,
        rss_kib as f64 / n as f64
    )
}

// ---- ring: hop latency against ring size ----

/// Hops per timed run: at least two laps, and enough for a stable figure on small rings.
fn ring_hops(n: usize) -> u64 {
    (2 * n as u64).max(200_000)
}

/// Runs of each ring size (after one warm-up run); the figure is their median.
const RING_RUNS: usize = 5;

fn ring_smarm(n: usize) -> String {
    let rt = smarm::Runtime::builder().threads(THREADS).max_actors(n + 16).build().expect("runtime");
    let ns = rt
        .run(move || {
            let mut runs = Vec::new();
            for run in 0..=RING_RUNS {
                let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| smarm::channel::channel::<u64>()).unzip();
                let (done_tx, done_rx) = smarm::channel::channel::<Instant>();
                let inject = txs[0].clone();
                let mut txs: std::collections::VecDeque<_> = txs.into();
                txs.rotate_left(1);
                let hs: Vec<_> = rxs
                    .into_iter()
                    .zip(txs)
                    .map(|(rx, next)| {
                        let done = done_tx.clone();
                        smarm::spawn(move || {
                            while let Ok(left) = rx.recv() {
                                if left == 0 {
                                    // The last hop: the clock stops here, before the ring
                                    // winds down (exits are not hops).
                                    done.send(Instant::now()).unwrap();
                                    return;
                                }
                                next.send(left - 1).unwrap();
                            }
                        })
                    })
                    .collect();
                drop(done_tx);
                let hops = ring_hops(n);
                let start = Instant::now();
                inject.send(hops).unwrap();
                drop(inject);
                let end = done_rx.recv().unwrap();
                for h in hs {
                    h.join().unwrap();
                }
                if run > 0 {
                    runs.push(end.duration_since(start).as_nanos() as f64 / hops as f64);
                }
            }
            median(runs)
        })
        .expect("root");
    format!("{{\"mode\":\"ring\",\"system\":\"smarm\",\"n\":{n},\"ns_per_hop\":{ns:.1}}}")
}

fn ring_tokio(n: usize) -> String {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(THREADS).build().expect("tokio");
    let ns = rt.block_on(async move {
        tokio::spawn(async move {
            let mut runs = Vec::new();
            for run in 0..=RING_RUNS {
                let (txs, rxs): (Vec<_>, Vec<_>) =
                    (0..n).map(|_| tokio::sync::mpsc::unbounded_channel::<u64>()).unzip();
                let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
                let inject = txs[0].clone();
                let mut txs: std::collections::VecDeque<_> = txs.into();
                txs.rotate_left(1);
                let hs: Vec<_> = rxs
                    .into_iter()
                    .zip(txs)
                    .map(|(mut rx, next)| {
                        let done = done_tx.clone();
                        tokio::spawn(async move {
                            while let Some(left) = rx.recv().await {
                                if left == 0 {
                                    done.send(Instant::now()).unwrap();
                                    return;
                                }
                                next.send(left - 1).unwrap();
                            }
                        })
                    })
                    .collect();
                drop(done_tx);
                let hops = ring_hops(n);
                let start = Instant::now();
                inject.send(hops).unwrap();
                drop(inject);
                let end = done_rx.recv().await.unwrap();
                for h in hs {
                    h.await.unwrap();
                }
                if run > 0 {
                    runs.push(end.duration_since(start).as_nanos() as f64 / hops as f64);
                }
            }
            median(runs)
        })
        .await
        .expect("root")
    });
    format!("{{\"mode\":\"ring\",\"system\":\"tokio\",\"n\":{n},\"ns_per_hop\":{ns:.1}}}")
}

// ---- calls: one server, C concurrent clients ----

/// Calls per timed run, split over the clients (at least one each).
const CALLS_TOTAL: usize = 200_000;
const CALL_RUNS: usize = 5;

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

fn calls_each(clients: usize) -> usize {
    (CALLS_TOTAL / clients).max(1)
}

fn calls_smarm(clients: usize) -> String {
    let rt = smarm::Runtime::builder().threads(THREADS).max_actors(clients + 16).build().expect("runtime");
    let per_sec = rt
        .run(move || {
            let server = smarm::gen_server::start(PlusOne).expect("server");
            let each = calls_each(clients);
            let mut runs = Vec::new();
            for run in 0..=CALL_RUNS {
                let start = Instant::now();
                let hs: Vec<_> = (0..clients)
                    .map(|_| {
                        let server = server.clone();
                        smarm::spawn(move || (0..each as u64).map(|i| server.call(i).unwrap()).sum::<u64>())
                    })
                    .collect();
                let sum: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
                let secs = start.elapsed().as_secs_f64();
                assert_eq!(sum, clients as u64 * (each as u64 * (each as u64 + 1) / 2));
                if run > 0 {
                    runs.push((clients * each) as f64 / secs);
                }
            }
            server.stop(smarm::DownReason::Normal).unwrap();
            median(runs)
        })
        .expect("root");
    format!("{{\"mode\":\"calls\",\"system\":\"smarm\",\"n\":{clients},\"calls_per_sec\":{per_sec:.0}}}")
}

fn calls_tokio(clients: usize) -> String {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(THREADS).build().expect("tokio");
    let per_sec = rt.block_on(async move {
        tokio::spawn(async move {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, tokio::sync::oneshot::Sender<u64>)>();
            let server = tokio::spawn(async move {
                while let Some((req, reply)) = rx.recv().await {
                    let _ = reply.send(req + 1);
                }
            });
            let each = calls_each(clients);
            let mut runs = Vec::new();
            for run in 0..=CALL_RUNS {
                let start = Instant::now();
                let hs: Vec<_> = (0..clients)
                    .map(|_| {
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            let mut sum = 0;
                            for i in 0..each as u64 {
                                let (reply, answer) = tokio::sync::oneshot::channel();
                                tx.send((i, reply)).unwrap();
                                sum += answer.await.unwrap();
                            }
                            sum
                        })
                    })
                    .collect();
                let mut sum = 0;
                for h in hs {
                    sum += h.await.unwrap();
                }
                let secs = start.elapsed().as_secs_f64();
                assert_eq!(sum, clients as u64 * (each as u64 * (each as u64 + 1) / 2));
                if run > 0 {
                    runs.push((clients * each) as f64 / secs);
                }
            }
            drop(tx);
            server.await.unwrap();
            median(runs)
        })
        .await
        .expect("root")
    });
    format!("{{\"mode\":\"calls\",\"system\":\"tokio\",\"n\":{clients},\"calls_per_sec\":{per_sec:.0}}}")
}

// ---- select: selective receive behind N queued envelopes ----

/// Receives timed per point (after one warm-up receive); the figure is their median.
const SELECT_RUNS: usize = 21;

/// What a `select` receiver's mailbox carries.
#[derive(Debug)]
enum Note {
    /// Queued ahead of what the receive wants.
    Old,
    /// An unwanted arrival that wakes the receive (`woken`).
    Noise,
    /// The one the receive wants (`woken`).
    Wanted,
}

fn select(variant: &str, n: usize) -> String {
    let known = ["woken", "monitor", "call"];
    #[cfg(not(smarm_scale_before))]
    let known_mark = variant == "monitor_mark";
    #[cfg(smarm_scale_before)]
    let known_mark = false;
    if !known.contains(&variant) && !known_mark {
        eprintln!("scale: unknown select variant {variant:?} (woken, monitor, monitor_mark, call)");
        std::process::exit(2);
    }
    // A build against an older smarm labels its figures as such.
    let label = if cfg!(smarm_scale_before) { format!("{variant}_before") } else { variant.to_string() };
    let variant = variant.to_string();
    let rt = smarm::Runtime::builder().threads(1).build().expect("runtime");
    let ns = rt
        .run(move || match variant.as_str() {
            "woken" => select_woken(n),
            "call" => select_call(n),
            _ => select_monitor(n, variant == "monitor_mark"),
        })
        .expect("root");
    format!("{{\"mode\":\"select\",\"system\":\"{label}\",\"n\":{n},\"ns_per_receive\":{ns:.1}}}")
}

/// `woken`: the receiver has `n` old envelopes queued; per round the root sends 10 noise
/// envelopes, yielding after each (one thread: the receiver runs, looks, parks again), then
/// the wanted one. Time per round, measured by the receiver from its first look to its
/// match.
fn select_woken(n: usize) -> f64 {
    let (times_tx, times_rx) = smarm::channel::channel::<f64>();
    let (ready_tx, ready_rx) = smarm::channel::channel::<()>();
    let receiver = smarm::spawn_actor(move |mb: smarm::Mailbox<Note>| {
        for _ in 0..=SELECT_RUNS {
            ready_tx.send(()).unwrap();
            let start = Instant::now();
            let got = mb.recv_match(|e| matches!(e, smarm::Envelope::Msg(Note::Wanted)));
            assert!(matches!(got, smarm::Envelope::Msg(Note::Wanted)));
            times_tx.send(start.elapsed().as_nanos() as f64).unwrap();
        }
    });
    for _ in 0..n {
        receiver.send(Note::Old);
    }
    let mut runs = Vec::new();
    for run in 0..=SELECT_RUNS {
        ready_rx.recv().unwrap();
        smarm::yield_now(); // the receiver looks at what is queued and parks
        for _ in 0..10 {
            receiver.send(Note::Noise);
            smarm::yield_now();
        }
        receiver.send(Note::Wanted);
        let t = times_rx.recv().unwrap();
        if run > 0 {
            runs.push(t);
        }
    }
    median(runs)
}

/// `monitor` / `monitor_mark`: an actor with `n` queued envelopes monitors a dead pid and
/// waits for that monitor's Down (queued at once), by `recv_match` or from a mark.
fn select_monitor(n: usize, marked: bool) -> f64 {
    let (tx, rx) = smarm::channel::oneshot();
    smarm::spawn_actor(move |mb: smarm::Mailbox<Note>| {
        let dead = smarm::spawn(|| ());
        let dead_pid = dead.pid();
        dead.join().unwrap();
        for _ in 0..n {
            mb.addr().send(Note::Old);
        }
        let mut runs = Vec::new();
        for run in 0..=SELECT_RUNS {
            let start = Instant::now();
            #[cfg(not(smarm_scale_before))]
            let down = if marked {
                let mark = mb.mark();
                let m = smarm::monitor(dead_pid);
                mb.recv_match_from(mark, |e| matches!(e, smarm::Envelope::Down(d) if d.monitor == m))
            } else {
                let m = smarm::monitor(dead_pid);
                mb.recv_match(|e| matches!(e, smarm::Envelope::Down(d) if d.monitor == m))
            };
            #[cfg(smarm_scale_before)]
            let down = {
                let _ = marked;
                let m = smarm::monitor(dead_pid);
                mb.recv_match(|e| matches!(e, smarm::Envelope::Down(d) if d.monitor == m))
            };
            assert!(matches!(down, smarm::Envelope::Down(_)));
            if run > 0 {
                runs.push(start.elapsed().as_nanos() as f64);
            }
        }
        assert_eq!(mb.len(), n);
        tx.send(median(runs)).unwrap();
    });
    rx.recv().unwrap()
}

/// `call`: an actor with `n` queued envelopes makes gen_server calls; time per call.
fn select_call(n: usize) -> f64 {
    let server = smarm::gen_server::start(PlusOne).expect("server");
    let (tx, rx) = smarm::channel::oneshot();
    let caller_server = server.clone();
    smarm::spawn_actor(move |mb: smarm::Mailbox<Note>| {
        for _ in 0..n {
            mb.addr().send(Note::Old);
        }
        let mut runs = Vec::new();
        for run in 0..=SELECT_RUNS {
            let start = Instant::now();
            assert_eq!(caller_server.call(run as u64).unwrap(), run as u64 + 1);
            if run > 0 {
                runs.push(start.elapsed().as_nanos() as f64);
            }
        }
        assert_eq!(mb.len(), n);
        tx.send(median(runs)).unwrap();
    });
    let ns = rx.recv().unwrap();
    server.stop(smarm::DownReason::Normal).unwrap();
    ns
}
