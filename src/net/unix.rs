//! Unix-domain stream sockets: [`UnixListener`] and [`UnixStream`], shaped like
//! `std::os::unix::net` and blocking as the rest of `net` (see its module doc).
//!
//! ```
//! use std::io::{BufRead, BufReader, Write};
//! smarm::run(|| {
//!     let path = std::env::temp_dir().join(format!("smarm-doc-unix-{}.sock", std::process::id()));
//!     let _ = std::fs::remove_file(&path);
//!     let listener = smarm::net::unix::UnixListener::bind(&path).unwrap();
//!     let server = smarm::spawn(move || {
//!         let (stream, _) = listener.accept().unwrap();
//!         let mut line = String::new();
//!         BufReader::new(stream).read_line(&mut line).unwrap();
//!         line
//!     });
//!     let mut client = smarm::net::unix::UnixStream::connect(&path).unwrap();
//!     client.write_all(b"hello over a socket file\n").unwrap();
//!     assert_eq!(server.join().unwrap(), "hello over a socket file\n");
//!     std::fs::remove_file(&path).unwrap();
//! });
//! ```

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
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("smarm-doc-{}-{}.sock", std::process::id(), line!()));
    /// let _ = std::fs::remove_file(&path);
    /// let listener = smarm::net::unix::UnixListener::bind(&path).unwrap();
    /// assert_eq!(listener.local_addr().unwrap().as_pathname(), Some(path.as_path()));
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixListener> {
        let l = std::os::unix::net::UnixListener::bind(path)?;
        Ok(UnixListener { core: Core::new(nonblocking(l, std::os::unix::net::UnixListener::set_nonblocking)?) })
    }

    /// Accepts a connection, parking the actor (or blocking the thread) until one arrives.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let path = std::env::temp_dir().join(format!("smarm-doc-{}-{}.sock", std::process::id(), line!()));
    /// let _ = std::fs::remove_file(&path);
    /// let listener = smarm::net::unix::UnixListener::bind(&path).unwrap();
    /// let mut client = smarm::net::unix::UnixStream::connect(&path).unwrap();
    /// let (mut server, _) = listener.accept().unwrap();
    /// client.write_all(b"ok").unwrap();
    /// let mut buf = [0u8; 2];
    /// server.read_exact(&mut buf).unwrap();
    /// assert_eq!(&buf, b"ok");
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    #[track_caller]
    pub fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let (s, addr) = self.core.io(Dir::Read, |l| l.accept())?;
        Ok((UnixStream::from_std(s)?, addr))
    }

    /// An endless iterator of accepted connections.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("smarm-doc-{}-{}.sock", std::process::id(), line!()));
    /// let _ = std::fs::remove_file(&path);
    /// let listener = smarm::net::unix::UnixListener::bind(&path).unwrap();
    /// let _client = smarm::net::unix::UnixStream::connect(&path).unwrap();
    /// let server = listener.incoming().next().unwrap().unwrap();
    /// assert!(server.peer_addr().is_ok());
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<UnixStream>> + '_ {
        std::iter::repeat_with(move || self.accept().map(|(s, _)| s))
    }

    /// The local address.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("smarm-doc-{}-{}.sock", std::process::id(), line!()));
    /// let _ = std::fs::remove_file(&path);
    /// let listener = smarm::net::unix::UnixListener::bind(&path).unwrap();
    /// assert_eq!(listener.local_addr().unwrap().as_pathname(), Some(path.as_path()));
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().local_addr()
    }

    /// Wraps a std listener (switched to non-blocking mode).
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("smarm-doc-{}-{}.sock", std::process::id(), line!()));
    /// let _ = std::fs::remove_file(&path);
    /// let std_listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    /// let listener = smarm::net::unix::UnixListener::from_std(std_listener).unwrap();
    /// assert!(listener.local_addr().is_ok());
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn from_std(listener: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
        Ok(UnixListener { core: Core::new(nonblocking(listener, std::os::unix::net::UnixListener::set_nonblocking)?) })
    }

    /// The std listener, deregistered and back in blocking mode.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("smarm-doc-{}-{}.sock", std::process::id(), line!()));
    /// let _ = std::fs::remove_file(&path);
    /// let listener = smarm::net::unix::UnixListener::bind(&path).unwrap();
    /// let std_listener = listener.into_std().unwrap();
    /// assert!(std_listener.local_addr().is_ok());
    /// std::fs::remove_file(&path).unwrap();
    /// ```
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
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("smarm-doc-{}-{}.sock", std::process::id(), line!()));
    /// let _ = std::fs::remove_file(&path);
    /// let listener = smarm::net::unix::UnixListener::bind(&path).unwrap();
    /// let client = smarm::net::unix::UnixStream::connect(&path).unwrap();
    /// assert_eq!(client.peer_addr().unwrap().as_pathname(), Some(path.as_path()));
    /// # drop(listener);
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    #[track_caller]
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
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// smarm::run(|| {
    ///     let (mut a, mut b) = smarm::net::unix::UnixStream::pair().unwrap();
    ///     smarm::spawn(move || a.write_all(b"across").unwrap());
    ///     let mut buf = [0u8; 6];
    ///     b.read_exact(&mut buf).unwrap(); // parks until the other actor wrote
    ///     assert_eq!(&buf, b"across");
    /// });
    /// ```
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = std::os::unix::net::UnixStream::pair()?;
        Ok((UnixStream::from_std(a)?, UnixStream::from_std(b)?))
    }

    /// The local address.
    ///
    /// ```
    /// let (a, b) = smarm::net::unix::UnixStream::pair().unwrap();
    /// assert!(a.local_addr().unwrap().is_unnamed());
    /// # let _ = b;
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().local_addr()
    }

    /// The peer's address.
    ///
    /// ```
    /// let (a, b) = smarm::net::unix::UnixStream::pair().unwrap();
    /// assert!(b.peer_addr().unwrap().is_unnamed());
    /// # let _ = a;
    /// ```
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.core.get().peer_addr()
    }

    /// Shuts down the read, write or both halves.
    ///
    /// ```
    /// use std::io::Read;
    /// let (a, b) = smarm::net::unix::UnixStream::pair().unwrap();
    /// a.shutdown(std::net::Shutdown::Write).unwrap();
    /// let mut buf = Vec::new();
    /// (&b).read_to_end(&mut buf).unwrap();
    /// assert!(buf.is_empty());
    /// ```
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.core.get().shutdown(how)
    }

    /// Bounds each read (a read that runs out of time fails with `TimedOut`).
    ///
    /// ```
    /// use std::io::Read;
    /// use std::time::Duration;
    /// let (a, b) = smarm::net::unix::UnixStream::pair().unwrap();
    /// b.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    /// assert_eq!((&b).read(&mut [0u8; 1]).unwrap_err().kind(), std::io::ErrorKind::TimedOut);
    /// # let _ = a;
    /// ```
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Read, timeout)
    }

    /// Bounds each write.
    ///
    /// ```
    /// use std::time::Duration;
    /// let (a, b) = smarm::net::unix::UnixStream::pair().unwrap();
    /// a.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    /// # let _ = b;
    /// ```
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.core.set_timeout(Dir::Write, timeout)
    }

    /// Takes the socket's pending error (`SO_ERROR`).
    ///
    /// ```
    /// let (a, b) = smarm::net::unix::UnixStream::pair().unwrap();
    /// assert!(a.take_error().unwrap().is_none());
    /// # let _ = b;
    /// ```
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.core.get().take_error()
    }

    /// A second handle to the same connection, with this handle's timeouts.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let (a, b) = smarm::net::unix::UnixStream::pair().unwrap();
    /// let mut a2 = a.try_clone().unwrap();
    /// a2.write_all(b"z").unwrap();
    /// let mut buf = [0u8; 1];
    /// (&b).read_exact(&mut buf).unwrap();
    /// assert_eq!(&buf, b"z");
    /// ```
    pub fn try_clone(&self) -> io::Result<UnixStream> {
        Ok(UnixStream { core: Core::new(self.core.get().try_clone()?).with_timeouts_of(&self.core) })
    }

    /// Wraps a std stream (switched to non-blocking mode).
    ///
    /// ```
    /// let (x, _y) = std::os::unix::net::UnixStream::pair().unwrap();
    /// let s = smarm::net::unix::UnixStream::from_std(x).unwrap();
    /// assert!(s.peer_addr().is_ok());
    /// ```
    pub fn from_std(stream: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        Ok(UnixStream { core: Core::new(nonblocking(stream, std::os::unix::net::UnixStream::set_nonblocking)?) })
    }

    /// The std stream, deregistered and back in blocking mode.
    ///
    /// ```
    /// let (a, b) = smarm::net::unix::UnixStream::pair().unwrap();
    /// let std_stream = a.into_std().unwrap();
    /// assert!(std_stream.peer_addr().is_ok());
    /// # let _ = b;
    /// ```
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
