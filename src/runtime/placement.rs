//! Where a new scheduler thread first runs: away from the CPU of the thread that starts it.
//!
//! `Runtime::run` starts threads 1..n and then runs the root on the calling thread (thread 0)
//! at once. The kernel may queue a new thread on the caller's own CPU, where it waits behind
//! the root, which does not block, while another CPU idles: on the 2-vCPU machine of history
//! 58 that happened in every other `run` of a 2-thread runtime (`sched_getcpu` of both), and
//! the second thread began 0.9 ms late, after the root had finished (0.1 ms when placed
//! well). The strict alternation fits fork balancing, which weighs each CPU's recent load (the
//! CPU the previous runtime's thread left still carries it); that cause was not checked.
//! Blocking the caller until its threads run (tokio's `block_on` blocks its caller while its
//! workers run the root) did not cure it there: the caller, woken, was placed on the new
//! thread's CPU, and the new thread again ran only after the root had finished.
//!
//! So `run` steers each new thread: right after creating it, it restricts the thread's
//! affinity to the caller's allowed CPUs minus the one the caller is on (the kernel then moves
//! the thread before it ever runs there), and the thread, once it runs, restores the caller's
//! mask. The restriction lasts from creation to the thread's first instructions; afterwards
//! the thread may run anywhere the caller may, as before, and a user's `on_thread_start` hook
//! (which runs later) can still pin it. Nothing is steered when the caller may run on a
//! single CPU, or on CPUs beyond `CPU_SETSIZE`.
//!
//! # The handshake
//!
//! The creator and the new thread race: the thread may start before the creator steers it,
//! and must then not be restricted afterwards (it would keep the narrow mask for good). One
//! byte per thread decides, by compare-and-swap, who was first:
//! - the creator moves it FREE -> STEERING, sets the mask, then stores STEERED;
//! - the thread moves it FREE -> STARTED (the creator then skips the steer), or finds the
//!   creator was first and waits for STEERED before it restores the mask (the creator is
//!   inside one system call meanwhile; the thread yields its CPU while it waits, in case the
//!   creator is queued behind it).

use std::sync::atomic::{AtomicU8, Ordering};

/// Nobody has claimed the thread's byte.
const FREE: u8 = 0;
/// The creator is restricting the thread's mask.
const STEERING: u8 = 1;
/// The restriction is in place: the thread restores the mask.
const STEERED: u8 = 2;
/// The thread ran first: it is not steered.
const STARTED: u8 = 3;

/// The caller's CPU mask and CPU at `run`, and one handshake byte per started thread.
pub(super) struct Placement {
    /// The CPUs the caller may run on: what each thread ends with.
    allowed: libc::cpu_set_t,
    /// `allowed` without the caller's current CPU: what a steered thread starts with.
    away: libc::cpu_set_t,
    /// Handshake byte of thread k (index k; index 0, the caller, unused).
    states: Box<[AtomicU8]>,
}

impl Placement {
    /// Reads the calling thread's mask and CPU, for `threads` scheduler threads. `None` when
    /// there is nowhere else to go (one allowed CPU) or the mask cannot be read.
    pub(super) fn capture(threads: usize) -> Option<Placement> {
        // SAFETY: `cpu_set_t` is plain bits (all-zero is the empty set); the call writes only
        // the set passed with its size, and pid 0 names the calling thread.
        let allowed = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
                return None;
            }
            set
        };
        // SAFETY: no arguments; returns the CPU number or -1.
        let cpu = unsafe { libc::sched_getcpu() };
        let cpu = usize::try_from(cpu).ok().filter(|&c| c < libc::CPU_SETSIZE as usize)?;
        // SAFETY: `CPU_ISSET`/`CPU_COUNT`/`CPU_CLR` read and write the set in place; `cpu` is
        // below `CPU_SETSIZE` (checked above).
        unsafe {
            if !libc::CPU_ISSET(cpu, &allowed) || libc::CPU_COUNT(&allowed) < 2 {
                return None;
            }
            let mut away = allowed;
            libc::CPU_CLR(cpu, &mut away);
            Some(Placement { allowed, away, states: (0..threads).map(|_| AtomicU8::new(FREE)).collect() })
        }
    }

    /// The creator, right after creating thread `k` as `thread`: keeps it off the caller's
    /// CPU unless it has already started.
    pub(super) fn steer(&self, k: usize, thread: libc::pthread_t) {
        let state = &self.states[k];
        // AcqRel / Acquire: more than needed; the CAS alone decides who came first, and the
        // ordering that matters is the STEERED store's (below).
        if state.compare_exchange(FREE, STEERING, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        // A failure (a CPU taken offline meanwhile) leaves the mask as it was, which is also
        // correct: steering is a hint.
        // SAFETY: `thread` came from a successful spawn whose `JoinHandle` the caller holds
        // (not joined), so it names a live or finished-but-unjoined thread; the call reads
        // `away` with its size.
        unsafe {
            libc::pthread_setaffinity_np(thread, std::mem::size_of_val(&self.away), &self.away);
        }
        // Release: the thread's Acquire load of STEERED then sees the system call done, so its
        // restore comes after the restriction and wins.
        state.store(STEERED, Ordering::Release);
    }

    /// Thread `k`, first thing when it runs: gives itself the caller's mask back if it was
    /// steered, and otherwise makes sure it will not be.
    pub(super) fn arrived(&self, k: usize) {
        let state = &self.states[k];
        // AcqRel / Acquire: as in `steer`.
        if state.compare_exchange(FREE, STARTED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return;
        }
        // Acquire: pairs with the Release store of STEERED.
        while state.load(Ordering::Acquire) != STEERED {
            // The creator may be queued behind this thread on its CPU: let it run.
            std::thread::yield_now();
        }
        // SAFETY: as in `capture` (pid 0 is the calling thread; the set is read only). A
        // failure leaves the thread on the narrower mask, which still runs it.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of_val(&self.allowed), &self.allowed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::thread::JoinHandleExt;
    use std::sync::mpsc;
    use std::sync::Arc;

    fn mask() -> libc::cpu_set_t {
        // SAFETY: as in `capture`.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set), 0);
            set
        }
    }

    fn same(a: &libc::cpu_set_t, b: &libc::cpu_set_t) -> bool {
        (0..libc::CPU_SETSIZE as usize).all(|c| {
            // SAFETY: `c` is below `CPU_SETSIZE`.
            unsafe { libc::CPU_ISSET(c, a) == libc::CPU_ISSET(c, b) }
        })
    }

    /// The machine the tests run on has two CPUs or more (CI's has two); on one CPU there is
    /// nothing to steer and `capture` says so.
    fn placement(threads: usize) -> Arc<Placement> {
        let p = Placement::capture(threads);
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            assert!(p.is_none(), "one CPU: nothing to steer");
            panic!("these tests need two CPUs");
        }
        Arc::new(p.expect("two CPUs allowed: capture steers"))
    }

    #[test]
    fn a_thread_steered_before_it_runs_ends_with_the_callers_mask() {
        let before = mask();
        let p = placement(2);
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let p2 = p.clone();
        let h = std::thread::spawn(move || {
            go_rx.recv().unwrap();
            // The creator has steered: until `arrived`, this thread is kept off its CPU.
            let during = mask();
            p2.arrived(1);
            (during, mask())
        });
        p.steer(1, h.as_pthread_t());
        go_tx.send(()).unwrap();
        let (during, after) = h.join().unwrap();
        assert!(same(&during, &p.away), "steered: the caller's CPU is excluded until it arrives");
        assert!(!same(&during, &before));
        assert!(same(&after, &before), "arrived: the caller's mask is back");
    }

    #[test]
    fn a_thread_that_runs_first_is_not_steered() {
        let before = mask();
        let p = placement(2);
        let (arrived_tx, arrived_rx) = mpsc::channel::<()>();
        let (steered_tx, steered_rx) = mpsc::channel::<()>();
        let p2 = p.clone();
        let h = std::thread::spawn(move || {
            p2.arrived(1);
            arrived_tx.send(()).unwrap();
            steered_rx.recv().unwrap();
            mask()
        });
        arrived_rx.recv().unwrap();
        p.steer(1, h.as_pthread_t());
        steered_tx.send(()).unwrap();
        assert!(same(&h.join().unwrap(), &before), "a steer after the thread started is skipped");
    }
}
