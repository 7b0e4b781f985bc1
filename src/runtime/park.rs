//! How an idle scheduler thread blocks, behind one small type so that the I/O milestone can
//! make one idle thread wait in `epoll_wait` (woken by an eventfd) instead, without
//! changing the idle protocol around it (`idle`).
//!
//! It blocks on the thread's own park token (`std::thread::park`, a futex on Linux). A wake
//! that arrives before the park leaves the token set, so the park returns at once: no lost
//! unpark between "announce sleep" and "park".

use std::sync::OnceLock;
use std::thread::Thread;
use std::time::Duration;

#[derive(Default)]
pub(crate) struct Parker {
    thread: OnceLock<Thread>,
}

impl Parker {
    /// Binds the parker to the calling thread (once, before the thread can announce sleep).
    pub(crate) fn register(&self) {
        let _ = self.thread.set(std::thread::current());
    }

    /// Blocks the calling (registered) thread until unparked or `timeout` elapses. May
    /// return spuriously.
    pub(crate) fn park(&self, timeout: Option<Duration>) {
        match timeout {
            Some(d) => std::thread::park_timeout(d),
            None => std::thread::park(),
        }
    }

    /// Wakes the registered thread (or makes its next `park` return at once).
    pub(crate) fn unpark(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }
}
