//! UDP: [`UdpSocket`] (see the module doc of `net` for how it blocks).

use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::{nonblocking, Core};
use crate::io::Dir;

/// A UDP socket. `recv` and `recv_from` park the calling actor until a datagram arrives;
/// `send` and `send_to` until the socket's buffer has room.
pub struct UdpSocket {
    core: Core<std::net::UdpSocket>,
}

impl UdpSocket {
    /// Binds to `addr` (the first of its addresses that binds).
    ///
    /// ```
    /// let socket = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// assert!(socket.local_addr().unwrap().port() != 0);
    /// ```
    pub fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<UdpSocket> {
        let s = std::net::UdpSocket::bind(addr)?;
        Ok(UdpSocket { core: Core::new(nonblocking(s, std::net::UdpSocket::set_nonblocking)?) })
    }

    /// Sets the default peer for `send` and `recv` and filters datagrams from others.
    ///
    /// ```
    /// let a = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let b = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// a.connect(b.local_addr().unwrap()).unwrap();
    /// assert_eq!(a.peer_addr().unwrap(), b.local_addr().unwrap());
    /// ```
    #[track_caller]
    pub fn connect<A: ToSocketAddrs>(&self, addr: A) -> io::Result<()> {
        self.core.get().connect(addr)
    }

    /// Sends a datagram to the connected peer.
    ///
    /// ```
    /// let a = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let b = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// a.connect(b.local_addr().unwrap()).unwrap();
    /// assert_eq!(a.send(b"hello").unwrap(), 5);
    /// let mut buf = [0u8; 16];
    /// assert_eq!(b.recv(&mut buf).unwrap(), 5);
    /// ```
    #[track_caller]
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.core.io(Dir::Write, |s| s.send(buf))
    }

    /// Receives a datagram from the connected peer.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let a = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    ///     let b = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    ///     let to = b.local_addr().unwrap();
    ///     smarm::spawn(move || a.send_to(b"late", to).unwrap());
    ///     let mut buf = [0u8; 16];
    ///     let n = b.recv(&mut buf).unwrap(); // parks until the datagram arrives
    ///     assert_eq!(&buf[..n], b"late");
    /// });
    /// ```
    #[track_caller]
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.core.io(Dir::Read, |s| s.recv(buf))
    }

    /// Sends a datagram to `addr` (its first address).
    ///
    /// ```
    /// let a = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let b = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// a.send_to(b"to b", b.local_addr().unwrap()).unwrap();
    /// let mut buf = [0u8; 16];
    /// let (n, from) = b.recv_from(&mut buf).unwrap();
    /// assert_eq!((&buf[..n], from), (&b"to b"[..], a.local_addr().unwrap()));
    /// ```
    #[track_caller]
    pub fn send_to<A: ToSocketAddrs>(&self, buf: &[u8], addr: A) -> io::Result<usize> {
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no addresses to send data to"))?;
        self.core.io(Dir::Write, |s| s.send_to(buf, addr))
    }

    /// Receives a datagram and its sender's address.
    ///
    /// ```
    /// let a = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let b = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// b.send_to(b"reply", a.local_addr().unwrap()).unwrap();
    /// let mut buf = [0u8; 16];
    /// let (n, from) = a.recv_from(&mut buf).unwrap();
    /// assert_eq!(n, 5);
    /// assert_eq!(from, b.local_addr().unwrap());
    /// ```
    #[track_caller]
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.core.io(Dir::Read, |s| s.recv_from(buf))
    }

    /// Receives a datagram without removing it from the queue.
    ///
    /// ```
    /// let a = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let b = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// a.send_to(b"peek", b.local_addr().unwrap()).unwrap();
    /// let mut buf = [0u8; 16];
    /// let (n, _) = b.peek_from(&mut buf).unwrap();
    /// assert_eq!(b.recv(&mut buf).unwrap(), n); // peeking left it queued
    /// ```
    #[track_caller]
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.core.io(Dir::Read, |s| s.peek_from(buf))
    }

    /// The local address.
    ///
    /// ```
    /// let s = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// assert!(s.local_addr().unwrap().ip().is_loopback());
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().local_addr()
    }

    /// The connected peer's address.
    ///
    /// ```
    /// let a = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let b = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// assert!(a.peer_addr().is_err()); // not connected
    /// a.connect(b.local_addr().unwrap()).unwrap();
    /// assert_eq!(a.peer_addr().unwrap(), b.local_addr().unwrap());
    /// ```
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().peer_addr()
    }

    /// Bounds each receive (see [`TcpStream::set_read_timeout`](crate::net::TcpStream::set_read_timeout)).
    ///
    /// ```
    /// use std::time::Duration;
    /// let s = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    /// let err = s.recv(&mut [0u8; 8]).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// ```
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Read, timeout)
    }

    /// Bounds each send.
    ///
    /// ```
    /// use std::time::Duration;
    /// let s = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    /// ```
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Write, timeout)
    }

    /// Sets `SO_BROADCAST`.
    ///
    /// ```
    /// let s = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// s.set_broadcast(true).unwrap();
    /// ```
    pub fn set_broadcast(&self, on: bool) -> io::Result<()> {
        self.core.get().set_broadcast(on)
    }

    /// Takes the socket's pending error (`SO_ERROR`).
    ///
    /// ```
    /// let s = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// assert!(s.take_error().unwrap().is_none());
    /// ```
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.core.get().take_error()
    }

    /// A second handle to the same socket, with this handle's timeouts.
    ///
    /// ```
    /// let a = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let b = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let a2 = a.try_clone().unwrap();
    /// a2.send_to(b"x", b.local_addr().unwrap()).unwrap();
    /// assert_eq!(a2.local_addr().unwrap(), a.local_addr().unwrap());
    /// assert_eq!(b.recv(&mut [0u8; 1]).unwrap(), 1);
    /// ```
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        Ok(UdpSocket { core: Core::new(self.core.get().try_clone()?).with_timeouts_of(&self.core) })
    }

    /// Wraps a std socket (switched to non-blocking mode).
    ///
    /// ```
    /// let std_socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let addr = std_socket.local_addr().unwrap();
    /// let s = smarm::net::UdpSocket::from_std(std_socket).unwrap();
    /// assert_eq!(s.local_addr().unwrap(), addr);
    /// ```
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        Ok(UdpSocket { core: Core::new(nonblocking(socket, std::net::UdpSocket::set_nonblocking)?) })
    }

    /// The std socket, deregistered and back in blocking mode.
    ///
    /// ```
    /// let s = smarm::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let addr = s.local_addr().unwrap();
    /// assert_eq!(s.into_std().unwrap().local_addr().unwrap(), addr);
    /// ```
    pub fn into_std(self) -> io::Result<std::net::UdpSocket> {
        let s = self.core.into_inner();
        s.set_nonblocking(false)?;
        Ok(s)
    }
}

impl fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpSocket").field("fd", &self.as_raw_fd()).field("addr", &self.local_addr().ok()).finish()
    }
}

fd_impls!(UdpSocket);
