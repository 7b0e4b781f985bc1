//! The blocking pool: OS threads that run closures which would block a scheduler thread
//! (file I/O, DNS, C libraries), for `spawn_blocking`.
//!
//! - Grows on demand: a job that finds no idle thread starts one, up to `max_threads`
//!   (`Builder::max_blocking_threads`, default [`DEFAULT_MAX_BLOCKING_THREADS`]); beyond
//!   that, jobs queue in FIFO order.
//! - A thread idle for [`KEEP_ALIVE`] exits.
//! - Shutdown (when the runtime's scheduler threads have ended): queued jobs that have not
//!   started are dropped (their result senders with them, so a waiter, if one were left,
//!   would see the pool gone); running jobs are waited for up to the runtime's
//!   `shutdown_timeout`, then left to finish on their own (detached).
//!
//! Jobs run no smarm scheduler code: a job that panics only ends itself (the caller's
//! wrapper reports it); the thread catches it all the same and lives on.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Default maximum number of blocking-pool threads.
pub const DEFAULT_MAX_BLOCKING_THREADS: usize = 512;
/// How long an idle blocking-pool thread waits for a job before it exits.
pub const KEEP_ALIVE: Duration = Duration::from_secs(10);

pub(crate) type Job = Box<dyn FnOnce() + Send>;

struct State {
    queue: VecDeque<Job>,
    threads: usize,
    idle: usize,
    shutdown: bool,
}

struct Inner {
    state: Mutex<State>,
    /// Signalled when a job is queued (or at shutdown).
    work: Condvar,
    /// Signalled when a thread exits.
    exited: Condvar,
    max_threads: usize,
    keep_alive: Duration,
    /// Thread name and start/stop hooks (the runtime's builder).
    setup: super::ThreadSetup,
}

pub(crate) struct BlockingPool {
    inner: Arc<Inner>,
}

impl BlockingPool {
    pub(crate) fn new(max_threads: usize, keep_alive: Duration) -> BlockingPool {
        BlockingPool {
            inner: Arc::new(Inner {
                state: Mutex::new(State { queue: VecDeque::new(), threads: 0, idle: 0, shutdown: false }),
                work: Condvar::new(),
                exited: Condvar::new(),
                max_threads,
                keep_alive,
                setup: super::ThreadSetup::default(),
            }),
        }
    }

    /// The pool with its threads named and hooked per `setup` (before any thread started).
    pub(crate) fn with_threads(mut self, setup: super::ThreadSetup) -> BlockingPool {
        Arc::get_mut(&mut self.inner).expect("a new pool").setup = setup;
        self
    }

    /// Queues `job`; `Err(job)` once the pool has shut down, or if no thread exists and none
    /// can be started.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        let mut st = self.inner.state.lock();
        if st.shutdown {
            return Err(job);
        }
        st.queue.push_back(job);
        // Idle threads are fewer than queued jobs: start one (below the maximum).
        if st.idle >= st.queue.len() {
            self.inner.work.notify_one();
            return Ok(());
        }
        if st.threads < self.inner.max_threads {
            st.threads += 1;
            let inner = self.inner.clone();
            let spawned =
                std::thread::Builder::new().name(self.inner.setup.blocking_name()).spawn(move || worker(inner));
            if spawned.is_err() {
                st.threads -= 1;
                if st.threads == 0 {
                    return Err(st.queue.pop_back().expect("just queued"));
                }
                // Some thread exists: the job waits for it.
            }
        }
        Ok(())
    }

    /// Threads alive now (tests).
    pub(crate) fn threads(&self) -> usize {
        self.inner.state.lock().threads
    }

    /// Stops the pool (see the module doc); waits up to `timeout` for running jobs.
    pub(crate) fn shutdown(&self, timeout: Duration) {
        let dropped = {
            let mut st = self.inner.state.lock();
            st.shutdown = true;
            self.inner.work.notify_all();
            std::mem::take(&mut st.queue)
        };
        // Outside the lock: a job's captures may be anything.
        for job in dropped {
            crate::runtime::user_drop::drop_caught(job);
        }
        // None: a timeout too far to represent, that is, wait for as long as it takes.
        let deadline = Instant::now().checked_add(timeout);
        let mut st = self.inner.state.lock();
        while st.threads > 0 {
            match deadline {
                Some(d) => {
                    if self.inner.exited.wait_until(&mut st, d).timed_out() {
                        break;
                    }
                }
                None => self.inner.exited.wait(&mut st),
            }
        }
    }
}

fn worker(inner: Arc<Inner>) {
    inner.setup.started();
    serve(&inner);
    inner.setup.stopped();
    let mut st = inner.state.lock();
    st.threads -= 1;
    inner.exited.notify_all();
}

/// Runs jobs until shutdown or the keep-alive ends.
fn serve(inner: &Inner) {
    let mut st = inner.state.lock();
    loop {
        if let Some(job) = st.queue.pop_front() {
            drop(st);
            // The caller's wrapper reports panics; this only keeps the thread alive.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            st = inner.state.lock();
            continue;
        }
        if st.shutdown {
            break;
        }
        st.idle += 1;
        let timed_out = inner.work.wait_for(&mut st, inner.keep_alive).timed_out();
        st.idle -= 1;
        if timed_out && st.queue.is_empty() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn grows_to_the_maximum_then_queues_and_runs_everything() {
        let pool = BlockingPool::new(3, Duration::from_secs(10));
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate_rx));
        let (done_tx, done_rx) = mpsc::channel();
        for i in 0..6 {
            let (gate, done_tx) = (gate.clone(), done_tx.clone());
            pool.submit(Box::new(move || {
                gate.lock().recv().unwrap();
                done_tx.send(i).unwrap();
            }))
            .ok()
            .unwrap();
        }
        assert_eq!(pool.threads(), 3);
        for _ in 0..6 {
            gate_tx.send(()).unwrap();
        }
        let mut got: Vec<i32> = (0..6).map(|_| done_rx.recv().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 3, 4, 5]);
        pool.shutdown(Duration::from_secs(10));
        assert_eq!(pool.threads(), 0);
    }

    #[test]
    fn idle_threads_exit_after_the_keep_alive() {
        let pool = BlockingPool::new(4, Duration::from_millis(1));
        let (tx, rx) = mpsc::channel();
        pool.submit(Box::new(move || tx.send(()).unwrap())).ok().unwrap();
        rx.recv().unwrap();
        // Waits for the exit itself (no sleep): the thread signals `exited` when it goes.
        let mut st = pool.inner.state.lock();
        while st.threads > 0 {
            pool.inner.exited.wait(&mut st);
        }
    }

    #[test]
    fn a_panicking_job_leaves_the_thread_serving() {
        let pool = BlockingPool::new(1, Duration::from_secs(10));
        pool.submit(Box::new(|| panic!("job panics"))).ok().unwrap();
        let (tx, rx) = mpsc::channel();
        pool.submit(Box::new(move || tx.send(7).unwrap())).ok().unwrap();
        assert_eq!(rx.recv().unwrap(), 7);
        assert_eq!(pool.threads(), 1);
        pool.shutdown(Duration::from_secs(10));
        assert!(pool.submit(Box::new(|| ())).is_err(), "a shut-down pool takes no jobs");
    }
}
