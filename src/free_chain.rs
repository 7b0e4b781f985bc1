//! A scheduler thread's list of freed slab slots that have not reached the slab's shared
//! free list yet.
//!
//! # Why
//!
//! With a spawner on one thread and its actors ending on another, the slab's shared free
//! list (a Treiber stack) took a CAS from each side per spawn, and its head's cache line
//! moved between the two cores twice per spawn: about a tenth of a spawn at two threads
//! (history 60). A thread now pushes the slots it frees onto its own list, whose head stays
//! in its own cache, and moves them to the shared list in one CAS per [`FLUSH_AT`], as Go
//! moves a P's free goroutines to the global list in batches (`gfput`).
//!
//! # Why it cannot hide a slot
//!
//! A slot on a thread's list is free but not on the shared list, so a spawn could find the
//! slab full while such a slot exists (and a `join` promises that the slot of the joined
//! actor can be reused). So every list is reachable from every thread: [`PendingFree::take_all`]
//! swaps the head out, and the slab's allocator takes all lists that way before it reports
//! the slab full. A chain another thread has taken but not yet pushed to the shared list is
//! on neither; the slab counts such flushes in progress and its allocator waits them out
//! (`Slab::pop_free_hidden`, which also says why the SeqCst orderings here suffice).
//!
//! # Algorithm
//!
//! Only the owner pushes (link the slot to the head it read, then CAS the head from that
//! value to the slot); anyone takes the whole list with one swap to `NIL`. No ABA: between
//! the owner's read and its CAS the head can only change to `NIL` (a take), since the owner
//! is the only pusher, and then the CAS fails. The take's Acquire swap reads the last push's
//! Release CAS, and every earlier push is in that release sequence (each is an RMW on the
//! same head), so all links of the taken chain are visible to the taker.

#![cfg_attr(loom, allow(dead_code))]

use crate::loom_shim::{AtomicU32, Ordering};

/// The end of a chain (and an empty list).
pub(crate) const NIL: u32 = u32::MAX;

/// A thread moves its list to the shared one when it has pushed this many.
pub(crate) const FLUSH_AT: u32 = 32;

/// Where each index's link lives (the slab's `next_free`; an array in the tests).
pub(crate) trait Links {
    fn link(&self, index: u32) -> &AtomicU32;
}

/// One thread's list of freed indices. See the module doc.
pub(crate) struct PendingFree {
    head: AtomicU32,
}

impl PendingFree {
    pub(crate) fn new() -> PendingFree {
        PendingFree { head: AtomicU32::new(NIL) }
    }

    /// Owner thread only: pushes `index`.
    #[inline]
    pub(crate) fn push(&self, index: u32, links: &impl Links) {
        // Relaxed: the CAS below validates it.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // Relaxed: published by the Release CAS.
            links.link(index).store(head, Ordering::Relaxed);
            // Release: a taker that swaps the head out (Acquire) sees the link and what the
            // caller wrote before (the slot's FREE state). Failure Relaxed: a take emptied
            // the list; retry on the new head.
            match self.head.compare_exchange_weak(head, index, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(cur) => head = cur,
            }
        }
    }

    /// Any thread: takes the whole list; returns its first and last index.
    #[inline]
    pub(crate) fn take_all(&self, links: &impl Links) -> Option<(u32, u32)> {
        // SeqCst (a plain load on x86_64): a cheap look first, in the single total order
        // that the slab's full-slab check relies on (`Slab::pop_free_hidden`).
        if self.head.load(Ordering::SeqCst) == NIL {
            return None;
        }
        // SeqCst: Acquire pairs with the pushes' Release (see the module doc); the total
        // order as above.
        let first = self.head.swap(NIL, Ordering::SeqCst);
        if first == NIL {
            return None;
        }
        let mut last = first;
        loop {
            // Relaxed: ordered by the Acquire swap above.
            let next = links.link(last).load(Ordering::Relaxed);
            if next == NIL {
                return Some((first, last));
            }
            last = next;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    struct Array(Vec<AtomicU32>);
    impl Links for Array {
        fn link(&self, index: u32) -> &AtomicU32 {
            &self.0[index as usize]
        }
    }

    fn chain(links: &Array, (first, last): (u32, u32)) -> Vec<u32> {
        let mut v = vec![first];
        let mut i = first;
        while i != last {
            i = links.link(i).load(Ordering::Relaxed);
            v.push(i);
        }
        assert_eq!(links.link(last).load(Ordering::Relaxed), NIL, "a taken chain ends in NIL");
        v
    }

    #[test]
    fn take_all_returns_the_pushes_newest_first_and_empties_the_list() {
        let links = Array((0..4).map(|_| AtomicU32::new(0)).collect());
        let list = PendingFree::new();
        assert_eq!(list.take_all(&links), None);
        for i in [2, 0, 3] {
            list.push(i, &links);
        }
        let taken = list.take_all(&links).unwrap();
        assert_eq!(chain(&links, taken), vec![3, 0, 2]);
        assert_eq!(list.take_all(&links), None);
        list.push(1, &links);
        assert_eq!(chain(&links, list.take_all(&links).unwrap()), vec![1]);
    }

    /// The owner pushes while other threads take: every index comes out exactly once.
    #[test]
    fn concurrent_takes_lose_and_duplicate_nothing() {
        const N: u32 = 20_000;
        let links = Array((0..N).map(|_| AtomicU32::new(0)).collect());
        let list = PendingFree::new();
        let mut seen: Vec<u32> = std::thread::scope(|s| {
            let takers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut got = Vec::new();
                        for _ in 0..N {
                            if let Some(c) = list.take_all(&links) {
                                got.extend(chain(&links, c));
                            }
                        }
                        got
                    })
                })
                .collect();
            for i in 0..N {
                list.push(i, &links);
            }
            takers.into_iter().flat_map(|t| t.join().unwrap()).collect()
        });
        if let Some(c) = list.take_all(&links) {
            seen.extend(chain(&links, c));
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..N).collect::<Vec<_>>());
    }
}

#[cfg(loom)]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    struct Array(Vec<AtomicU32>);
    impl Links for Array {
        fn link(&self, index: u32) -> &AtomicU32 {
            &self.0[index as usize]
        }
    }

    fn drain(links: &Array, c: Option<(u32, u32)>, out: &mut Vec<u32>) {
        if let Some((first, last)) = c {
            let mut i = first;
            loop {
                out.push(i);
                if i == last {
                    break;
                }
                i = links.link(i).load(Ordering::Relaxed);
            }
            assert_eq!(links.link(last).load(Ordering::Relaxed), NIL);
        }
    }

    /// The owner pushes two indices while a thief takes the list: each index is taken once,
    /// by the thief or by the owner's own take afterwards, with its link intact.
    #[test]
    fn free_chain_push_races_take_all() {
        loom::model(|| {
            let shared = Arc::new((PendingFree::new(), Array((0..2).map(|_| AtomicU32::new(0)).collect())));
            let thief = {
                let shared = shared.clone();
                loom::thread::spawn(move || {
                    let mut got = Vec::new();
                    drain(&shared.1, shared.0.take_all(&shared.1), &mut got);
                    got
                })
            };
            shared.0.push(0, &shared.1);
            shared.0.push(1, &shared.1);
            let mut got = thief.join().unwrap();
            drain(&shared.1, shared.0.take_all(&shared.1), &mut got);
            got.sort_unstable();
            assert_eq!(got, vec![0, 1]);
        });
    }
}
