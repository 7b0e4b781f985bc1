//! Synchronisation that parks actors, not threads: [`Mutex`], [`Barrier`], [`WaitGroup`].
//! All of them also work from plain OS threads (which they block). The internal
//! `RawMutex` used by the runtime itself lives in `raw_mutex`.

mod barrier;
mod mutex;
pub(crate) mod raw_mutex;
mod wait_group;

pub use barrier::{Barrier, BarrierWaitResult};
pub use mutex::{Mutex, MutexGuard};
pub use wait_group::WaitGroup;
