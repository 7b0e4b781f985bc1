//! Synchronisation that parks actors, not threads: [`Mutex`], [`Barrier`], [`WaitGroup`]
//! (with its [`Participant`] handles).
//! All of them also work from plain OS threads (which they block). The internal
//! `RawMutex` used by the runtime itself is `crate::raw_mutex` (layer 1).
//!
//! ```
//! use std::sync::Arc;
//! use smarm::sync::{Barrier, Mutex, WaitGroup};
//! smarm::run(|| {
//!     let log = Arc::new(Mutex::new(Vec::new()));
//!     let start = Arc::new(Barrier::new(3));
//!     let wg = WaitGroup::new();
//!     for i in 0..3 {
//!         let (log, start, p) = (log.clone(), start.clone(), wg.participant());
//!         smarm::spawn(move || {
//!             start.wait(); // all three start together
//!             log.lock().push(i);
//!             drop(p); // done (also if it had panicked)
//!         });
//!     }
//!     wg.wait();
//!     let mut got = log.lock().clone();
//!     got.sort();
//!     assert_eq!(got, [0, 1, 2]);
//! });
//! ```

mod barrier;
mod mutex;
mod wait_group;

pub use barrier::{Barrier, BarrierWaitResult};
pub use mutex::{Mutex, MutexGuard};
pub use wait_group::{Participant, WaitGroup};
