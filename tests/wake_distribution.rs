//! Who gets woken: the wake-distribution rules of the idle protocol (`src/runtime/idle.rs`)
//! and of the scheduler loop (`src/runtime/worker.rs`), observed through the hidden
//! `Diagnostics` counters (`sleepers()`, per-thread `unparks()`).
//!
//! # Determinism
//!
//! No sleeps, no clocks. Every wait polls a condition with `std::thread::yield_now()` in a
//! bounded loop and fails with a message (never hangs) if the bound is reached.
//!
//! The counter assertions need a quiescent start: every scheduler thread really parked, so
//! that none of them can pick up work without a counted unpark. `sleepers() == N` alone is
//! not enough: a thread sets its bit *before* it parks, and a thread holding a stale unpark
//! token (left by a waker that claimed it while it was re-checking for work) returns from
//! `park` at once and clears its bit itself. So [`wait_all_parked`] also requires each
//! scheduler thread's OS state to be `S` (blocked in the kernel; in the idle loop the only
//! blocking call is the futex wait inside `park`, which a pending token skips). The OS
//! thread ids come from a [`Crew`] round, which runs one actor on every scheduler thread.
//!
//! Tests are serialised (a file-wide lock) so that their scheduler threads do not compete
//! for the CPUs with each other's.

use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use smarm::__private::Diagnostics;
use smarm::channel::{channel, Receiver, Sender, TryRecvError};
use smarm::{Runtime, DEFAULT_LIFO_RUN_LIMIT};

/// Bound on every "wait for a message / a condition" loop (each iteration yields the OS
/// thread once). Reached only when something is broken.
const POLL_LIMIT: u64 = 20_000_000;
/// Bound on the quiescence wait (each iteration reads `/proc` once per scheduler thread).
const PARK_POLL_LIMIT: u64 = 2_000_000;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Index of the scheduler thread running the calling actor.
#[inline(never)]
fn thread_here() -> usize {
    compiler_fence(Ordering::SeqCst);
    smarm::current_thread_index().expect("an actor runs on a scheduler thread")
}

/// `std::thread::panicking()` read out of line behind a barrier (std's panic count is a
/// thread-local; see the crate's migration rule).
#[inline(never)]
fn panicking_here() -> bool {
    compiler_fence(Ordering::SeqCst);
    std::thread::panicking()
}

/// The calling OS thread's kernel thread id.
fn os_tid() -> Option<u32> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// True if OS thread `tid` of this process is blocked in the kernel (state `S`).
fn blocked_in_kernel(tid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else { return false };
    // The state follows the command name, which is in parentheses and may contain anything.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) == Some("S")
}

/// Polls `cond`, yielding the OS thread between polls, at most `limit` times.
fn spin_until(limit: u64, mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..limit {
        if cond() {
            return true;
        }
        std::thread::yield_now();
    }
    cond()
}

/// Receives on a plain thread, polling (bounded).
fn recv_polled<T: Send>(rx: &Receiver<T>, what: &str) -> Result<T, String> {
    for _ in 0..POLL_LIMIT {
        match rx.try_recv() {
            Ok(v) => return Ok(v),
            Err(TryRecvError::Empty) => std::thread::yield_now(),
            Err(_) => return Err(format!("{what}: every sender is gone")),
        }
    }
    Err(format!("{what}: nothing arrived in {POLL_LIMIT} polls"))
}

/// Waits until every scheduler thread is parked: all sleeping bits set and every scheduler
/// OS thread (`tids`, indexed by scheduler thread) blocked in the kernel. From then on no
/// scheduler thread runs anything until somebody claims and unparks it (counted).
fn wait_all_parked(diag: &Diagnostics, tids: &[u32]) -> Result<(), String> {
    let n = diag.threads();
    let parked = spin_until(PARK_POLL_LIMIT, || {
        diag.sleepers() == n && tids.iter().all(|&t| blocked_in_kernel(t)) && diag.sleepers() == n
    });
    if parked {
        Ok(())
    } else {
        Err(format!("the {n} scheduler threads never all parked (sleepers: {})", diag.sleepers()))
    }
}

/// Per-thread unparks between two snapshots.
fn delta(before: &[usize], after: &[usize]) -> Vec<usize> {
    before.iter().zip(after).map(|(b, a)| a - b).collect()
}

/// Where a crew member ran in a round.
#[derive(Clone, Copy, Debug)]
struct Seat {
    thread: usize,
    tid: u32,
}

/// `n` actors, each blocked in `recv()` on its own channel. A round sends one message to
/// each, back-to-back, then collects the replies. A member that receives holds its
/// scheduler thread (spinning on OS yields, no runtime call, so it neither switches out nor
/// migrates) until all `n` members of the round are running, then replies with where it
/// ran and blocks again. So a round with `n` = the number of scheduler threads runs exactly
/// one member on every scheduler thread at the same time: each thread must be awake for
/// it, and no thread can take two members.
struct Crew {
    txs: Vec<Sender<u64>>,
    replies: Receiver<Result<Seat, String>>,
    round: u64,
}

impl Crew {
    /// Spawns the members; call it from an actor.
    fn spawn(n: usize) -> Crew {
        let started = Arc::new(AtomicU64::new(0));
        let (reply_tx, replies) = channel();
        let txs = (0..n)
            .map(|_| {
                let (tx, rx) = channel::<u64>();
                let started = started.clone();
                let reply_tx = reply_tx.clone();
                smarm::spawn(move || {
                    while let Ok(round) = rx.recv() {
                        started.fetch_add(1, Ordering::SeqCst);
                        let everyone = round * n as u64;
                        let held = spin_until(POLL_LIMIT, || started.load(Ordering::SeqCst) >= everyone);
                        // No runtime call since the hold began: still the same thread.
                        let thread = thread_here();
                        let seat = match os_tid() {
                            Some(tid) if held => Ok(Seat { thread, tid }),
                            Some(_) => Err(format!("crew round {round}: the other members never all ran")),
                            None => Err("cannot read /proc/thread-self/stat".to_string()),
                        };
                        if reply_tx.send(seat).is_err() {
                            break;
                        }
                    }
                });
                tx
            })
            .collect();
        Crew { txs, replies, round: 0 }
    }

    /// One round; returns the seats sorted by scheduler thread (one per thread).
    fn round(&mut self) -> Result<Vec<Seat>, String> {
        self.round_watching(|| ()).map(|(seats, _)| seats)
    }

    /// One round, calling `watch` right after each send; returns the seats sorted by
    /// scheduler thread (one per thread) and what `watch` returned.
    fn round_watching<T>(&mut self, mut watch: impl FnMut() -> T) -> Result<(Vec<Seat>, Vec<T>), String> {
        self.round += 1;
        let mut watched = Vec::with_capacity(self.txs.len());
        for tx in &self.txs {
            tx.send(self.round).map_err(|_| "a crew member is gone".to_string())?;
            watched.push(watch());
        }
        let mut seats = Vec::with_capacity(self.txs.len());
        for _ in 0..self.txs.len() {
            seats.push(recv_polled(&self.replies, "crew reply")??);
        }
        seats.sort_by_key(|s| s.thread);
        if seats.windows(2).any(|w| w[0].thread == w[1].thread) {
            return Err(format!("crew members shared a scheduler thread: {seats:?}"));
        }
        Ok((seats, watched))
    }

    /// The OS thread id of every scheduler thread (crew size = number of threads).
    fn thread_ids(&mut self) -> Result<Vec<u32>, String> {
        let seats = self.round()?;
        if seats.iter().enumerate().any(|(k, s)| s.thread != k) {
            return Err(format!("the crew did not cover every scheduler thread: {seats:?}"));
        }
        Ok(seats.iter().map(|s| s.tid).collect())
    }
}

/// Runs `rt` with a root actor that calls `setup`, hands its result and a `Diagnostics` to
/// `driver` on a plain thread, and blocks in `recv()` (parked like every other actor, so all
/// scheduler threads can go idle) until the driver reports. Returns the driver's result.
fn drive<S, R>(rt: Runtime, setup: fn() -> S, driver: fn(Diagnostics, S) -> Result<R, String>) -> R
where
    S: Send + 'static,
    R: Send + 'static,
{
    let (result, handle) = rt
        .run(move || {
            let diag = Diagnostics::current().expect("Diagnostics::current() in an actor");
            let state = setup();
            let (done_tx, done_rx) = channel();
            let handle = std::thread::spawn(move || {
                // Everything the driver owns (senders, the crew) is dropped before it
                // reports, so no actor is woken from here after the root returns.
                let result = driver(diag, state);
                let _ = done_tx.send(result);
            });
            let result = done_rx.recv().unwrap_or_else(|_| Err("the driver thread panicked".to_string()));
            (result, handle)
        })
        .expect("the runtime ran");
    handle.join().expect("the driver thread");
    result.unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------------------
// 1. A burst of wakes reaches distinct sleepers.

const BURST_THREADS: usize = 4;
const BURST_ROUNDS: usize = 10;

/// One burst, as the driver saw it.
#[derive(Debug)]
struct Burst {
    /// Unparks per thread, from just before the first send to after the last reply.
    unparked: Vec<usize>,
    /// `sleepers()` read right after each send.
    sleepers_after_send: Vec<usize>,
    /// The threads the receivers ran on.
    ran_on: Vec<usize>,
}

fn burst_driver(diag: Diagnostics, mut crew: Crew) -> Result<Vec<Burst>, String> {
    let tids = crew.thread_ids()?;
    let mut bursts = Vec::with_capacity(BURST_ROUNDS);
    for _ in 0..BURST_ROUNDS {
        wait_all_parked(&diag, &tids)?;
        let before = diag.unparks();
        // The burst: one message to each of the N receivers, back-to-back from this plain
        // thread (each send: shared ring + `wake_any`), then the replies.
        let (seats, sleepers_after_send) = crew.round_watching(|| diag.sleepers())?;
        let after = diag.unparks();
        bursts.push(Burst {
            unparked: delta(&before, &after),
            sleepers_after_send,
            ran_on: seats.iter().map(|s| s.thread).collect(),
        });
    }
    Ok(bursts)
}

/// N receivers parked on N channels, all N scheduler threads parked (the root too); a plain
/// thread sends one message to each back-to-back, reading `sleepers()` after each send.
///
/// What the counters can show. Each receiver holds its thread until all N run (see
/// [`Crew`]), so the N receivers run on N distinct threads: every thread left its park, and
/// as all were really parked, each was unparked (counted) at least once. The unpark deltas
/// cannot show more than that, in either direction:
/// - They do not catch the old bug (a waker reads the lowest sleeping bit without clearing
///   it): a woken thread clears its own bit, and its `nudge` (taking one receiver while more
///   remain) reaches the next sleeper, and so on, so every thread still gets unparked. The
///   bug shows as several unparks of one thread (typically `[1, 3, 1, 1]`: the sends after
///   the first all land on thread 1 while it waits for a CPU) but...
/// - ...the correct code also unparks a thread twice now and then: a nudge may wake a
///   thread whose receiver another woken thread takes; it finds nothing, announces sleep
///   again and is claimed by a later send. (About one burst in twenty here.)
///
/// What separates them is the claim itself: a wake takes its sleeper out of the sleeping
/// set. With all N parked, after the i-th send at most N - i threads can still be in the set
/// (each of the i released receivers is running on a thread or has a claimed, awake thread
/// coming for it; a thread announces sleep again only after finding the ring empty, that is
/// after every released receiver was taken). With the bug the peeked sleeper stays in the
/// set until it runs and clears its own bit, so the count stays high. The read after the
/// last send is not checked: a thread woken for nothing and announcing sleep just as the
/// last receiver is sent could be seen there for an instant.
#[test]
fn burst_of_wakes_reaches_distinct_sleepers() {
    let _serial = serial();
    let n = BURST_THREADS;
    let rt = Runtime::builder().threads(n).build().unwrap();
    let bursts = drive(rt, || Crew::spawn(BURST_THREADS), burst_driver);
    for (r, b) in bursts.iter().enumerate() {
        assert_eq!(b.ran_on, (0..n).collect::<Vec<_>>(), "burst {r}: receivers did not run on every thread");
        assert!(
            b.unparked.iter().all(|&u| u >= 1),
            "burst {r}: a parked thread ran a receiver without being unparked: {b:?}"
        );
        for (i, &s) in b.sleepers_after_send.iter().enumerate().take(n - 1) {
            assert!(
                s < n - i,
                "burst {r}: after {} wakes, {s} of {n} threads were still announced as sleeping: \
                 a wake did not claim a distinct sleeper: {b:?}; all bursts: {bursts:?}",
                i + 1
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// 2. Work only thread k can run wakes thread k.

const PIN_THREADS: usize = 4;
/// The thread the unwinding actor is pinned to: not 0, the lowest sleeper once all sleep.
const PIN_TARGET: usize = PIN_THREADS - 1;
const PIN_ROUNDS: usize = 5;

/// What the actor blocked in a `Drop` during unwinding reports.
#[derive(Debug)]
enum Pinned {
    /// About to block in `recv()` mid-unwind.
    Blocked { thread: usize, panicking: bool },
    /// `recv()` returned a message.
    Woken { thread: usize, panicking: bool },
    /// The channel closed; the `Drop` returns and the unwind goes on.
    Done,
}

/// Blocks in `recv()` from its `Drop`, answering every message, until the channel closes.
struct BlockInDrop {
    rx: Receiver<()>,
    out: Sender<Pinned>,
}

impl Drop for BlockInDrop {
    fn drop(&mut self) {
        // Nothing here may panic (a panic while unwinding aborts): results go to the driver.
        let _ = self.out.send(Pinned::Blocked { thread: thread_here(), panicking: panicking_here() });
        while self.rx.recv().is_ok() {
            let _ = self.out.send(Pinned::Woken { thread: thread_here(), panicking: panicking_here() });
        }
        let _ = self.out.send(Pinned::Done);
    }
}

struct PinSetup {
    crew: Crew,
    to_pinned: Sender<()>,
    from_pinned: Receiver<Pinned>,
    probes_ok: Receiver<bool>,
}

/// Spawns the crew and `PIN_THREADS` probes. The probes hold their threads until all of
/// them run (so they occupy every thread at once); the one on thread `PIN_TARGET` then
/// panics, and during the unwind its `BlockInDrop` blocks in `recv()`: pinned to
/// `PIN_TARGET`.
fn pin_setup() -> PinSetup {
    let crew = Crew::spawn(PIN_THREADS);
    let (to_pinned, rx) = channel::<()>();
    let (out, from_pinned) = channel::<Pinned>();
    let (ok_tx, probes_ok) = channel::<bool>();
    let guard = Arc::new(Mutex::new(Some(BlockInDrop { rx, out })));
    let started = Arc::new(AtomicU64::new(0));
    for _ in 0..PIN_THREADS {
        let guard = guard.clone();
        let started = started.clone();
        let ok_tx = ok_tx.clone();
        smarm::spawn(move || {
            started.fetch_add(1, Ordering::SeqCst);
            let held = spin_until(POLL_LIMIT, || started.load(Ordering::SeqCst) >= PIN_THREADS as u64);
            let _ = ok_tx.send(held);
            if held && thread_here() == PIN_TARGET {
                let blocker = guard.lock().unwrap().take();
                if blocker.is_some() {
                    panic!("unwinding on purpose: the Drop below blocks on thread {PIN_TARGET}");
                }
            }
        });
    }
    PinSetup { crew, to_pinned, from_pinned, probes_ok }
}

/// One wake of the pinned actor.
#[derive(Debug)]
struct PinRound {
    unparked: Vec<usize>,
    /// `None`: every thread was asleep again and the actor had not run (the wake was lost).
    reply: Option<Pinned>,
}

#[derive(Debug)]
struct PinOutcome {
    blocked: Pinned,
    rounds: Vec<PinRound>,
}

/// Waits for a reply to a wake of the pinned actor; `None` if every scheduler thread has
/// announced sleep again while it has not replied. Sound: our wake claimed the pinned
/// thread (its bit was set), and that thread runs its inbox before it can announce sleep
/// again; so seeing all bits set means it re-announced after replying, and the fence
/// (acquire side of the release sequence on the bitmap, whose every write is an RMW) makes
/// the reply visible to the `try_recv` after it.
fn reply_or_lost(rx: &Receiver<Pinned>, diag: &Diagnostics) -> Result<Option<Pinned>, String> {
    for _ in 0..POLL_LIMIT {
        match rx.try_recv() {
            Ok(v) => return Ok(Some(v)),
            Err(TryRecvError::Empty) => {}
            Err(_) => return Err("the pinned actor is gone".to_string()),
        }
        if diag.sleepers() == diag.threads() {
            fence(Ordering::SeqCst);
            return match rx.try_recv() {
                Ok(v) => Ok(Some(v)),
                Err(TryRecvError::Empty) => Ok(None),
                Err(_) => Err("the pinned actor is gone".to_string()),
            };
        }
        std::thread::yield_now();
    }
    Err(format!("no reply from the pinned actor in {POLL_LIMIT} polls"))
}

fn pin_driver(diag: Diagnostics, setup: PinSetup) -> Result<PinOutcome, String> {
    let PinSetup { mut crew, to_pinned, from_pinned, probes_ok } = setup;
    for _ in 0..PIN_THREADS {
        if !recv_polled(&probes_ok, "probe")? {
            return Err("the probes never all ran at once".to_string());
        }
    }
    let blocked = recv_polled(&from_pinned, "pinned actor")?;
    let tids = crew.thread_ids()?;
    let mut rounds = Vec::with_capacity(PIN_ROUNDS);
    for _ in 0..PIN_ROUNDS {
        wait_all_parked(&diag, &tids)?;
        let before = diag.unparks();
        to_pinned.send(()).map_err(|_| "the pinned actor is gone".to_string())?;
        let reply = reply_or_lost(&from_pinned, &diag)?;
        let after = diag.unparks();
        let lost = reply.is_none();
        rounds.push(PinRound { unparked: delta(&before, &after), reply });
        if lost {
            break;
        }
    }
    // Let the unwind finish: close the channel, then run a crew round, which needs every
    // thread awake, so thread PIN_TARGET runs its inbox even if a wake of it was lost.
    drop(to_pinned);
    crew.round()?;
    while !matches!(recv_polled(&from_pinned, "pinned actor")?, Pinned::Done) {}
    Ok(PinOutcome { blocked, rounds })
}

/// An actor blocked in `recv()` inside a `Drop` during unwinding is pinned to its thread k
/// (here k = 3 by construction: four probes occupy the four threads at once and the one on
/// thread 3 panics). With every thread parked, a send from a plain thread must unpark
/// exactly thread k: thread 0, the lowest sleeper, could not run it.
#[test]
fn work_only_thread_k_can_run_wakes_thread_k() {
    let _serial = serial();
    let rt = Runtime::builder().threads(PIN_THREADS).quiet_panics(true).build().unwrap();
    let out = drive(rt, pin_setup, pin_driver);
    assert!(
        matches!(out.blocked, Pinned::Blocked { thread: PIN_TARGET, panicking: true }),
        "the Drop did not block mid-unwind on thread {PIN_TARGET}: {:?}",
        out.blocked
    );
    let mut expected = vec![0; PIN_THREADS];
    expected[PIN_TARGET] = 1;
    for (r, round) in out.rounds.iter().enumerate() {
        assert_eq!(
            round.unparked, expected,
            "round {r}: the wake of work pinned to thread {PIN_TARGET} unparked the wrong thread(s) \
             (reply None: every thread went back to sleep with the actor still queued for thread \
             {PIN_TARGET}); all rounds: {:?}",
            out.rounds
        );
        assert!(
            matches!(round.reply, Some(Pinned::Woken { thread: PIN_TARGET, panicking: true })),
            "round {r}: the pinned actor ran elsewhere or not mid-unwind: {:?}",
            round.reply
        );
    }
    assert_eq!(out.rounds.len(), PIN_ROUNDS, "{:?}", out.rounds);
}

// ---------------------------------------------------------------------------------------
// 3. Taking one of many from the shared queue nudges another sleeper.

const NUDGE_THREADS: usize = 2;
/// Actors the fan-out actor wakes (at least 3, so the ring still holds one after the first
/// pop that follows the wake-slot run).
const FANOUT: usize = 8;
const NUDGE_ROUNDS: usize = 5;

struct NudgeSetup {
    crew: Crew,
    to_fanout: Sender<u64>,
    fanout_ran_on: Receiver<usize>,
    leaves_done: Receiver<()>,
}

/// A fan-out actor A and `FANOUT` leaves B_1..B_M, all parked on their channels. When A is
/// woken it sends to every leaf: each leaf goes to A's thread's wake slot and displaces the
/// previous one into the shared ring, with no wake issued. Then A parks.
fn nudge_setup() -> NudgeSetup {
    let crew = Crew::spawn(NUDGE_THREADS);
    let (leaf_reply, leaves_done) = channel::<()>();
    let leaves: Vec<Sender<u64>> = (0..FANOUT)
        .map(|_| {
            let (tx, rx) = channel::<u64>();
            let leaf_reply = leaf_reply.clone();
            smarm::spawn(move || {
                while rx.recv().is_ok() {
                    if leaf_reply.send(()).is_err() {
                        break;
                    }
                }
            });
            tx
        })
        .collect();
    let (to_fanout, rx) = channel::<u64>();
    let (fanout_reply, fanout_ran_on) = channel::<usize>();
    smarm::spawn(move || {
        while let Ok(round) = rx.recv() {
            let here = thread_here();
            for leaf in &leaves {
                let _ = leaf.send(round);
            }
            if fanout_reply.send(here).is_err() {
                break;
            }
        }
    });
    NudgeSetup { crew, to_fanout, fanout_ran_on, leaves_done }
}

#[derive(Debug)]
struct NudgeRound {
    unparked: Vec<usize>,
    fanout_ran_on: usize,
}

fn nudge_driver(diag: Diagnostics, setup: NudgeSetup) -> Result<Vec<NudgeRound>, String> {
    let NudgeSetup { mut crew, to_fanout, fanout_ran_on, leaves_done } = setup;
    let tids = crew.thread_ids()?;
    let mut rounds = Vec::with_capacity(NUDGE_ROUNDS);
    for r in 0..NUDGE_ROUNDS as u64 {
        wait_all_parked(&diag, &tids)?;
        let before = diag.unparks();
        // One wake from here (shared ring + `wake_any`) for A; the leaves it wakes get none.
        to_fanout.send(r).map_err(|_| "the fan-out actor is gone".to_string())?;
        let a = recv_polled(&fanout_ran_on, "fan-out actor")?;
        for _ in 0..FANOUT {
            recv_polled(&leaves_done, "leaf")?;
        }
        // Every nudge precedes the run of the leaf it popped, hence its reply.
        let after = diag.unparks();
        rounds.push(NudgeRound { unparked: delta(&before, &after), fanout_ran_on: a });
    }
    Ok(rounds)
}

/// threads(2), both parked. One send from a plain thread wakes the fan-out actor A: the only
/// wake issued from outside. A's thread X runs A, which makes `FANOUT` leaves runnable (one
/// in X's wake slot, the rest in the shared ring, no wake). X runs the slot's leaf, then
/// takes one from the ring while more remain: it must nudge the other thread, which is
/// parked with its bit set, so the other thread's unpark count goes up. Deterministic: with
/// both threads really parked only the thread the send claimed can run A, and nothing but
/// the nudge can claim the other one. Without the nudge the other thread is never unparked.
#[test]
fn taking_one_of_many_nudges_another_sleeper() {
    let _serial = serial();
    let rt = Runtime::builder().threads(NUDGE_THREADS).build().unwrap();
    let rounds = drive(rt, nudge_setup, nudge_driver);
    for (r, round) in rounds.iter().enumerate() {
        let x = round.fanout_ran_on;
        assert!(round.unparked[x] >= 1, "round {r}: A ran on thread {x}, which was not unparked: {round:?}");
        for (k, &u) in round.unparked.iter().enumerate() {
            assert!(
                k == x || u >= 1,
                "round {r}: thread {x} took one of several queued actors but thread {k}, asleep, \
                 was not nudged: {round:?}; all rounds: {rounds:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// 4. A self-waking pair cannot starve the shared ring.

/// Round trips of the pair before it gives up waiting for the flag.
const MAX_TRIPS: u64 = 10_000_000;
/// Round trips before the third actor is put in the ring.
const WARMUP_TRIPS: u64 = 1_000;

#[derive(Debug)]
struct PairOutcome {
    threads: usize,
    /// Round trips the pair made (== MAX_TRIPS: it gave up).
    trips: u64,
    /// Round trip at which the third actor was displaced into the ring.
    injected_at: Option<u64>,
    /// The other threads were all asleep when it was.
    others_asleep: bool,
    /// The third actor received its message and set the flag.
    flagged: bool,
    /// The pair's round-trip count when the third actor ran.
    ran_at: u64,
}

fn pair_vs_ring(builder: smarm::Builder) -> PairOutcome {
    let rt = builder.build().unwrap();
    let threads = rt.threads();
    rt.run(move || {
        let diag = Diagnostics::current().expect("Diagnostics::current() in an actor");
        let flag = Arc::new(AtomicBool::new(false));
        let trips = Arc::new(AtomicU64::new(0));

        // The third actor: parked on its channel until the pair's P sends to it.
        let (f_tx, f_rx) = channel::<()>();
        let (ready_tx, ready_rx) = channel::<()>();
        let third = smarm::spawn({
            let (flag, trips) = (flag.clone(), trips.clone());
            move || {
                let _ = ready_tx.send(());
                let got = f_rx.recv().is_ok();
                let ran_at = trips.load(Ordering::Relaxed);
                flag.store(true, Ordering::Release);
                (got, ran_at)
            }
        });
        ready_rx.recv().expect("the third actor started");

        let (p_tx, p_rx) = channel::<u64>();
        let (q_tx, q_rx) = channel::<u64>();
        let q = smarm::spawn(move || {
            while let Ok(x) = q_rx.recv() {
                // Wakes P into this thread's wake slot.
                if p_tx.send(x).is_err() {
                    break;
                }
            }
        });
        let p = smarm::spawn(move || {
            let mut f_tx = Some(f_tx);
            let mut injected_at = None;
            let mut others_asleep = false;
            let mut t = 0;
            while t < MAX_TRIPS && !flag.load(Ordering::Acquire) {
                if t == WARMUP_TRIPS {
                    // Wait (holding this thread) until every other thread sleeps, so nobody
                    // but this thread can take the third actor from the ring.
                    others_asleep = spin_until(POLL_LIMIT, || diag.sleepers() == threads - 1);
                    // The third actor goes to this thread's wake slot; the send to Q below
                    // displaces it into the shared ring. No wake is issued for it.
                    if let Some(f_tx) = f_tx.take() {
                        let _ = f_tx.send(());
                    }
                    injected_at = Some(t);
                }
                // Wakes Q into this thread's wake slot.
                q_tx.send(t).expect("Q is alive");
                p_rx.recv().expect("Q answers");
                t += 1;
                trips.store(t, Ordering::Relaxed);
            }
            (t, injected_at, others_asleep)
        });
        let (trips, injected_at, others_asleep) = p.join().expect("P ran");
        q.join().expect("Q ran");
        let (flagged, ran_at) = third.join().expect("the third actor ran");
        PairOutcome { threads, trips, injected_at, others_asleep, flagged, ran_at }
    })
    .expect("the runtime ran")
}

/// Two actors ping-pong over channels (each send wakes the other into the waker thread's
/// wake slot) until a flag is set by a third actor that sits in the shared ring. With the
/// default `lifo_run_limit`, the wake slot yields to the ring after that many runs in a
/// row, so the third actor runs. On one thread this is exact: it runs within
/// `DEFAULT_LIFO_RUN_LIMIT` slot runs (at most that many round trips) of entering the ring.
#[test]
fn self_waking_pair_cannot_starve_the_ring() {
    let _serial = serial();
    for builder in [Runtime::builder().threads(1), Runtime::builder()] {
        let out = pair_vs_ring(builder);
        assert_eq!(out.injected_at, Some(WARMUP_TRIPS), "{out:?}");
        assert!(out.others_asleep, "the other threads never all slept: {out:?}");
        assert!(
            out.trips < MAX_TRIPS,
            "threads({}): the ping-pong pair ran {MAX_TRIPS} round trips without the actor in the \
             shared ring getting to run: {out:?}",
            out.threads
        );
        assert!(out.flagged, "{out:?}");
        if out.threads == 1 {
            assert!(
                out.ran_at - WARMUP_TRIPS <= u64::from(DEFAULT_LIFO_RUN_LIMIT),
                "threads(1): the actor in the ring waited more than {DEFAULT_LIFO_RUN_LIMIT} round \
                 trips: {out:?}"
            );
        }
    }
}
