//! Heap bytes come back: an actor's exit reason, its task and its process state are freed
//! when it ends; and long-lived actors keep a bounded amount of heap (timers aimed at an
//! actor leave no bookkeeping once they fire, nor do supervisors a worker starts and stops).
//! A counting global allocator measures live heap bytes.
//!
//! The tests take `SERIAL`, so that no other test's allocations disturb a count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use std::sync::Mutex;
use std::time::Duration;

use smarm::supervisor::{self, Strategy, SupFlags};
use smarm::{DownReason, Envelope, Mailbox, Runtime};

/// Held by every test of this file: one count at a time.
static SERIAL: Mutex<()> = Mutex::new(());

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // Relaxed: a statistic read after the runtimes' threads were joined.
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const ACTORS: usize = 2_000;

fn one_runtime() {
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    rt.run(|| {
        for i in 0..ACTORS {
            let h = match i % 4 {
                0 => smarm::spawn(|| -> () { panic!("a panic message long enough to matter") }),
                1 => smarm::spawn(|| {
                    smarm::exit(smarm::current_pid(), DownReason::Custom("a custom exit reason".into()))
                }),
                2 => smarm::spawn(|| {
                    let (_tx, rx) = smarm::channel::oneshot::<()>();
                    let _ = rx.recv();
                }),
                _ => smarm::spawn(|| ()),
            };
            if i % 4 == 2 {
                smarm::yield_now();
                smarm::kill(h.pid());
            }
            let _ = h.join();
        }
    })
    .unwrap();
}

#[test]
fn actors_ending_in_every_way_leave_no_heap_bytes_behind() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Warm up once: process-wide caches (std's thread records, the warm stack list) fill.
    one_runtime();
    let before = LIVE.load(Ordering::Relaxed);
    one_runtime();
    let after = LIVE.load(Ordering::Relaxed);
    // A leaked reason string alone would be >= 20 bytes per actor of half of them.
    let grown = after - before;
    assert!(
        grown < 2_048,
        "{grown} heap bytes still live after {ACTORS} actors ended (before {before}, after {after})"
    );
}

const BATCH: u32 = 1_000;
const BATCHES: u32 = 20;

#[test]
fn long_lived_actors_leave_no_bookkeeping_behind() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fired_timers_aimed_at_a_live_actor_leave_no_bookkeeping();
    supervisors_started_and_stopped_by_a_worker_leave_no_bookkeeping();
}

fn supervisors_started_and_stopped_by_a_worker_leave_no_bookkeeping() {
    let rt = Runtime::builder().threads(1).build().unwrap();
    rt.run(|| {
        let mut live = Vec::new();
        for _ in 0..BATCHES {
            for _ in 0..BATCH {
                let s = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![]).unwrap();
                s.stop().unwrap();
            }
            live.push(LIVE.load(Ordering::Relaxed));
        }
        // An entry kept per supervisor (its handle holds the supervisor's mailbox) would add
        // ~300 bytes each: ~5 MB over the 18,000 after the first two batches.
        let growth = live[BATCHES as usize - 1] - live[1];
        assert!(
            growth < 32 * 1024,
            "live heap grew by {growth} bytes over {} supervisors: {live:?}",
            (BATCHES - 2) * BATCH
        );
    })
    .unwrap();
}

fn fired_timers_aimed_at_a_live_actor_leave_no_bookkeeping() {
    let rt = Runtime::builder().threads(1).build().unwrap();
    rt.run(|| {
        let (done_tx, done_rx) = smarm::channel::channel::<()>();
        // Acknowledges every batch once it has received all of it.
        let target = smarm::spawn_actor(move |mb: Mailbox<u32>| loop {
            for _ in 0..BATCH {
                match mb.recv() {
                    Envelope::Msg(u32::MAX) => return,
                    Envelope::Msg(_) => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
            done_tx.send(()).unwrap();
        });
        let mut live = Vec::new();
        for _ in 0..BATCHES {
            for i in 0..BATCH {
                let _ = smarm::send_after_addr(Duration::ZERO, &target, i);
            }
            done_rx.recv().unwrap();
            live.push(LIVE.load(Ordering::Relaxed));
        }
        target.send(u32::MAX);
        // After the first batches every structure has reached its working size; a key kept
        // per fired timer would add 16 bytes each, 16 * 18,000 = 288,000 bytes by the end.
        let growth = live[BATCHES as usize - 1] - live[1];
        assert!(
            growth < 32 * 1024,
            "live heap grew by {growth} bytes over {} fired timers: {live:?}",
            (BATCHES - 2) * BATCH
        );
    })
    .unwrap();
}
