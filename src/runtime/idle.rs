//! The idle/park protocol: how scheduler threads go to sleep without missing work, and
//! how work finds a sleeper.
//!
//! # State
//!
//! `sleeping` is a bitmap, one bit per scheduler thread (words of 64). Bit `k` set means
//! "thread k has announced that it is about to park or is parked, and nobody has claimed
//! it yet". Thread k sets its own bit; anybody may clear it, and whoever clears it (with an
//! RMW that observed it set) owns the duty to unpark thread k. Thread k also clears its
//! own bit when it stops being idle.
//!
//! # The protocol (a Dekker pair)
//!
//! Sleeper (thread k), [`Idle::prepare_park`]:
//! 1. set bit k (`fetch_or`, SeqCst);
//! 2. `fence(SeqCst)`;
//! 3. re-check every source of work it may run (shared queue, its private inbox, the
//!    shutdown flag); if any has work, clear bit k and go back to work;
//! 4. otherwise park (the caller does this, on its `Parker`); after waking, clear bit k.
//!
//! Waker, after publishing work (a push to a queue), [`Idle::wake_any`] /
//! [`Idle::wake_specific`]:
//! 1. `fence(SeqCst)`;
//! 2. read the bitmap; claim a set bit with `fetch_and` (a bit another waker cleared first
//!    is not ours, try the next); unpark the thread whose bit we cleared.
//!
//! With the two SeqCst fences, either the sleeper's step 3 sees the published work, or the
//! waker's step 2 sees bit k: a wake is never lost. Both are written with fences and RMWs
//! so the loom models (`tests` below, `cfg(loom)`) check exactly this code.
//!
//! # Who gets woken
//!
//! - Claiming clears the bit, so a burst of N wakes reaches N distinct sleepers instead of
//!   unparking the lowest sleeper N times.
//! - Work only thread k may run (its private inbox) wakes thread k (`wake_specific`), never
//!   "the lowest sleeper", which could not run it.
//! - [`Idle::nudge`] is the cheap hint used when a thread takes one job and more remain: no
//!   fence, because the thread that saw the extra work is awake and will reach it anyway; it
//!   only spreads work sooner.

use crate::loom_shim::{fence, AtomicU64, Ordering};

pub(crate) struct Idle {
    sleeping: Box<[AtomicU64]>,
}

impl Idle {
    pub(crate) fn new(threads: usize) -> Idle {
        let words = threads.div_ceil(64).max(1);
        Idle { sleeping: (0..words).map(|_| AtomicU64::new(0)).collect() }
    }

    #[inline]
    fn word_bit(k: usize) -> (usize, u64) {
        (k / 64, 1u64 << (k % 64))
    }

    /// Sleeper steps 1-3. Returns true if the caller should park now, false if it found work
    /// (its bit is then cleared again).
    pub(crate) fn prepare_park(&self, k: usize, has_work: impl FnOnce() -> bool) -> bool {
        let (w, bit) = Self::word_bit(k);
        self.sleeping[w].fetch_or(bit, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if has_work() {
            self.clear(k);
            return false;
        }
        true
    }

    /// The sleeper is awake again (woken, timed out, or found work): withdraw its bit.
    pub(crate) fn clear(&self, k: usize) {
        let (w, bit) = Self::word_bit(k);
        // Relaxed is enough to *clear*: a stale set bit only costs a waker a wasted unpark
        // (thread k will find its token and re-check work), never a lost wake, because
        // thread k sets the bit again with SeqCst before it parks next time.
        if self.sleeping[w].load(Ordering::Relaxed) & bit != 0 {
            self.sleeping[w].fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// Waker, after publishing stealable work: claims one sleeper. Returns its index; the
    /// caller unparks it.
    pub(crate) fn wake_any(&self) -> Option<usize> {
        fence(Ordering::SeqCst);
        self.claim_any()
    }

    /// Waker, after publishing work only thread `k` may run: claims thread k if it sleeps.
    /// Returns true if the caller must unpark it.
    pub(crate) fn wake_specific(&self, k: usize) -> bool {
        fence(Ordering::SeqCst);
        let (w, bit) = Self::word_bit(k);
        // Read before writing: an awake owner costs no exclusive cache-line access.
        if self.sleeping[w].load(Ordering::Relaxed) & bit == 0 {
            return false;
        }
        self.sleeping[w].fetch_and(!bit, Ordering::AcqRel) & bit != 0
    }

    /// Hint: if someone sleeps, claim one (no fence; see the module doc).
    pub(crate) fn nudge(&self) -> Option<usize> {
        self.claim_any()
    }

    fn claim_any(&self) -> Option<usize> {
        for (w, word) in self.sleeping.iter().enumerate() {
            // Relaxed load: after the caller's fence (or as a hint); the claim below is the
            // RMW that decides.
            let mut cur = word.load(Ordering::Relaxed);
            while cur != 0 {
                let bit = cur & cur.wrapping_neg();
                let prev = word.fetch_and(!bit, Ordering::AcqRel);
                if prev & bit != 0 {
                    return Some(w * 64 + bit.trailing_zeros() as usize);
                }
                cur = prev & !bit;
            }
        }
        None
    }

    /// All threads whose bits are set, claimed (used at shutdown to wake everybody).
    pub(crate) fn claim_all(&self) -> Vec<usize> {
        let mut out = Vec::new();
        while let Some(k) = self.claim_any() {
            out.push(k);
        }
        out
    }

    /// Threads currently announced as sleeping (for tests and diagnostics).
    pub(crate) fn sleepers(&self) -> usize {
        self.sleeping.iter().map(|w| w.load(Ordering::Relaxed).count_ones() as usize).sum()
    }
}
