//! Heap bytes come back: an actor's exit reason, its task and its process state are freed
//! when it ends. A counting global allocator measures live heap bytes around runtimes whose
//! actors end in every way (normal, panic, exit reason, kill).
//!
//! This file holds a single test so that no other test's allocations disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use smarm::{DownReason, Runtime};

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
