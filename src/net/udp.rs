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
    pub fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<UdpSocket> {
        let s = std::net::UdpSocket::bind(addr)?;
        Ok(UdpSocket { core: Core::new(nonblocking(s, std::net::UdpSocket::set_nonblocking)?) })
    }

    /// Sets the default peer for `send` and `recv` and filters datagrams from others.
    pub fn connect<A: ToSocketAddrs>(&self, addr: A) -> io::Result<()> {
        self.core.get().connect(addr)
    }

    /// Sends a datagram to the connected peer.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.core.io(Dir::Write, |s| s.send(buf))
    }

    /// Receives a datagram from the connected peer.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.core.io(Dir::Read, |s| s.recv(buf))
    }

    /// Sends a datagram to `addr` (its first address).
    pub fn send_to<A: ToSocketAddrs>(&self, buf: &[u8], addr: A) -> io::Result<usize> {
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no addresses to send data to"))?;
        self.core.io(Dir::Write, |s| s.send_to(buf, addr))
    }

    /// Receives a datagram and its sender's address.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.core.io(Dir::Read, |s| s.recv_from(buf))
    }

    /// Receives a datagram without removing it from the queue.
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.core.io(Dir::Read, |s| s.peek_from(buf))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().local_addr()
    }

    /// The connected peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().peer_addr()
    }

    /// Bounds each receive (see [`TcpStream::set_read_timeout`](crate::net::TcpStream::set_read_timeout)).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Read, timeout)
    }

    /// Bounds each send.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Write, timeout)
    }

    /// Sets `SO_BROADCAST`.
    pub fn set_broadcast(&self, on: bool) -> io::Result<()> {
        self.core.get().set_broadcast(on)
    }

    /// Takes the socket's pending error (`SO_ERROR`).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.core.get().take_error()
    }

    /// A second handle to the same socket, with this handle's timeouts.
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        Ok(UdpSocket { core: Core::new(self.core.get().try_clone()?).with_timeouts_of(&self.core) })
    }

    /// Wraps a std socket (switched to non-blocking mode).
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        Ok(UdpSocket { core: Core::new(nonblocking(socket, std::net::UdpSocket::set_nonblocking)?) })
    }

    /// The std socket, deregistered and back in blocking mode.
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
