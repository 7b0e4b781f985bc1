//! Running a root actor: [`Runtime::run`] and [`run`]. Layer 4: the root is wrapped so that,
//! when it ends, the supervision trees it started are stopped in reverse start order (each
//! per its shutdown specs) before the runtime's shutdown sweep stops whatever remains; the
//! scheduler is started with the process layer's hooks.

use crate::error::RunError;
use crate::exit::DownReason;
use crate::runtime::{defer_stops, Runtime};

impl Runtime {
    /// Runs `root` as the root actor on the calling thread plus `threads - 1` more.
    ///
    /// Each new thread starts with its CPU affinity narrowed to the caller's allowed CPUs
    /// minus the one the caller runs on, and widens it back to the caller's mask as its
    /// first act, before `on_thread_start` runs: Linux may otherwise queue it on the caller's
    /// CPU behind the root (see `runtime/placement.rs`). A mask set in `on_thread_start`
    /// is kept.
    ///
    /// When the root returns, the supervision trees it started are stopped, the remaining
    /// actors are shut down ([`DownReason::Shutdown`] at their next runtime call), their
    /// stacks freed and the threads joined; then `run` returns the root's value, or
    /// [`RunError::Root`] if the root panicked.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().threads(2).build().unwrap();
    /// assert_eq!(rt.run(|| smarm::spawn(|| 20).join().unwrap() + 22).unwrap(), 42);
    /// ```
    pub fn run<F, T>(self, root: F) -> Result<T, RunError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // Graceful shutdown (root return, root panic, or `smarm::shutdown`): stop the root
        // supervisors in reverse start order, each stopping its tree per the shutdown specs,
        // before the root exits and the sweep stops whatever remains.
        let root = move || {
            struct StopTrees;
            impl Drop for StopTrees {
                fn drop(&mut self) {
                    // A further shutdown request (or exit signal) must not cut the stop of
                    // the trees short; a kill still does.
                    defer_stops();
                    crate::supervisor::stop_root_supervisors();
                }
            }
            let _trees = StopTrees;
            root()
        };
        self.run_hooked(&crate::process::HOOKS, root)
    }
}

/// Runs `root` on a runtime with the default configuration and returns its value.
///
/// # Panics
/// If the root actor panics (with its message), or if the runtime cannot start.
///
/// ```
/// assert_eq!(smarm::run(|| "hello"), "hello");
/// ```
pub fn run<F, T>(root: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let rt = Runtime::builder().build().unwrap_or_else(|e| panic!("{e}"));
    match rt.run(root) {
        Ok(v) => v,
        Err(RunError::Root(DownReason::Panic(msg))) => panic!("smarm: the root actor panicked: {msg}"),
        Err(e) => panic!("{e}"),
    }
}
