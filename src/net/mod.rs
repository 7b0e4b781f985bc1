//! Sockets that park actors: [`TcpListener`], [`TcpStream`], [`UdpSocket`] and, in
//! [`unix`], Unix-domain streams. Std-shaped: the same names, signatures and `Read`/`Write`
//! impls as `std::net`.
//!
//! # Blocking
//!
//! Every socket is in non-blocking mode underneath. An operation that would block:
//! - in an actor, parks the actor (not its scheduler thread) until the runtime's reactor
//!   reports the socket ready (see the reactor's doc in `io`);
//! - on a plain thread (outside any runtime, or a runtime's non-actor thread), blocks the
//!   thread in `poll(2)` on the socket.
//!
//! So the same types work in both, and a socket can move between an actor and a thread.
//! A socket is registered with the reactor of the first runtime whose actor has to wait on
//! it; waiting on it from an actor of another runtime is an error (`Other`).
//!
//! # Timeouts
//!
//! `set_read_timeout`/`set_write_timeout` bound each blocking operation as in std, for
//! actors and threads alike; an operation that runs out of time fails with
//! [`io::ErrorKind::TimedOut`] (std on Unix reports `WouldBlock`; `TimedOut` says what
//! happened). They belong to the handle, not the socket: a [`TcpStream::try_clone`] starts
//! with the timeouts of the original and is set on its own afterwards. Timeouts in an
//! actor never fire early and may fire late by a few scheduling rounds (the lazy timeouts
//! of `runtime::lazy`).
//!
//! # Errors
//!
//! A reset peer or a write to a closed connection is an `io::Error` (`ConnectionReset`,
//! `BrokenPipe`): writes use `MSG_NOSIGNAL` semantics (Rust ignores SIGPIPE), never a signal.
//!
//! # Fairness
//!
//! An operation that succeeds does not park, so an actor reading a socket that always has
//! data would never yield; each operation counts toward the actor's timeslice
//! ([`crate::maybe_preempt`]), as every runtime call does.
//!
//! # Example
//!
//! An echo server and its client, each an actor; every read, write and accept parks only
//! the actor that makes it.
//!
//! ```
//! use std::io::{Read, Write};
//! use smarm::net::{TcpListener, TcpStream};
//!
//! smarm::run(|| {
//!     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
//!     let addr = listener.local_addr().unwrap();
//!     smarm::spawn(move || {
//!         for stream in listener.incoming() {
//!             let mut stream = stream.unwrap();
//!             smarm::spawn(move || {
//!                 let mut buf = [0u8; 64];
//!                 while let Ok(n @ 1..) = stream.read(&mut buf) {
//!                     stream.write_all(&buf[..n]).unwrap();
//!                 }
//!             });
//!         }
//!     });
//!     let mut client = TcpStream::connect(addr).unwrap();
//!     client.write_all(b"echo me").unwrap();
//!     let mut buf = [0u8; 7];
//!     client.read_exact(&mut buf).unwrap();
//!     assert_eq!(&buf, b"echo me");
//! });
//! ```

/// `AsRawFd` and `AsFd` for a socket type with a `core` field.
macro_rules! fd_impls {
    ($t:ty) => {
        impl std::os::fd::AsRawFd for $t {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                self.core.as_raw_fd()
            }
        }

        impl std::os::fd::AsFd for $t {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                // SAFETY: the fd is open for as long as `self` is borrowed.
                unsafe { std::os::fd::BorrowedFd::borrow_raw(self.core.as_raw_fd()) }
            }
        }
    };
}

/// What a byte stream with a `core` field implements: `Read`/`Write` for `&T` and `T`, the
/// fd traits, and (feature `futures-io`) `AsyncRead`/`AsyncWrite` on the runtime's reactor
/// (polled from an actor, for example inside [`crate::block_on`]; no other runtime needed).
macro_rules! stream_impls {
    ($t:ty) => {
        impl std::io::Read for &$t {
            #[track_caller]
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.core.io_bytes($crate::io::Dir::Read, buf.len(), |mut s| std::io::Read::read(&mut s, buf))
            }
            #[track_caller]
            fn read_vectored(&mut self, bufs: &mut [std::io::IoSliceMut<'_>]) -> std::io::Result<usize> {
                let want = bufs.iter().map(|b| b.len()).sum();
                self.core.io_bytes($crate::io::Dir::Read, want, |mut s| std::io::Read::read_vectored(&mut s, bufs))
            }
        }

        impl std::io::Write for &$t {
            #[track_caller]
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.core.io_bytes($crate::io::Dir::Write, buf.len(), |mut s| std::io::Write::write(&mut s, buf))
            }
            #[track_caller]
            fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
                let want = bufs.iter().map(|b| b.len()).sum();
                self.core.io_bytes($crate::io::Dir::Write, want, |mut s| std::io::Write::write_vectored(&mut s, bufs))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        impl std::io::Read for $t {
            #[track_caller]
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                std::io::Read::read(&mut &*self, buf)
            }
            #[track_caller]
            fn read_vectored(&mut self, bufs: &mut [std::io::IoSliceMut<'_>]) -> std::io::Result<usize> {
                std::io::Read::read_vectored(&mut &*self, bufs)
            }
        }

        impl std::io::Write for $t {
            #[track_caller]
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                std::io::Write::write(&mut &*self, buf)
            }
            #[track_caller]
            fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
                std::io::Write::write_vectored(&mut &*self, bufs)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        fd_impls!($t);

        #[cfg(feature = "futures-io")]
        impl futures_io::AsyncRead for $t {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut [u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                self.core.poll_io($crate::io::Dir::Read, cx, |mut s| std::io::Read::read(&mut s, buf))
            }
        }

        #[cfg(feature = "futures-io")]
        impl futures_io::AsyncWrite for $t {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                self.core.poll_io($crate::io::Dir::Write, cx, |mut s| std::io::Write::write(&mut s, buf))
            }
            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                self.core.poll_io($crate::io::Dir::Write, cx, |mut s| std::io::Write::write_vectored(&mut s, bufs))
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                _cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::task::Poll::Ready(Ok(()))
            }
            fn poll_close(
                self: std::pin::Pin<&mut Self>,
                _cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::task::Poll::Ready(self.shutdown(std::net::Shutdown::Write))
            }
        }
    };
}

mod tcp;
mod udp;
pub mod unix;

pub use tcp::{Incoming, TcpListener, TcpStream};
pub use udp::UdpSocket;

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::io::{Dir, Registration};
use crate::runtime::{current_shared, WaitLimit};

/// A socket and its lazily made registration. Field order matters: the registration is
/// dropped (deregistered) before the socket (closed).
pub(crate) struct Core<S: AsRawFd> {
    reg: OnceLock<Registration>,
    reg_init: Mutex<()>,
    sock: S,
    /// Nanoseconds, 0 for none.
    read_timeout: AtomicU64,
    write_timeout: AtomicU64,
}

impl<S: AsRawFd> Core<S> {
    /// Wraps a socket already in non-blocking mode.
    pub(crate) fn new(sock: S) -> Core<S> {
        Core {
            reg: OnceLock::new(),
            reg_init: Mutex::new(()),
            sock,
            read_timeout: AtomicU64::new(0),
            write_timeout: AtomicU64::new(0),
        }
    }

    pub(crate) fn get(&self) -> &S {
        &self.sock
    }

    /// The socket, deregistered, for `into_std`.
    pub(crate) fn into_inner(self) -> S {
        drop(self.reg);
        self.sock
    }

    fn timeout_cell(&self, dir: Dir) -> &AtomicU64 {
        match dir {
            Dir::Read => &self.read_timeout,
            Dir::Write => &self.write_timeout,
        }
    }

    pub(crate) fn timeout(&self, dir: Dir) -> Option<Duration> {
        // Relaxed: a setting read at the start of each operation.
        match self.timeout_cell(dir).load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        }
    }

    /// As std's `set_read_timeout`: `Some(0)` is `InvalidInput`.
    pub(crate) fn set_timeout(&self, dir: Dir, t: Option<Duration>) -> io::Result<()> {
        let n = match t {
            None => 0,
            Some(d) if d.is_zero() => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot set a 0 duration timeout"))
            }
            Some(d) => u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
        };
        // Relaxed: as in `timeout`.
        self.timeout_cell(dir).store(n, Ordering::Relaxed);
        Ok(())
    }

    /// Copies the timeouts of `other` (for `try_clone`).
    pub(crate) fn with_timeouts_of<T: AsRawFd>(self, other: &Core<T>) -> Core<S> {
        // Relaxed: as in `timeout`.
        self.read_timeout.store(other.read_timeout.load(Ordering::Relaxed), Ordering::Relaxed);
        self.write_timeout.store(other.write_timeout.load(Ordering::Relaxed), Ordering::Relaxed);
        self
    }

    /// Runs `op` until it does not return `WouldBlock`, waiting for `dir` readiness in
    /// between, within the handle's timeout for `dir`.
    #[track_caller]
    pub(crate) fn io<R>(&self, dir: Dir, op: impl FnMut(&S) -> io::Result<R>) -> io::Result<R> {
        self.io_within(dir, WaitLimit::from_timeout(self.timeout(dir)), op, |_| false)
    }

    /// [`Core::io`] for a byte-stream read or write of `want` bytes. A transfer shorter than
    /// asked means the socket's buffer was drained (read) or filled (write), so the next one
    /// would block: the readiness bit is cleared now (against the snapshot taken before the
    /// call, so an edge that arrived meanwhile keeps it), and that next call parks at once
    /// instead of paying a system call for `EAGAIN` (tokio does the same).
    #[track_caller]
    pub(crate) fn io_bytes(&self, dir: Dir, want: usize, op: impl FnMut(&S) -> io::Result<usize>) -> io::Result<usize> {
        self.io_within(dir, WaitLimit::from_timeout(self.timeout(dir)), op, |&n| n > 0 && n < want)
    }

    /// [`Core::io`] with an explicit limit; `exhausted(result)` says whether a successful
    /// result shows the socket is no longer ready for `dir` (see [`Core::io_bytes`]).
    #[track_caller]
    pub(crate) fn io_within<R>(
        &self,
        dir: Dir,
        mut limit: WaitLimit,
        mut op: impl FnMut(&S) -> io::Result<R>,
        exhausted: impl Fn(&R) -> bool,
    ) -> io::Result<R> {
        let mut thread_deadline: Option<Option<Instant>> = None;
        loop {
            let snap = self.reg.get().map(|r| r.snapshot());
            // Known not ready (an actor's registration): park without the system call. A
            // plain thread ignores the bits (only the reactor's events maintain them).
            let known_blocked = matches!(snap, Some(s) if !s.ready(dir)) && current_shared().is_some();
            if !known_blocked {
                match op(&self.sock) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => {
                        if let (Ok(v), Some(snap), Some(reg)) = (&r, snap, self.reg.get()) {
                            if exhausted(v) {
                                reg.clear(dir, snap);
                            }
                        }
                        crate::preempt::maybe_preempt();
                        return r;
                    }
                }
            }
            if current_shared().is_none() {
                let deadline = *thread_deadline.get_or_insert_with(|| limit.deadline());
                poll_fd(self.sock.as_raw_fd(), dir, deadline)?;
                continue;
            }
            let Some(reg) = self.registration()? else {
                // Just registered: readiness starts set, so the operation is tried again.
                continue;
            };
            match snap {
                Some(snap) => reg.clear(dir, snap),
                // Registered by another handle of this socket since our snapshot.
                None => continue,
            }
            reg.wait(dir, &mut limit)?;
        }
    }

    /// The registration with the calling actor's runtime: `Ok(None)` if it was made just now.
    fn registration(&self) -> io::Result<Option<&Registration>> {
        let (sh, _) = current_shared().expect("called from an actor");
        // SAFETY: the runtime outlives its running actor (the caller).
        let reactor = unsafe { &*sh }.reactor()?;
        let reg = match self.reg.get() {
            Some(r) => r,
            None => {
                // One registration per socket: two actors sharing a handle must not both
                // register (the loser's drop would deregister the fd).
                let _init = self.reg_init.lock();
                if self.reg.get().is_none() {
                    let reg = reactor.register(self.sock.as_raw_fd())?;
                    let _ = self.reg.set(reg);
                    return Ok(None);
                }
                self.reg.get().expect("set under the lock")
            }
        };
        if !std::sync::Arc::ptr_eq(reg.reactor(), reactor) {
            return Err(io::Error::other("smarm: socket is registered with another runtime's reactor"));
        }
        Ok(Some(reg))
    }

    /// For `Future`s (feature `futures-io`): `op` once; on `WouldBlock` register `cx`'s
    /// waker for `dir` and return Pending (or try again if readiness came meanwhile).
    #[cfg(feature = "futures-io")]
    pub(crate) fn poll_io<R>(
        &self,
        dir: Dir,
        cx: &mut std::task::Context<'_>,
        mut op: impl FnMut(&S) -> io::Result<R>,
    ) -> std::task::Poll<io::Result<R>> {
        use std::task::Poll;
        loop {
            let snap = self.reg.get().map(|r| r.snapshot());
            match op(&self.sock) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return Poll::Ready(r),
            }
            if current_shared().is_none() {
                return Poll::Ready(Err(io::Error::other(
                    "smarm: an async smarm socket must be polled from an actor (use smarm::block_on in one)",
                )));
            }
            let reg = match self.registration() {
                Err(e) => return Poll::Ready(Err(e)),
                Ok(None) => continue,
                Ok(Some(reg)) => reg,
            };
            match snap {
                Some(snap) => reg.clear(dir, snap),
                None => continue,
            }
            if !reg.poll_ready(dir, cx.waker()) {
                return Poll::Pending;
            }
        }
    }
}

impl<S: AsRawFd> AsRawFd for Core<S> {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// Blocks the calling thread until `fd` is ready for `dir` or `deadline` passes.
fn poll_fd(fd: RawFd, dir: Dir, deadline: Option<Instant>) -> io::Result<()> {
    let events = match dir {
        Dir::Read => libc::POLLIN,
        Dir::Write => libc::POLLOUT,
    };
    let mut pfd = libc::pollfd { fd, events, revents: 0 };
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "smarm: socket operation timed out"));
                }
                // Rounded up: never wake before the deadline.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        // SAFETY: `pfd` is a valid pollfd for the duration of the call; nfds is 1.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Ok(());
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Puts a std socket in non-blocking mode (what every smarm socket is underneath).
fn nonblocking<S>(sock: S, set: impl FnOnce(&S, bool) -> io::Result<()>) -> io::Result<S> {
    set(&sock, true)?;
    Ok(sock)
}

/// Waits for a non-blocking `connect` on `core` to finish, within `limit`: writable, then
/// `SO_ERROR` (`take_error`) says how it failed, or a peer address (`peer`) that it succeeded;
/// `NotConnected` from `peer` means still in progress.
#[track_caller]
fn finish_connect<S: AsRawFd, A>(
    core: &Core<S>,
    limit: WaitLimit,
    take_error: impl Fn(&S) -> io::Result<Option<io::Error>>,
    peer: impl Fn(&S) -> io::Result<A>,
) -> io::Result<()> {
    core.io_within(
        Dir::Write,
        limit,
        |s| {
            if let Some(e) = take_error(s)? {
                return Err(e);
            }
            match peer(s) {
                Ok(_) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => Err(io::ErrorKind::WouldBlock.into()),
                Err(e) => Err(e),
            }
        },
        |_| false,
    )
}

/// `connect_timeout`'s argument check, as std's: a zero timeout is `InvalidInput`.
fn check_timeout(timeout: Duration) -> io::Result<()> {
    if timeout.is_zero() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot set a 0 duration timeout"));
    }
    Ok(())
}

/// Tries `f` on each address in turn; the first success, or the last error.
fn each_addr<A: std::net::ToSocketAddrs, T>(
    addr: A,
    mut f: impl FnMut(std::net::SocketAddr) -> io::Result<T>,
) -> io::Result<T> {
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match f(a) {
            Ok(v) => return Ok(v),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "could not resolve to any addresses")))
}
