//! Synchronisation that parks actors, not threads: [`Mutex`], [`Barrier`], [`WaitGroup`]
//! (with its [`Participant`] handles).
//! All of them also work from plain OS threads (which they block). The internal
//! `RawMutex` used by the runtime itself is `crate::raw_mutex` (layer 1).

mod barrier;
mod mutex;
mod wait_group;

pub use barrier::{Barrier, BarrierWaitResult};
pub use mutex::{Mutex, MutexGuard};
pub use wait_group::{Participant, WaitGroup};
