//! The reactor: one `mio::Poll` (epoll, edge-triggered) per runtime, made on first use, and
//! the readiness protocol between a socket's registration, the actors parked on it, and the
//! scheduler threads that poll.
//!
//! # Registrations and tokens
//!
//! Each socket is registered once (`EPOLL_CTL_ADD` for read and write, edge-triggered) and
//! owns an [`Entry`] in a paged slab whose pages are never freed, so an entry can be read
//! without a lock. The token of a registration is `generation << 32 | index`. The entry's
//! state word holds the generation of its current registration; freeing an entry bumps the
//! generation, and an event whose token carries another generation changes nothing. So an
//! event for a closed fd (still in a batch another thread is dispatching) can never wake
//! whoever reuses that fd number, or that entry.
//!
//! # Readiness (the state word: `generation:32 | seq:28 | write closed | read closed | write | read`)
//!
//! - An event sets the direction's bit and bumps `seq` (one CAS, only if the generation
//!   matches), then takes the entry's waiter lock and wakes the waiters of that direction.
//! - An operation that returns `WouldBlock` clears the bit only if the word is still the one
//!   it read *before* the system call ([`Registration::clear`]): an event that arrived in
//!   between changed `seq`, so the bit stays and the operation is retried. Edge-triggered
//!   epoll reports an edge once; this is what keeps it from being lost.
//! - A waiter pushes itself under the waiter lock and re-reads the bit under it. An event
//!   sets the bit before it takes the lock, so either the waiter sees the bit or the event
//!   sees the waiter.
//! - A new registration starts with both bits set (optimistic): the first operation is simply
//!   tried.
//! - The closed bits (peer hung up, error) are sticky: never cleared, so a reader that cleared
//!   READ after draining the data before a FIN still sees the FIN's readiness.
//!
//! # Who polls (see `runtime::worker`)
//!
//! The `Poll` sits behind a mutex that is only ever `try_lock`ed, so exactly one thread polls
//! at a time. An idle scheduler thread that gets it blocks in `epoll_wait` until the earliest
//! timer deadline, instead of parking on its futex (its `PollFlag` tells wakers to use the
//! `mio::Waker`). A thread that runs out of queued work polls without blocking before it
//! steals, and a busy thread polls without blocking at least every [`BUSY_POLL_INTERVAL`]
//! (checked every few scheduling rounds) while actors wait on I/O, so a runtime whose
//! threads never idle still sees the network (tokio#4730, golang/go#51651).
//!
//! Layer 2: the reactor wakes [`Waiter`]s and `std::task::Waker`s; it knows nothing of
//! sockets (those are `net`, layer 3).

use crate::slot_state::WaitKind;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Waker;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use parking_lot::{Mutex, MutexGuard};

use crate::raw_mutex::{Rank, RawMutex};
use crate::runtime::{WaitLimit, Waiter};

/// The token of the reactor's `mio::Waker`: never a registration's (indices are < 2^32 and
/// generations < 2^32, so a registration's token never has all 64 bits set).
const WAKER_TOKEN: Token = Token(usize::MAX);

/// Events taken per `epoll_wait`.
const EVENTS_PER_POLL: usize = 1024;

/// A busy runtime polls at least this often (while any actor waits on I/O).
pub(crate) const BUSY_POLL_INTERVAL: Duration = Duration::from_millis(1);

const READ: u64 = 1;
const WRITE: u64 = 2;
/// Sticky: the peer closed its side (or an error): reads return at once from now on, so no
/// clearing of READ (a short read, an `EAGAIN`) can make a reader wait for an edge that
/// will never come.
const READ_CLOSED: u64 = 4;
/// Sticky, as `READ_CLOSED`, for writes.
const WRITE_CLOSED: u64 = 8;
const BITS: u64 = READ | WRITE | READ_CLOSED | WRITE_CLOSED;
const SEQ_ONE: u64 = 16;
const SEQ_MASK: u64 = ((1u64 << 32) - 1) & !BITS;

/// A direction of readiness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Read,
    Write,
}

impl Dir {
    /// The bit that operations clear.
    fn bit(self) -> u64 {
        match self {
            Dir::Read => READ,
            Dir::Write => WRITE,
        }
    }

    /// The bits that mean "an operation would not block".
    fn ready_mask(self) -> u64 {
        match self {
            Dir::Read => READ | READ_CLOSED,
            Dir::Write => WRITE | WRITE_CLOSED,
        }
    }
}

/// Who waits for a direction: an actor or thread that parks, or a `Future`'s task.
pub(crate) enum IoWaiter {
    Park(Waiter),
    #[cfg_attr(not(feature = "futures-io"), allow(dead_code))] // made by `poll_ready` only
    Task(Waker),
}

#[derive(Default)]
struct Waiters {
    read: Vec<IoWaiter>,
    write: Vec<IoWaiter>,
}

impl Waiters {
    fn len(&self) -> usize {
        self.read.len() + self.write.len()
    }

    fn of(&mut self, dir: Dir) -> &mut Vec<IoWaiter> {
        match dir {
            Dir::Read => &mut self.read,
            Dir::Write => &mut self.write,
        }
    }
}

/// One registration's readiness and waiters (see the module doc).
struct Entry {
    state: AtomicU64,
    waiters: RawMutex<Waiters>,
}

impl Entry {
    fn new() -> Entry {
        Entry { state: AtomicU64::new(0), waiters: RawMutex::new(Rank::Primitive, Waiters::default()) }
    }
}

/// Pages of entries: page `p` holds `64 << p`, allocated on first use and never freed.
const PAGES: usize = 26;
const FIRST_PAGE: u32 = 64;

fn locate(index: u32) -> (usize, usize) {
    let n = index / FIRST_PAGE + 1;
    let page = 31 - n.leading_zeros();
    let start = FIRST_PAGE * ((1u32 << page) - 1);
    (page as usize, (index - start) as usize)
}

struct Entries {
    pages: [OnceLock<Box<[Entry]>>; PAGES],
    /// Freed indices, and the next never-used one.
    free: Mutex<(Vec<u32>, u32)>,
}

impl Entries {
    fn new() -> Entries {
        Entries { pages: std::array::from_fn(|_| OnceLock::new()), free: Mutex::new((Vec::new(), 0)) }
    }

    fn get(&self, index: u32) -> Option<&Entry> {
        let (page, off) = locate(index);
        self.pages.get(page)?.get().map(|p| &p[off])
    }

    /// An entry for a new registration: `(index, generation)`.
    fn alloc(&self) -> io::Result<(u32, u32)> {
        let index = {
            let mut free = self.free.lock();
            match free.0.pop() {
                Some(i) => i,
                None => {
                    let i = free.1;
                    if locate(i).0 >= PAGES {
                        return Err(io::Error::other("smarm: too many sockets registered with the reactor"));
                    }
                    free.1 += 1;
                    i
                }
            }
        };
        let (page, off) = locate(index);
        let entries = self.pages[page].get_or_init(|| (0..FIRST_PAGE << page).map(|_| Entry::new()).collect());
        let entry = &entries[off];
        // Relaxed: the entry is ours alone until the socket is registered with epoll below us
        // (the caller), which is a syscall (a full barrier) made after this store.
        let gen = (entry.state.load(Ordering::Relaxed) >> 32) as u32;
        entry.state.store(((gen as u64) << 32) | READ | WRITE, Ordering::Relaxed);
        Ok((index, gen))
    }

    /// Ends registration `gen` of `index`: later events carrying it change nothing.
    fn free(&self, index: u32, gen: u32) {
        if let Some(entry) = self.get(index) {
            // Release: pairs with the Acquire of a dispatcher's CAS (nothing of ours is read
            // after this, but the next owner's fresh state must not be reordered before it).
            entry.state.store((gen.wrapping_add(1) as u64) << 32, Ordering::Release);
            let stale = std::mem::take(&mut *entry.waiters.lock());
            drop(stale);
            self.free.lock().0.push(index);
        }
    }
}

struct PollState {
    poll: Poll,
    events: Events,
}

/// One runtime's reactor (see the module doc).
pub(crate) struct Reactor {
    poll: Mutex<PollState>,
    registry: Registry,
    waker: mio::Waker,
    entries: Entries,
    /// Live registrations; the optional (non-blocking) polls are skipped while it is zero.
    /// Counted per registration rather than per park: a counter touched by every park would
    /// be a cache line bouncing between the threads on every request.
    registered: AtomicUsize,
    /// Nanoseconds since `epoch` of the last poll (the busy-poll interval).
    last_poll: AtomicU64,
    epoch: Instant,
    /// Polls that found at least one readiness event (diagnostics and tests).
    polls_with_events: AtomicU64,
}

impl Reactor {
    pub(crate) fn new() -> io::Result<Reactor> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = mio::Waker::new(&registry, WAKER_TOKEN)?;
        Ok(Reactor {
            poll: Mutex::new(PollState { poll, events: Events::with_capacity(EVENTS_PER_POLL) }),
            registry,
            waker,
            entries: Entries::new(),
            registered: AtomicUsize::new(0),
            last_poll: AtomicU64::new(0),
            epoch: Instant::now(),
            polls_with_events: AtomicU64::new(0),
        })
    }

    /// Registers `fd` for read and write readiness, edge-triggered. The caller keeps `fd`
    /// open until the registration is dropped (which deregisters it first).
    pub(crate) fn register(self: &Arc<Self>, fd: RawFd) -> io::Result<Registration> {
        let (index, gen) = self.entries.alloc()?;
        let token = Token(((gen as usize) << 32) | index as usize);
        if let Err(e) = self.registry.register(&mut SourceFd(&fd), token, Interest::READABLE | Interest::WRITABLE) {
            self.entries.free(index, gen);
            return Err(e);
        }
        // Relaxed: a hint (see `has_waiters`).
        self.registered.fetch_add(1, Ordering::Relaxed);
        Ok(Registration { reactor: self.clone(), fd, index, gen })
    }

    /// Makes a thread blocked in `epoll_wait` (or the next one to block there) return.
    pub(crate) fn wake(&self) {
        // A failing eventfd write (it cannot, short of a kernel bug) would leave the poller to
        // its timeout; nothing better can be done here.
        let _ = self.waker.wake();
    }

    /// True if some socket is registered, so an actor may be waiting for readiness (Go's
    /// `netpollAnyWaiters`, approximated per registration).
    #[inline]
    pub(crate) fn has_waiters(&self) -> bool {
        // Relaxed: a hint that gates optional polls; the blocking poll does not look at it.
        self.registered.load(Ordering::Relaxed) != 0
    }

    /// Parked waits on readiness now, counted entry by entry (diagnostics and tests).
    pub(crate) fn waiters(&self) -> usize {
        let used = self.entries.free.lock().1;
        (0..used).filter_map(|i| self.entries.get(i)).map(|e| e.waiters.lock().len()).sum()
    }

    /// True if no poll has happened for [`BUSY_POLL_INTERVAL`] while something waits.
    pub(crate) fn busy_poll_due(&self) -> bool {
        if !self.has_waiters() || self.poll.is_locked() {
            return false;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        // Relaxed: a timestamp hint; polling early or twice is harmless.
        now.saturating_sub(self.last_poll.load(Ordering::Relaxed)) >= BUSY_POLL_INTERVAL.as_nanos() as u64
    }

    /// Polls without blocking if no other thread is polling; wakes the waiters of what is
    /// ready. Returns how many waiters were woken (0 if another thread holds the poll).
    pub(crate) fn poll_now(&self) -> usize {
        match self.try_lock_poll() {
            Some(mut guard) => {
                self.wait(&mut guard, Some(Duration::ZERO));
                self.dispatch(&guard)
            }
            None => 0,
        }
    }

    /// The poll, if no other thread holds it.
    pub(crate) fn try_lock_poll(&self) -> Option<PollGuard<'_>> {
        self.poll.try_lock().map(PollGuard)
    }

    /// Blocks in `epoll_wait` until an event, a [`Reactor::wake`] or `timeout` (None:
    /// forever). The events stay in the guard for [`Reactor::dispatch`].
    #[track_caller]
    pub(crate) fn wait(&self, guard: &mut PollGuard<'_>, timeout: Option<Duration>) {
        let st = &mut *guard.0;
        if let Err(e) = st.poll.poll(&mut st.events, timeout) {
            // EINTR: a signal; the caller's loop comes back. Anything else cannot happen with
            // a valid epoll fd and buffer; leave the events empty.
            debug_assert_eq!(e.kind(), io::ErrorKind::Interrupted, "smarm: epoll_wait failed: {e}");
            st.events.clear();
        }
        // Relaxed: a timestamp hint (see `busy_poll_due`).
        self.last_poll.store(self.epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Delivers the events of the last [`Reactor::wait`]: sets readiness and wakes waiters.
    /// Returns how many waiters were woken.
    pub(crate) fn dispatch(&self, guard: &PollGuard<'_>) -> usize {
        let mut woken = 0;
        let mut any = false;
        for ev in guard.0.events.iter() {
            let token = ev.token();
            if token == WAKER_TOKEN {
                continue;
            }
            any = true;
            let mut bits = 0;
            if ev.is_readable() {
                bits |= READ;
            }
            if ev.is_writable() {
                bits |= WRITE;
            }
            if ev.is_read_closed() {
                bits |= READ | READ_CLOSED;
            }
            if ev.is_write_closed() {
                bits |= WRITE | WRITE_CLOSED;
            }
            if ev.is_error() {
                bits |= BITS;
            }
            woken += self.ready(token.0, bits);
        }
        if any {
            // Relaxed: a statistic.
            self.polls_with_events.fetch_add(1, Ordering::Relaxed);
        }
        woken
    }

    /// Readiness `bits` for `token`: set them (if the registration is still current) and
    /// wake the waiters of those directions.
    fn ready(&self, token: usize, bits: u64) -> usize {
        let (index, gen) = (token as u32, (token >> 32) as u32);
        let Some(entry) = self.entries.get(index) else { return 0 };
        // AcqRel: the Release publishes the readiness to the Acquire loads of operations and
        // waiters; the Acquire orders us after the registration's (or free's) store.
        let update = entry.state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
            ((s >> 32) as u32 == gen).then(|| (s & !SEQ_MASK) | ((s + SEQ_ONE) & SEQ_MASK) | bits)
        });
        if update.is_err() {
            return 0; // a stale event: the fd was deregistered (and maybe reused) since
        }
        let mut w = entry.waiters.lock();
        let mut n = 0;
        for dir in [Dir::Read, Dir::Write] {
            if bits & dir.ready_mask() != 0 {
                for waiter in w.of(dir).drain(..) {
                    n += 1;
                    match waiter {
                        // Under the waiter lock, which a parked actor takes to remove itself
                        // before it can end (the `Waiter` contract).
                        IoWaiter::Park(p) => p.wake(),
                        IoWaiter::Task(t) => t.wake(),
                    }
                }
            }
        }
        n
    }

    /// Polls that found readiness events so far.
    pub(crate) fn polls_with_events(&self) -> u64 {
        // Relaxed: a statistic.
        self.polls_with_events.load(Ordering::Relaxed)
    }
}

/// Exclusive use of the reactor's `Poll` (see [`Reactor::try_lock_poll`]).
pub(crate) struct PollGuard<'a>(MutexGuard<'a, PollState>);

/// A registered fd (see the module doc). Dropping it deregisters the fd; the owner closes
/// the fd afterwards.
pub(crate) struct Registration {
    reactor: Arc<Reactor>,
    fd: RawFd,
    index: u32,
    gen: u32,
}

/// A readiness snapshot, read before an operation (see [`Registration::clear`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Snapshot(u64);

impl Snapshot {
    /// True unless `dir` is known not ready.
    #[inline]
    pub(crate) fn ready(self, dir: Dir) -> bool {
        self.0 & dir.ready_mask() != 0
    }
}

impl Registration {
    fn entry(&self) -> &Entry {
        self.reactor.entries.get(self.index).expect("smarm: a live registration's entry")
    }

    /// The reactor this fd is registered with.
    pub(crate) fn reactor(&self) -> &Arc<Reactor> {
        &self.reactor
    }

    /// The readiness now (read before trying an operation).
    #[inline]
    pub(crate) fn snapshot(&self) -> Snapshot {
        // Acquire: pairs with the dispatcher's Release (the event happened before our retry).
        Snapshot(self.entry().state.load(Ordering::Acquire))
    }

    /// The operation tried after `snap` would block: forget `dir`'s readiness, unless an
    /// event came in the meantime (then the caller simply tries again).
    pub(crate) fn clear(&self, dir: Dir, snap: Snapshot) {
        if snap.0 & dir.bit() == 0 {
            return;
        }
        // Relaxed on both: the CAS only decides whether an event intervened (a changed word);
        // nothing is published by clearing a bit.
        let _ = self.entry().state.compare_exchange(snap.0, snap.0 & !dir.bit(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Parks the caller (actor or thread) until `dir` is ready, within `limit`. Returns
    /// `TimedOut` once the limit has passed with `dir` still not ready.
    #[track_caller]
    pub(crate) fn wait(&self, dir: Dir, limit: &mut WaitLimit) -> io::Result<()> {
        let entry = self.entry();
        let me = Waiter::current();
        loop {
            {
                let mut w = entry.waiters.lock();
                // Acquire: as in `snapshot`. Read under the lock (see the module doc).
                if entry.state.load(Ordering::Acquire) & dir.ready_mask() != 0 {
                    return Ok(());
                }
                w.of(dir).push(IoWaiter::Park(me.clone()));
            }
            /// Removes the waiter when the park ends, also when the actor is stopped while
            /// parked (it unwinds from the park): nothing is left to wake a gone actor.
            struct Withdraw<'a> {
                entry: &'a Entry,
                dir: Dir,
                me: &'a Waiter,
            }
            impl Drop for Withdraw<'_> {
                fn drop(&mut self) {
                    let mut w = self.entry.waiters.lock();
                    let list = w.of(self.dir);
                    // Usually already taken by the event that woke us.
                    if !list.is_empty() {
                        list.retain(|w| !matches!(w, IoWaiter::Park(p) if p.same_as(self.me)));
                    }
                }
            }
            let withdraw = Withdraw { entry, dir, me: &me };
            let timed_out = limit.park(WaitKind::Socket);
            drop(withdraw);
            // Acquire: as in `snapshot`.
            if entry.state.load(Ordering::Acquire) & dir.ready_mask() != 0 {
                return Ok(());
            }
            if timed_out {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "smarm: socket operation timed out"));
            }
        }
    }

    #[cfg(feature = "futures-io")]
    /// For `Future`s: true if `dir` is ready; otherwise registers `waker` to be woken when it
    /// is, and returns false (re-checked under the lock: no lost wake).
    pub(crate) fn poll_ready(&self, dir: Dir, waker: &Waker) -> bool {
        let entry = self.entry();
        let mut w = entry.waiters.lock();
        // Acquire: as in `snapshot`.
        if entry.state.load(Ordering::Acquire) & dir.ready_mask() != 0 {
            return true;
        }
        let list = w.of(dir);
        if !list.iter().any(|x| matches!(x, IoWaiter::Task(t) if t.will_wake(waker))) {
            list.push(IoWaiter::Task(waker.clone()));
        }
        false
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Deregistered before the owner closes the fd: a dup of it (`try_clone`) would
        // otherwise keep the registration alive in epoll after this fd number is reused.
        let _ = self.reactor.registry.deregister(&mut SourceFd(&self.fd));
        self.reactor.entries.free(self.index, self.gen);
        // Relaxed: a hint (see `has_waiters`).
        self.reactor.registered.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts of a reactor's registrations (tests).
#[cfg(test)]
impl Reactor {
    fn entry_state(&self, index: u32) -> u64 {
        // Relaxed: a test reads after the fact.
        self.entries.get(index).map_or(0, |e| e.state.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_indices_without_gaps() {
        let mut expected = (0usize, 0usize);
        for i in 0..100_000u32 {
            let (p, off) = locate(i);
            if (p, off) != expected {
                assert_eq!((p, off), (expected.0 + 1, 0), "index {i}");
            }
            assert!(off < (FIRST_PAGE as usize) << p);
            expected = (p, off + 1);
        }
    }

    #[test]
    fn a_stale_token_changes_nothing() {
        let r = Arc::new(Reactor::new().unwrap());
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        use std::os::fd::AsRawFd;
        let reg = r.register(a.as_raw_fd()).unwrap();
        let (index, gen) = (reg.index, reg.gen);
        let snap = reg.snapshot();
        reg.clear(Dir::Read, snap);
        assert!(!reg.snapshot().ready(Dir::Read));
        drop(reg);
        // The same entry, registered again: a new generation.
        let reg2 = r.register(a.as_raw_fd()).unwrap();
        assert_eq!(reg2.index, index);
        assert_eq!(reg2.gen, gen + 1);
        let snap = reg2.snapshot();
        reg2.clear(Dir::Read, snap);
        let before = r.entry_state(index);
        // An event of the old registration: ignored.
        assert_eq!(r.ready(((gen as usize) << 32) | index as usize, READ), 0);
        assert_eq!(r.entry_state(index), before);
        assert!(!reg2.snapshot().ready(Dir::Read));
        // One of the current registration: sets the bit.
        r.ready(((reg2.gen as usize) << 32) | index as usize, READ);
        assert!(reg2.snapshot().ready(Dir::Read));
    }

    #[test]
    fn clear_keeps_readiness_that_arrived_after_the_snapshot() {
        let r = Arc::new(Reactor::new().unwrap());
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        use std::os::fd::AsRawFd;
        let reg = r.register(a.as_raw_fd()).unwrap();
        let snap = reg.snapshot();
        assert!(snap.ready(Dir::Read));
        // An event between the snapshot and the WouldBlock.
        r.ready(((reg.gen as usize) << 32) | reg.index as usize, READ);
        reg.clear(Dir::Read, snap);
        assert!(reg.snapshot().ready(Dir::Read), "the event after the snapshot was lost");
        let snap = reg.snapshot();
        reg.clear(Dir::Read, snap);
        assert!(!reg.snapshot().ready(Dir::Read));
        assert!(reg.snapshot().ready(Dir::Write), "clearing one direction left the other");
    }

    #[test]
    fn closed_readiness_survives_clearing() {
        let r = Arc::new(Reactor::new().unwrap());
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        use std::os::fd::AsRawFd;
        let reg = r.register(a.as_raw_fd()).unwrap();
        let token = ((reg.gen as usize) << 32) | reg.index as usize;
        let snap = reg.snapshot();
        reg.clear(Dir::Read, snap);
        // Data and the peer's FIN in one edge; then a short read clears READ.
        r.ready(token, READ | READ_CLOSED);
        let snap = reg.snapshot();
        reg.clear(Dir::Read, snap);
        assert!(reg.snapshot().ready(Dir::Read), "a reader would wait for an edge that never comes");
        assert!(!reg.snapshot().ready(Dir::Write) || reg.snapshot().0 & WRITE != 0);
    }
}
