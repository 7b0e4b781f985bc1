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
/// ```
/// use std::io::{Read, Write};
/// smarm::run(|| {
///     let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
///     let addr = listener.local_addr().unwrap();
///     smarm::spawn(move || {
///         let mut c = smarm::net::TcpStream::connect(addr).unwrap();
///         c.write_all(b"one connection").unwrap();
///     });
///     for stream in listener.incoming().take(1) {
///         let mut stream = stream.unwrap();
///         let echo = smarm::spawn(move || {
///             let mut got = Vec::new();
///             let mut buf = [0u8; 1024];
///             while let Ok(n @ 1..) = stream.read(&mut buf) {
///                 got.extend_from_slice(&buf[..n]);
///             }
///             got
///         });
///         assert_eq!(echo.join().unwrap(), b"one connection");
///     }
/// });
/// ```
pub struct TcpListener {
    core: Core<mio::net::TcpListener>,
}

/// The accept queue's length requested by [`TcpListener::bind`] (tokio's default too).
const LISTEN_BACKLOG: libc::c_int = 1024;

impl TcpListener {
    /// Binds to `addr` (the first of its addresses that binds), with `SO_REUSEADDR` and a
    /// backlog of 1,024.
    ///
    /// ```
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// assert!(listener.local_addr().unwrap().port() != 0);
    /// ```
    pub fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<TcpListener> {
        let l = each_addr(addr, mio::net::TcpListener::bind)?;
        // mio listens with std's backlog, 128 (mio 1.1 and later): a burst of connections
        // over it overflows the accept queue, and each dropped handshake costs its client a
        // one-second retransmission. Listening again on a listening socket only updates its
        // backlog (Linux caps it at `net.core.somaxconn`).
        // SAFETY: `l` owns a valid listening socket.
        if unsafe { libc::listen(l.as_raw_fd(), LISTEN_BACKLOG) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TcpListener { core: Core::new(l) })
    }

    /// Accepts a connection, parking the actor (or blocking the thread) until one arrives.
    /// The stream is in the state `TcpStream::connect` returns (no timeouts set).
    ///
    /// ```
    /// use std::io::Write;
    /// smarm::run(|| {
    ///     let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let addr = listener.local_addr().unwrap();
    ///     smarm::spawn(move || smarm::net::TcpStream::connect(addr).unwrap().write_all(b"hi").unwrap());
    ///     let (_stream, peer) = listener.accept().unwrap(); // parks this actor until the client connects
    ///     assert!(peer.ip().is_loopback());
    /// });
    /// ```
    #[track_caller]
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        self.core.io(Dir::Read, |l| l.accept()).map(|(s, addr)| {
            // SAFETY: the fd was just accepted by mio and is owned by nothing else.
            let std = unsafe { std::net::TcpStream::from_raw_fd(s.into_raw_fd()) };
            (TcpStream { core: Core::new(std) }, addr)
        })
    }

    /// An endless iterator of accepted connections (`accept` in a loop).
    ///
    /// ```
    /// use std::io::Read;
    /// smarm::run(|| {
    ///     let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let addr = listener.local_addr().unwrap();
    ///     for _ in 0..2 {
    ///         smarm::spawn(move || drop(smarm::net::TcpStream::connect(addr).unwrap()));
    ///     }
    ///     for stream in listener.incoming().take(2) {
    ///         let mut buf = Vec::new();
    ///         stream.unwrap().read_to_end(&mut buf).unwrap(); // the client closed: EOF
    ///         assert!(buf.is_empty());
    ///     }
    /// });
    /// ```
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The local address.
    ///
    /// ```
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// assert_eq!(listener.local_addr().unwrap().ip(), std::net::Ipv4Addr::LOCALHOST);
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().local_addr()
    }

    /// Takes the socket's pending error (`SO_ERROR`).
    ///
    /// ```
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// assert!(listener.take_error().unwrap().is_none());
    /// ```
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.core.get().take_error()
    }

    /// Wraps a std listener (switched to non-blocking mode).
    ///
    /// ```
    /// let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let addr = std_listener.local_addr().unwrap();
    /// let listener = smarm::net::TcpListener::from_std(std_listener).unwrap();
    /// assert_eq!(listener.local_addr().unwrap(), addr);
    /// ```
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        let l = nonblocking(listener, std::net::TcpListener::set_nonblocking)?;
        Ok(TcpListener { core: Core::new(mio::net::TcpListener::from_std(l)) })
    }

    /// The std listener, deregistered and back in blocking mode.
    ///
    /// ```
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let addr = listener.local_addr().unwrap();
    /// let std_listener = listener.into_std().unwrap();
    /// assert_eq!(std_listener.local_addr().unwrap(), addr);
    /// ```
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
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// smarm::run(|| {
    ///     let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let addr = listener.local_addr().unwrap();
    ///     let echo = smarm::spawn(move || {
    ///         let (mut s, _) = listener.accept().unwrap();
    ///         let mut buf = [0u8; 4];
    ///         s.read_exact(&mut buf).unwrap();
    ///         s.write_all(&buf).unwrap();
    ///     });
    ///     let mut client = smarm::net::TcpStream::connect(addr).unwrap();
    ///     client.write_all(b"ping").unwrap();
    ///     let mut buf = [0u8; 4];
    ///     client.read_exact(&mut buf).unwrap();
    ///     assert_eq!(&buf, b"ping");
    ///     echo.join().unwrap();
    /// });
    /// ```
    #[track_caller]
    pub fn connect<A: ToSocketAddrs>(addr: A) -> io::Result<TcpStream> {
        each_addr(addr, |a| TcpStream::connect_within(a, WaitLimit::Forever))
    }

    /// Connects to `addr`, failing with `TimedOut` if the connection is not established
    /// within `timeout` (a zero timeout is `InvalidInput`, as in std).
    ///
    /// ```
    /// use std::time::Duration;
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let addr = listener.local_addr().unwrap();
    /// let s = smarm::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    /// assert_eq!(s.peer_addr().unwrap(), addr);
    /// assert!(smarm::net::TcpStream::connect_timeout(&addr, Duration::ZERO).is_err()); // InvalidInput
    /// ```
    #[track_caller]
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        check_timeout(timeout)?;
        TcpStream::connect_within(*addr, WaitLimit::from_timeout(Some(timeout)))
    }

    #[track_caller]
    fn connect_within(addr: SocketAddr, limit: WaitLimit) -> io::Result<TcpStream> {
        let s = mio::net::TcpStream::connect(addr)?;
        // SAFETY: the fd was just made by mio and is owned by nothing else.
        let std = unsafe { std::net::TcpStream::from_raw_fd(s.into_raw_fd()) };
        let stream = TcpStream { core: Core::new(std) };
        finish_connect(&stream.core, limit, std::net::TcpStream::take_error, std::net::TcpStream::peer_addr)?;
        Ok(stream)
    }

    /// The remote address.
    ///
    /// ```
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// assert_eq!(client.peer_addr().unwrap(), server.local_addr().unwrap());
    /// ```
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().peer_addr()
    }

    /// The local address.
    ///
    /// ```
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// assert_eq!(server.peer_addr().unwrap(), client.local_addr().unwrap());
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().local_addr()
    }

    /// Shuts down the read, write or both halves. After `Shutdown::Write` the peer reads
    /// end-of-file and this side can still read.
    ///
    /// ```
    /// use std::io::Read;
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// client.shutdown(std::net::Shutdown::Write).unwrap();
    /// let mut buf = Vec::new();
    /// (&server).read_to_end(&mut buf).unwrap(); // EOF: the client will write no more
    /// assert!(buf.is_empty());
    /// ```
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.core.get().shutdown(how)
    }

    /// Sets `TCP_NODELAY`.
    ///
    /// ```
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// client.set_nodelay(true).unwrap();
    /// assert!(client.nodelay().unwrap());
    /// # let _ = server;
    /// ```
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.core.get().set_nodelay(nodelay)
    }

    /// Reads `TCP_NODELAY`.
    ///
    /// ```
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// server.set_nodelay(false).unwrap();
    /// assert!(!server.nodelay().unwrap());
    /// # let _ = client;
    /// ```
    pub fn nodelay(&self) -> io::Result<bool> {
        self.core.get().nodelay()
    }

    /// Bounds each read (None: no bound; `Some(0)` is `InvalidInput`). A read that runs out
    /// of time fails with `TimedOut`.
    ///
    /// ```
    /// use std::io::Read;
    /// use std::time::Duration;
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// server.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    /// let err = (&server).read(&mut [0u8; 1]).unwrap_err(); // nothing sent
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// # let _ = client;
    /// ```
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Read, timeout)
    }

    /// Bounds each write, as [`TcpStream::set_read_timeout`] bounds reads.
    ///
    /// ```
    /// use std::time::Duration;
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// client.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    /// assert_eq!(client.write_timeout().unwrap(), Some(Duration::from_secs(1)));
    /// # let _ = server;
    /// ```
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Write, timeout)
    }

    /// The read timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// assert_eq!(client.read_timeout().unwrap(), None);
    /// client.set_read_timeout(Some(Duration::from_millis(250))).unwrap();
    /// assert_eq!(client.read_timeout().unwrap(), Some(Duration::from_millis(250)));
    /// # let _ = server;
    /// ```
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.core.timeout(Dir::Read))
    }

    /// The write timeout.
    ///
    /// ```
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// assert_eq!(server.write_timeout().unwrap(), None);
    /// # let _ = client;
    /// ```
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.core.timeout(Dir::Write))
    }

    /// Reads without removing the data from the queue.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// (&client).write_all(b"abc").unwrap();
    /// let mut buf = [0u8; 3];
    /// assert_eq!(server.peek(&mut buf).unwrap(), 3); // still queued
    /// (&server).read_exact(&mut buf).unwrap();
    /// assert_eq!(&buf, b"abc");
    /// ```
    #[track_caller]
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.core.io(Dir::Read, |s| s.peek(buf))
    }

    /// Takes the socket's pending error (`SO_ERROR`).
    ///
    /// ```
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// assert!(client.take_error().unwrap().is_none());
    /// # let _ = server;
    /// ```
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.core.get().take_error()
    }

    /// A second handle to the same connection (a `dup` of the fd), with this handle's
    /// timeouts: one actor can read while another writes.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// smarm::run(|| {
    ///     let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    ///     let (server, _) = listener.accept().unwrap();
    ///     // One actor writes while this one reads, on two handles of one connection.
    ///     let mut writer = client.try_clone().unwrap();
    ///     smarm::spawn(move || writer.write_all(b"from the clone").unwrap());
    ///     let mut buf = [0u8; 14];
    ///     (&server).read_exact(&mut buf).unwrap();
    ///     assert_eq!(&buf, b"from the clone");
    /// });
    /// ```
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        Ok(TcpStream { core: Core::new(self.core.get().try_clone()?).with_timeouts_of(&self.core) })
    }

    /// Wraps a connected std stream (switched to non-blocking mode).
    ///
    /// ```
    /// let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let std_stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let stream = smarm::net::TcpStream::from_std(std_stream).unwrap();
    /// assert_eq!(stream.peer_addr().unwrap(), listener.local_addr().unwrap());
    /// ```
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        Ok(TcpStream { core: Core::new(nonblocking(stream, std::net::TcpStream::set_nonblocking)?) })
    }

    /// The std stream, deregistered and back in blocking mode (without timeouts: smarm's
    /// are not socket options).
    ///
    /// ```
    /// let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let client = smarm::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let (server, _) = listener.accept().unwrap();
    /// let std_stream = client.into_std().unwrap();
    /// assert_eq!(std_stream.peer_addr().unwrap(), server.local_addr().unwrap());
    /// ```
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
