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
//! so the loom models (`loom_models` below, `cfg(loom)`) check exactly this code.
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

use crate::loom_shim::{fence, AtomicBool, AtomicU64, Ordering};

/// Whether an idle thread waits in the reactor (`epoll_wait`, woken by the reactor's
/// `mio::Waker`) rather than on its park token: a waker that claimed the thread's bit reads
/// it to pick the way to wake it.
///
/// The sleeper sets it *before* announcing sleep ([`Idle::prepare_park`]'s SeqCst RMW on the
/// bitmap), so a waker whose claiming RMW read that announcement also sees the flag (the
/// announce is a release, the claim an acquire: the flag's store happens before the read).
/// The sleeper clears it after it withdrew its bit; a waker that then reads false unparks
/// the thread's token instead, which only makes a later futex park return at once (a
/// spurious wake, which every park tolerates). The other way round, a stale true costs one
/// spurious `epoll_wait` return. `loom_models::poller_is_woken_through_the_reactor` checks
/// it.
#[derive(Default)]
pub(crate) struct PollFlag(AtomicBool);

impl PollFlag {
    /// Before `prepare_park`: this thread will wait in the reactor.
    pub(crate) fn enter(&self) {
        // Relaxed: ordered before the announcement by program order and published by its
        // SeqCst RMW (see the type doc).
        self.0.store(true, Ordering::Relaxed);
    }

    /// After the wait, once the bit is withdrawn.
    pub(crate) fn leave(&self) {
        // Relaxed: a stale true only costs a spurious wake (see the type doc).
        self.0.store(false, Ordering::Relaxed);
    }

    /// For a waker that has claimed the thread's bit.
    pub(crate) fn get(&self) -> bool {
        // Relaxed: the claim's acquire made the enter visible (see the type doc).
        self.0.load(Ordering::Relaxed)
    }
}

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
        // Read before writing: an awake owner costs no exclusive cache-line access. Relaxed
        // after the fence above: the fence pair (waker step 1, sleeper step 2) is what makes
        // this load see bit k.
        if self.sleeping[w].load(Ordering::Relaxed) & bit == 0 {
            return false;
        }
        // AcqRel: the claim is exclusive because it is an RMW (any ordering would do); the
        // ordering is not load-bearing (the work was published before the fence, and the
        // unpark synchronises with the park), and on x86_64 every RMW is a locked one anyway.
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
                // AcqRel: as in `wake_specific` (the RMW decides; the ordering is not needed).
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
        // Relaxed: a diagnostic snapshot; nothing is decided on it.
        self.sleeping.iter().map(|w| w.load(Ordering::Relaxed).count_ones() as usize).sum()
    }
}

/// Loom models of the idle/park protocol. Run with
/// `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_models`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::{Idle, PollFlag};
    use crate::loom_shim::loom_check;
    use crate::run_queue::MpmcRing;
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::sync::Arc;
    use loom::thread;

    /// A worker's idle loop (as in `worker.rs`): take work, else announce, re-check, park.
    /// Returns the value taken. Parks forever (a loom deadlock) if a wake is lost.
    fn sleeper_takes_one(idle: &Idle, ring: &MpmcRing, k: usize) -> u32 {
        loop {
            if let Some(v) = ring.pop() {
                return v;
            }
            if idle.prepare_park(k, || !ring.is_empty()) {
                thread::park();
                idle.clear(k);
            }
        }
    }

    /// The Dekker pair: the sleeper announces then re-checks the ring, the waker publishes
    /// then reads the bitmap. Either the sleeper sees the value or the waker sees bit 0;
    /// otherwise the sleeper parks forever and loom reports a deadlock.
    #[test]
    fn no_lost_wakeup() {
        loom_check(5, || {
            let idle = Arc::new(Idle::new(1));
            let ring = Arc::new(MpmcRing::new(2));
            let sleeper = {
                let (idle, ring) = (idle.clone(), ring.clone());
                thread::spawn(move || sleeper_takes_one(&idle, &ring, 0))
            };
            ring.push(7);
            if let Some(k) = idle.wake_any() {
                assert_eq!(k, 0);
                sleeper.thread().unpark();
            }
            assert_eq!(sleeper.join().unwrap(), 7);
            assert!(ring.is_empty());
        });
    }

    /// Work only thread 1 may run (its inbox) wakes thread 1, never the other sleeper.
    /// Thread 0 only announces itself and leaves (it would otherwise park forever, since
    /// nothing here is meant for it); its bit must survive untouched.
    #[test]
    fn wake_specific_reaches_owner() {
        loom_check(5, || {
            let idle = Arc::new(Idle::new(2));
            let inbox = Arc::new(AtomicBool::new(false));
            let t0 = {
                let idle = idle.clone();
                thread::spawn(move || assert!(idle.prepare_park(0, || false)))
            };
            let t1 = {
                let (idle, inbox) = (idle.clone(), inbox.clone());
                thread::spawn(move || loop {
                    // Relaxed suffices: the fences in prepare_park / wake_specific order
                    // the inbox against the bitmap. (A load, not a consuming `swap`: loom
                    // 0.7 lets a concurrent plain store slip between an RMW's read and
                    // write, tokio-rs/loom#254, which shows up as a bogus lost wake.)
                    if inbox.load(Ordering::Relaxed) {
                        return;
                    }
                    if idle.prepare_park(1, || inbox.load(Ordering::Relaxed)) {
                        thread::park();
                        idle.clear(1);
                    }
                })
            };
            inbox.store(true, Ordering::Relaxed);
            if idle.wake_specific(1) {
                t1.thread().unpark();
            }
            t1.join().unwrap();
            t0.join().unwrap();
            // Thread 0 is still announced and unclaimed; thread 1's bit is gone.
            assert_eq!(idle.sleepers(), 1);
            assert_eq!(idle.claim_any(), Some(0));
            assert_eq!(idle.claim_any(), None);
        });
    }

    /// Two sleepers announced, two concurrent wakers: each claims a different sleeper, so a
    /// burst of N wakes reaches N threads instead of unparking the lowest one N times.
    #[test]
    fn burst_reaches_distinct_sleepers() {
        loom_check(5, || {
            let idle = Arc::new(Idle::new(2));
            assert!(idle.prepare_park(0, || false));
            assert!(idle.prepare_park(1, || false));
            let wakers: Vec<_> = (0..2)
                .map(|_| {
                    let idle = idle.clone();
                    thread::spawn(move || idle.wake_any())
                })
                .collect();
            let mut claimed: Vec<usize> =
                wakers.into_iter().map(|w| w.join().unwrap().expect("a sleeper was announced")).collect();
            claimed.sort_unstable();
            assert_eq!(claimed, [0, 1]);
            assert_eq!(idle.sleepers(), 0);
        });
    }

    /// One thread idles in the reactor: it sets its `PollFlag`, announces sleep, re-checks,
    /// and waits on the "eventfd" (a condvar flag), never on its park token. The waker
    /// publishes work, claims the sleeper and wakes it the way the flag says. Had the waker
    /// taken the token path while the poller waits on the eventfd, the poller would wait
    /// forever (a loom deadlock).
    #[test]
    fn poller_is_woken_through_the_reactor() {
        use loom::sync::{Condvar, Mutex};
        loom_check(5, || {
            let idle = Arc::new(Idle::new(1));
            let ring = Arc::new(MpmcRing::new(2));
            let flag = Arc::new(PollFlag::default());
            let eventfd = Arc::new((Mutex::new(false), Condvar::new()));
            let poller = {
                let (idle, ring, flag, eventfd) = (idle.clone(), ring.clone(), flag.clone(), eventfd.clone());
                thread::spawn(move || loop {
                    if let Some(v) = ring.pop() {
                        return v;
                    }
                    flag.enter();
                    if idle.prepare_park(0, || !ring.is_empty()) {
                        let (m, cv) = &*eventfd;
                        let mut signalled = m.lock().unwrap();
                        while !*signalled {
                            signalled = cv.wait(signalled).unwrap();
                        }
                        *signalled = false;
                        drop(signalled);
                        idle.clear(0);
                    }
                    flag.leave();
                })
            };
            ring.push(7);
            if let Some(k) = idle.wake_any() {
                assert_eq!(k, 0);
                if flag.get() {
                    let (m, cv) = &*eventfd;
                    *m.lock().unwrap() = true;
                    cv.notify_one();
                } else {
                    // The token path: the poller is not waiting in the reactor (it re-checks
                    // the ring before it could).
                    poller.thread().unpark();
                }
            }
            assert_eq!(poller.join().unwrap(), 7);
        });
    }
}
