//! TCP: [`TcpListener`] and [`TcpStream`] (see the module doc of `net` for how they block).

use std::fmt;
use std::io;
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::time::Duration;

use super::{check_timeout, each_addr, finish_connect, nonblocking, Core};
use crate::io::Dir;
use crate::runtime::WaitLimit;

/// A TCP server socket. `accept` parks the calling actor until a connection arrives.
///
/// ```no_run
/// use std::io::{Read, Write};
/// smarm::run(|| {
///     let listener = smarm::net::TcpListener::bind("127.0.0.1:7000").unwrap();
///     for stream in listener.incoming() {
///         let mut stream = stream.unwrap();
///         smarm::spawn(move || {
///             let mut buf = [0u8; 1024];
///             while let Ok(n @ 1..) = stream.read(&mut buf) {
///                 if stream.write_all(&buf[..n]).is_err() {
///                     break;
///                 }
///             }
///         });
///     }
/// });
/// ```
pub struct TcpListener {
    core: Core<mio::net::TcpListener>,
}

impl TcpListener {
    /// Binds to `addr` (the first of its addresses that binds), with `SO_REUSEADDR` and a
    /// backlog of 1,024.
    pub fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<TcpListener> {
        each_addr(addr, mio::net::TcpListener::bind).map(|l| TcpListener { core: Core::new(l) })
    }

    /// Accepts a connection, parking the actor (or blocking the thread) until one arrives.
    /// The stream is in the state `TcpStream::connect` returns (no timeouts set).
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        self.core.io(Dir::Read, |l| l.accept()).map(|(s, addr)| {
            // SAFETY: the fd was just accepted by mio and is owned by nothing else.
            let std = unsafe { std::net::TcpStream::from_raw_fd(s.into_raw_fd()) };
            (TcpStream { core: Core::new(std) }, addr)
        })
    }

    /// An endless iterator of accepted connections (`accept` in a loop).
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().local_addr()
    }

    /// Takes the socket's pending error (`SO_ERROR`).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.core.get().take_error()
    }

    /// Wraps a std listener (switched to non-blocking mode).
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        let l = nonblocking(listener, std::net::TcpListener::set_nonblocking)?;
        Ok(TcpListener { core: Core::new(mio::net::TcpListener::from_std(l)) })
    }

    /// The std listener, deregistered and back in blocking mode.
    pub fn into_std(self) -> io::Result<std::net::TcpListener> {
        // SAFETY: the fd is owned by the mio listener we take apart here.
        let l = unsafe { std::net::TcpListener::from_raw_fd(self.core.into_inner().into_raw_fd()) };
        l.set_nonblocking(false)?;
        Ok(l)
    }
}

impl fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpListener").field("fd", &self.as_raw_fd()).field("addr", &self.local_addr().ok()).finish()
    }
}

fd_impls!(TcpListener);

/// Iterator of [`TcpListener::accept`] results; never ends.
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a TcpListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;
    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

/// A TCP connection. Reads and writes park the calling actor until the socket is ready.
/// `Read` and `Write` are implemented for `&TcpStream` too, and [`TcpStream::try_clone`]
/// gives a second handle, so one actor can read while another writes.
pub struct TcpStream {
    core: Core<std::net::TcpStream>,
}

impl TcpStream {
    /// Connects to `addr` (each of its addresses in turn), parking the actor until the
    /// connection is established or fails. Name resolution (`getaddrinfo`), if `addr` needs
    /// it, blocks the calling thread: pass a `SocketAddr`, or resolve with
    /// [`spawn_blocking`](crate::spawn_blocking).
    pub fn connect<A: ToSocketAddrs>(addr: A) -> io::Result<TcpStream> {
        each_addr(addr, |a| TcpStream::connect_within(a, WaitLimit::Forever))
    }

    /// Connects to `addr`, failing with `TimedOut` if the connection is not established
    /// within `timeout` (a zero timeout is `InvalidInput`, as in std).
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        check_timeout(timeout)?;
        TcpStream::connect_within(*addr, WaitLimit::from_timeout(Some(timeout)))
    }

    fn connect_within(addr: SocketAddr, limit: WaitLimit) -> io::Result<TcpStream> {
        let s = mio::net::TcpStream::connect(addr)?;
        // SAFETY: the fd was just made by mio and is owned by nothing else.
        let std = unsafe { std::net::TcpStream::from_raw_fd(s.into_raw_fd()) };
        let stream = TcpStream { core: Core::new(std) };
        finish_connect(&stream.core, limit, std::net::TcpStream::take_error, std::net::TcpStream::peer_addr)?;
        Ok(stream)
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().local_addr()
    }

    /// Shuts down the read, write or both halves. After `Shutdown::Write` the peer reads
    /// end-of-file and this side can still read.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.core.get().shutdown(how)
    }

    /// Sets `TCP_NODELAY`.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.core.get().set_nodelay(nodelay)
    }

    /// Reads `TCP_NODELAY`.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.core.get().nodelay()
    }

    /// Bounds each read (None: no bound; `Some(0)` is `InvalidInput`). A read that runs out
    /// of time fails with `TimedOut`.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Read, timeout)
    }

    /// Bounds each write, as [`TcpStream::set_read_timeout`] bounds reads.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Write, timeout)
    }

    /// The read timeout.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.core.timeout(Dir::Read))
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.core.timeout(Dir::Write))
    }

    /// Reads without removing the data from the queue.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.core.io(Dir::Read, |s| s.peek(buf))
    }

    /// Takes the socket's pending error (`SO_ERROR`).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.core.get().take_error()
    }

    /// A second handle to the same connection (a `dup` of the fd), with this handle's
    /// timeouts: one actor can read while another writes.
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        Ok(TcpStream { core: Core::new(self.core.get().try_clone()?).with_timeouts_of(&self.core) })
    }

    /// Wraps a connected std stream (switched to non-blocking mode).
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        Ok(TcpStream { core: Core::new(nonblocking(stream, std::net::TcpStream::set_nonblocking)?) })
    }

    /// The std stream, deregistered and back in blocking mode (without timeouts: smarm's
    /// are not socket options).
    pub fn into_std(self) -> io::Result<std::net::TcpStream> {
        let s = self.core.into_inner();
        s.set_nonblocking(false)?;
        Ok(s)
    }
}

impl fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStream")
            .field("fd", &self.as_raw_fd())
            .field("local", &self.local_addr().ok())
            .field("peer", &self.peer_addr().ok())
            .finish()
    }
}

stream_impls!(TcpStream);
