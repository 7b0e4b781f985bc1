//! Per-scheduler-thread run queues: a bounded FIFO that only its thread pushes to and any
//! thread pops from (its own thread, or an idle one stealing).
//!
//! # Why
//!
//! A run queue shared by all threads makes every yield and every displaced wake on every
//! thread a CAS on the same two counters, and with several cores that cache line moves
//! between them on each operation (outputs/history.md, findings 15 and 17). Work a thread
//! queues for itself stays in its own queue, whose counters live in its own cache unless
//! another thread comes to steal. The shared queue (`run_queue`, the cargo backend) is the
//! door for work queued from outside (spawns, wakes from other threads or plain threads)
//! and for the overflow of a full local queue.
//!
//! # Algorithm
//!
//! A ring of `CAP` cells with two counters, like the local queues of tokio and Go's
//! scheduler (without their batch steal): `tail`, written only by the owner, and `head`,
//! advanced by a CAS by whoever pops. Push: if `tail - head < CAP`, store the value into cell
//! `tail % CAP`, then publish with a Release store of `tail + 1`. Pop: read `head`, then
//! `tail` (Acquire: the cell's store is visible); if they differ, read cell `head % CAP` and
//! CAS `head` to `head + 1`; the value counts only if the CAS wins.
//!
//! Why the read before the CAS is sound: the owner overwrites cell `h % CAP` only at
//! `tail = h + CAP`, which needs `head > h` (occupancy below `CAP`), i.e. some pop already
//! moved `head` past `h`, so a popper that read the overwritten value fails its CAS. The
//! owner's check reads `head` with Acquire, pairing with the winning CAS's Release, so the
//! winner's read of the cell happens before the owner reuses it. Counters are `usize` and
//! wrap; `CAP` is a power of two, so `% CAP` stays consistent across the wrap.
//!
//! Every actor is in at most one queue at a time (the slot state machine), so a value is
//! pushed once and popped once; the loom models below check that no value is lost or
//! duplicated when the owner and a stealer race.

#![cfg_attr(loom, allow(dead_code))]

use crate::loom_shim::{AtomicUsize, CachePadded, Ordering};

/// Cells per queue. A thread with more queued work than this spills into the shared queue.
#[cfg(not(loom))]
pub(crate) const CAP: usize = 256;
/// Small under loom, so the models also cover the wrap-around.
#[cfg(loom)]
pub(crate) const CAP: usize = 2;

pub(crate) struct LocalQueue {
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
    cells: Box<[AtomicUsize]>,
}

impl LocalQueue {
    pub(crate) fn new() -> LocalQueue {
        LocalQueue {
            head: CachePadded(AtomicUsize::new(0)),
            tail: CachePadded(AtomicUsize::new(0)),
            cells: (0..CAP).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// Owner thread only. Queues `value`, or hands it back if the queue is full.
    #[inline]
    pub(crate) fn push(&self, value: u32) -> Result<(), u32> {
        // Relaxed: only the owner (this thread) writes `tail`.
        let t = self.tail.load(Ordering::Relaxed);
        // Acquire: pairs with the Release of the pop that moved `head` here, so that pop's
        // read of the cell we may now overwrite happened before our store.
        let h = self.head.load(Ordering::Acquire);
        if t.wrapping_sub(h) >= CAP {
            return Err(value);
        }
        // Relaxed: published by the Release store of `tail` below.
        self.cells[t % CAP].store(value as usize, Ordering::Relaxed);
        // Release: a popper that reads the new `tail` (Acquire) sees the cell's value.
        self.tail.store(t.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Any thread. Takes the oldest value, if any.
    #[inline]
    pub(crate) fn pop(&self) -> Option<u32> {
        // Acquire: see `push` (we may read a cell published after the `tail` we read next).
        let mut h = self.head.load(Ordering::Acquire);
        loop {
            // Acquire: pairs with the owner's Release store of `tail`: cells below it are
            // written.
            let t = self.tail.load(Ordering::Acquire);
            if t == h {
                return None;
            }
            // Relaxed: ordered after the Acquire load of `tail` above; only valid if the CAS
            // below wins (see the module doc).
            let v = self.cells[h % CAP].load(Ordering::Relaxed);
            // Success AcqRel: Release hands the cell back to the owner (see `push`); Acquire
            // orders us after the previous pop. Failure Acquire: retry from the new head.
            match self.head.compare_exchange_weak(h, h.wrapping_add(1), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(v as u32),
                Err(cur) => h = cur,
            }
        }
    }

    /// Owner thread only, in a runtime where no other thread pops from this queue (one
    /// scheduler thread: nobody steals). [`Self::pop`] without the CAS.
    #[inline]
    pub(crate) fn pop_unshared(&self) -> Option<u32> {
        // Relaxed (both): only this thread writes either counter.
        let h = self.head.load(Ordering::Relaxed);
        if self.tail.load(Ordering::Relaxed) == h {
            return None;
        }
        // Relaxed: written by this thread.
        let v = self.cells[h % CAP].load(Ordering::Relaxed);
        // Release: as the CAS in `pop` (the cell goes back to the owner: ourselves).
        self.head.store(h.wrapping_add(1), Ordering::Release);
        Some(v as u32)
    }

    /// Owner thread only. Takes up to `out.len()` of the oldest values into `out` with one
    /// CAS (a full queue's overflow leaves in one batch); returns how many.
    ///
    /// Reading the cells before the CAS is sound as in `pop`: only the owner (the caller)
    /// overwrites cells, and a thief that took some of them moved `head`, failing the CAS.
    pub(crate) fn pop_batch(&self, out: &mut [u32]) -> usize {
        // Acquire: as in `pop`.
        let mut h = self.head.load(Ordering::Acquire);
        loop {
            // Relaxed: only this thread (the owner) writes `tail`.
            let t = self.tail.load(Ordering::Relaxed);
            let n = t.wrapping_sub(h).min(out.len());
            if n == 0 {
                return 0;
            }
            for (i, o) in out[..n].iter_mut().enumerate() {
                // Relaxed: the owner wrote these cells itself; valid only if the CAS wins.
                *o = self.cells[h.wrapping_add(i) % CAP].load(Ordering::Relaxed) as u32;
            }
            // Success AcqRel, failure Acquire: as in `pop`.
            match self.head.compare_exchange_weak(h, h.wrapping_add(n), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return n,
                Err(cur) => h = cur,
            }
        }
    }

    /// Values queued (a snapshot; exact only on the owner thread between operations).
    pub(crate) fn len(&self) -> usize {
        // Acquire: see `pop`. Read `head` first so a concurrent pop cannot make the
        // difference negative (tail only grows).
        let h = self.head.load(Ordering::Acquire);
        let t = self.tail.load(Ordering::Acquire);
        t.wrapping_sub(h).min(CAP)
    }

    /// The position of the oldest value (a snapshot): it changes with every pop, so a thief
    /// can tell whether the value it saw before is still the oldest.
    pub(crate) fn head(&self) -> usize {
        // Acquire: as in `len`.
        self.head.load(Ordering::Acquire)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The solo owner's pop is FIFO across the wrap and interleaves with `pop` and
    /// `pop_batch` (which a runtime never mixes with it, but the counters are the same).
    #[test]
    fn unshared_pop_is_fifo_across_the_wrap() {
        let q = LocalQueue::new();
        let mut next_in = 0u32;
        let mut next_out = 0u32;
        for round in 0..3 * CAP as u32 {
            for _ in 0..round % 5 + 1 {
                if q.push(next_in).is_ok() {
                    next_in += 1;
                }
            }
            let got = if round % 7 == 0 { q.pop() } else { q.pop_unshared() };
            assert_eq!(got, Some(next_out));
            next_out += 1;
        }
        while let Some(v) = q.pop_unshared() {
            assert_eq!(v, next_out);
            next_out += 1;
        }
        assert_eq!(next_out, next_in);
        assert!(q.is_empty());
    }

    /// The overflow path: a full queue gives up its older half in order, across the wrap,
    /// and keeps the rest in order.
    #[test]
    fn batch_pop_takes_the_oldest_half_in_order() {
        let q = LocalQueue::new();
        for _ in 0..CAP / 3 {
            q.push(0).unwrap();
            q.pop();
        }
        for i in 0..CAP as u32 {
            q.push(i).unwrap();
        }
        let mut out = [0u32; CAP / 2];
        assert_eq!(q.pop_batch(&mut out), CAP / 2);
        assert!(out.iter().enumerate().all(|(i, &v)| v == i as u32));
        assert_eq!(q.len(), CAP / 2);
        for i in CAP / 2..CAP {
            assert_eq!(q.pop(), Some(i as u32));
        }
        assert_eq!(q.pop_batch(&mut out), 0);
    }

    #[test]
    fn fifo_wraps_and_reports_full() {
        let q = LocalQueue::new();
        for lap in 0..5u32 {
            for i in 0..CAP as u32 {
                q.push(lap * 1000 + i).unwrap();
            }
            assert_eq!(q.push(7), Err(7), "a full queue must refuse");
            assert_eq!(q.len(), CAP);
            for i in 0..CAP as u32 {
                assert_eq!(q.pop(), Some(lap * 1000 + i));
            }
            assert_eq!(q.pop(), None);
            assert!(q.is_empty());
        }
    }

    #[test]
    fn owner_and_stealers_lose_and_duplicate_nothing() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        const N: u32 = 200_000;
        let q = Arc::new(LocalQueue::new());
        let done = Arc::new(AtomicBool::new(false));
        let stealers: Vec<_> = (0..2)
            .map(|_| {
                let (q, done) = (q.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while !done.load(Ordering::Acquire) || !q.is_empty() {
                        match q.pop() {
                            Some(v) => got.push(v),
                            None => std::hint::spin_loop(),
                        }
                    }
                    got
                })
            })
            .collect();
        let mut mine = Vec::new();
        let mut next = 0u32;
        while next < N {
            match q.push(next) {
                Ok(()) => next += 1,
                Err(_) => mine.extend(q.pop()),
            }
            if next % 3 == 0 {
                mine.extend(q.pop());
            }
        }
        done.store(true, Ordering::Release);
        let mut seen = vec![0u8; N as usize];
        for v in mine.into_iter().chain(stealers.into_iter().flat_map(|s| s.join().unwrap())) {
            seen[v as usize] += 1;
        }
        while let Some(v) = q.pop() {
            seen[v as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c == 1), "a value was lost or popped twice");
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::LocalQueue;
    use crate::loom_shim::loom_check;
    use loom::sync::Arc;
    use loom::thread;

    /// The owner pushes two values and pops once while a stealer pops twice: every value is
    /// taken exactly once, whatever the interleaving.
    #[test]
    fn local_owner_and_stealer() {
        loom_check(3, || {
            let q = Arc::new(LocalQueue::new());
            let stealer = {
                let q = q.clone();
                thread::spawn(move || [q.pop(), q.pop()])
            };
            q.push(1).unwrap();
            q.push(2).unwrap();
            let mine = q.pop();
            let theirs = stealer.join().unwrap();
            let mut got: Vec<u32> = theirs.into_iter().chain([mine]).flatten().collect();
            while let Some(v) = q.pop() {
                got.push(v);
            }
            got.sort_unstable();
            assert_eq!(got, [1, 2]);
        });
    }

    /// The owner's batch pop (its overflow) races a stealer: each value is taken once.
    #[test]
    fn local_batch_pop_and_stealer() {
        loom_check(3, || {
            let q = Arc::new(LocalQueue::new());
            q.push(1).unwrap();
            q.push(2).unwrap();
            let stealer = {
                let q = q.clone();
                thread::spawn(move || q.pop())
            };
            let mut out = [0u32; 2];
            let n = q.pop_batch(&mut out);
            let mut got = out[..n].to_vec();
            got.extend(stealer.join().unwrap());
            while let Some(v) = q.pop() {
                got.push(v);
            }
            got.sort_unstable();
            assert_eq!(got, [1, 2]);
        });
    }

    /// Two stealers race for one value: exactly one gets it.
    #[test]
    fn local_two_stealers_one_value() {
        loom_check(3, || {
            let q = Arc::new(LocalQueue::new());
            q.push(5).unwrap();
            let a = {
                let q = q.clone();
                thread::spawn(move || q.pop())
            };
            let b = q.pop();
            let a = a.join().unwrap();
            assert_eq!(a.is_some() as u32 + b.is_some() as u32, 1);
            assert_eq!(a.or(b), Some(5));
        });
    }
}
