//! Unix-domain stream sockets: [`UnixListener`] and [`UnixStream`], shaped like
//! `std::os::unix::net` and blocking as the rest of `net` (see its module doc).

use std::fmt;
use std::io;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::os::unix::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::{finish_connect, nonblocking, Core};
use crate::io::Dir;
use crate::runtime::WaitLimit;

/// A Unix-domain server socket.
pub struct UnixListener {
    core: Core<std::os::unix::net::UnixListener>,
}

impl UnixListener {
    /// Binds to the socket file `path` (which must not exist).
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixListener> {
        let l = std::os::unix::net::UnixListener::bind(path)?;
        Ok(UnixListener { core: Core::new(nonblocking(l, std::os::unix::net::UnixListener::set_nonblocking)?) })
    }

    /// Accepts a connection, parking the actor (or blocking the thread) until one arrives.
    pub fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let (s, addr) = self.core.io(Dir::Read, |l| l.accept())?;
        Ok((UnixStream::from_std(s)?, addr))
    }

    /// An endless iterator of accepted connections.
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<UnixStream>> + '_ {
        std::iter::repeat_with(move || self.accept().map(|(s, _)| s))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().local_addr()
    }

    /// Wraps a std listener (switched to non-blocking mode).
    pub fn from_std(listener: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
        Ok(UnixListener { core: Core::new(nonblocking(listener, std::os::unix::net::UnixListener::set_nonblocking)?) })
    }

    /// The std listener, deregistered and back in blocking mode.
    pub fn into_std(self) -> io::Result<std::os::unix::net::UnixListener> {
        let l = self.core.into_inner();
        l.set_nonblocking(false)?;
        Ok(l)
    }
}

impl fmt::Debug for UnixListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnixListener").field("fd", &self.as_raw_fd()).finish()
    }
}

fd_impls!(UnixListener);

/// A Unix-domain stream connection; `Read`/`Write` also for `&UnixStream`.
pub struct UnixStream {
    core: Core<std::os::unix::net::UnixStream>,
}

impl UnixStream {
    /// Connects to the socket file `path`, parking the actor while the listener's backlog
    /// is full.
    pub fn connect<P: AsRef<Path>>(path: P) -> io::Result<UnixStream> {
        let s = mio::net::UnixStream::connect(path)?;
        // SAFETY: the fd was just made by mio and is owned by nothing else.
        let std = unsafe { std::os::unix::net::UnixStream::from_raw_fd(s.into_raw_fd()) };
        let stream = UnixStream { core: Core::new(std) };
        finish_connect(
            &stream.core,
            WaitLimit::Forever,
            std::os::unix::net::UnixStream::take_error,
            std::os::unix::net::UnixStream::peer_addr,
        )?;
        Ok(stream)
    }

    /// A connected pair.
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = std::os::unix::net::UnixStream::pair()?;
        Ok((UnixStream::from_std(a)?, UnixStream::from_std(b)?))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().peer_addr()
    }

    /// Shuts down the read, write or both halves.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.core.get().shutdown(how)
    }

    /// Bounds each read (a read that runs out of time fails with `TimedOut`).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Read, timeout)
    }

    /// Bounds each write.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Write, timeout)
    }

    /// Takes the socket's pending error (`SO_ERROR`).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.core.get().take_error()
    }

    /// A second handle to the same connection, with this handle's timeouts.
    pub fn try_clone(&self) -> io::Result<UnixStream> {
        Ok(UnixStream { core: Core::new(self.core.get().try_clone()?).with_timeouts_of(&self.core) })
    }

    /// Wraps a std stream (switched to non-blocking mode).
    pub fn from_std(stream: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        Ok(UnixStream { core: Core::new(nonblocking(stream, std::os::unix::net::UnixStream::set_nonblocking)?) })
    }

    /// The std stream, deregistered and back in blocking mode.
    pub fn into_std(self) -> io::Result<std::os::unix::net::UnixStream> {
        let s = self.core.into_inner();
        s.set_nonblocking(false)?;
        Ok(s)
    }
}

impl fmt::Debug for UnixStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnixStream").field("fd", &self.as_raw_fd()).finish()
    }
}

stream_impls!(UnixStream);
