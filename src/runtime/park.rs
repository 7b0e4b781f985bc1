//! How an idle scheduler thread blocks, behind one small type. One idle thread may wait in
//! the reactor's `epoll_wait` instead (woken by its eventfd `mio::Waker`), without changing
//! the idle protocol around it (`idle`): its `in_poll` flag says which (see `PollFlag`).
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
    /// Set while the thread idles in the reactor instead of on its token (see `PollFlag`).
    pub(crate) in_poll: super::idle::PollFlag,
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
