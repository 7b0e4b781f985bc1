//! File descriptors and memory under churn and kills. These tests count the process's open
//! fds (`/proc/self/fd`), so they run one at a time (`SERIAL`) in their own test binary.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Mutex;

use smarm::net::{TcpListener, TcpStream};
use smarm::{DownReason, Runtime};

static SERIAL: Mutex<()> = Mutex::new(());

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn rss_kib() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn fd_is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD only queries the descriptor table.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}

/// Closes with a RST (SO_LINGER 0): no TIME_WAIT, so 100,000 cycles do not run out of ports.
fn set_linger_zero(fd: i32) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: a valid socket fd and a correctly sized option value.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
}

#[test]
fn killed_while_parked_in_read_accept_or_connect_closes_once_and_forgets_the_fd() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    Runtime::builder()
        .threads(2)
        .quiet_panics(true)
        .build()
        .unwrap()
        .run(|| {
            // Make the runtime's reactor first (its epoll fd, its dup and its eventfd are
            // the runtime's, not leaks): an actor has to wait on a socket once.
            let (a, b) = smarm::net::unix::UnixStream::pair().unwrap();
            let waiter = smarm::spawn(move || (&a).read(&mut [0u8; 1]).unwrap());
            while smarm::__private::Diagnostics::current().unwrap().io_waiters() == 0 {
                smarm::yield_now();
            }
            (&b).write_all(b"x").unwrap();
            assert_eq!(waiter.join().unwrap(), 1);
            drop(b);
            let before = open_fds();
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let client = TcpStream::connect(addr).unwrap();
            let (server_side, _) = l.accept().unwrap();
            let fd = server_side.as_raw_fd();
            let diag = smarm::__private::Diagnostics::current().unwrap();

            // Parked in read: killed there.
            let reader = smarm::spawn(move || {
                let mut s = server_side;
                let mut b = [0u8; 8];
                let _ = s.read(&mut b);
            });
            while diag.io_waiters() == 0 {
                smarm::yield_now();
            }
            smarm::kill(reader.pid());
            assert_eq!(reader.join().unwrap_err(), DownReason::Killed);
            assert_eq!(diag.io_waiters(), 0, "the killed reader's waiter is still registered");
            assert!(!fd_is_open(fd), "the killed reader's socket was not closed");

            // The next socket gets the same fd number (the lowest free one) and a fresh
            // registration: it sees its own data, nothing of the old socket's.
            let c2 = TcpStream::connect(addr).unwrap();
            let (s2, _) = l.accept().unwrap();
            let reused = c2.as_raw_fd() == fd || s2.as_raw_fd() == fd;
            assert!(reused, "fd {fd} was not reused ({} / {})", c2.as_raw_fd(), s2.as_raw_fd());
            // The old connection's peer writes (into a reset connection): nothing for s2.
            let _ = (&client).write(b"old");
            let r2 = smarm::spawn(move || {
                let mut b = [0u8; 3];
                (&s2).read_exact(&mut b).unwrap();
                assert_eq!(&b, b"new");
                // Closing once is exactly what `fd_is_open` sees after the drop; a second
                // close would have hit whatever reuses the number next.
                s2
            });
            (&c2).write_all(b"new").unwrap();
            let s2 = r2.join().unwrap();
            drop(s2);
            drop(c2);
            drop(client);

            // Parked in accept: killed there; the listener closes once.
            let lfd = l.as_raw_fd();
            let acceptor = smarm::spawn(move || {
                let _ = l.accept();
            });
            while diag.io_waiters() == 0 {
                smarm::yield_now();
            }
            smarm::kill(acceptor.pid());
            assert_eq!(acceptor.join().unwrap_err(), DownReason::Killed);
            assert!(!fd_is_open(lfd));

            // Parked in connect (to a listener whose accept queue is full): killed there.
            let black = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            // SAFETY: a valid listening socket fd.
            assert_eq!(unsafe { libc::listen(black.as_raw_fd(), 0) }, 0);
            let baddr = black.local_addr().unwrap();
            let fillers: Vec<_> = (0..4)
                .filter_map(|_| {
                    std::net::TcpStream::connect_timeout(&baddr, std::time::Duration::from_millis(200)).ok()
                })
                .collect();
            let connector = smarm::spawn(move || {
                let _ = TcpStream::connect(baddr);
            });
            while diag.io_waiters() == 0 {
                smarm::yield_now();
            }
            smarm::kill(connector.pid());
            assert_eq!(connector.join().unwrap_err(), DownReason::Killed);
            assert_eq!(diag.io_waiters(), 0);
            drop(fillers);
            drop(black);
            assert_eq!(open_fds(), before, "fds leaked");
        })
        .unwrap();
}

#[test]
fn connect_close_churn_leaves_fds_and_rss_flat() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const WARMUP: usize = 10_000;
    const CYCLES: usize = 100_000;
    let (fds, rss) = Runtime::builder()
        .threads(2)
        .build()
        .unwrap()
        .run(|| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            // Connection actors that have ended (and so closed their sockets).
            let ended = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let ended2 = ended.clone();
            // Connections the server has accepted: the client stays within `IN_FLIGHT` of it,
            // so the listener's accept queue (1,024) never overflows. On overflow the kernel
            // drops the handshake's last ACK, the client's reset then removes the half-open
            // connection, and the server would wait forever for a connection that never
            // reaches its queue (seen on a loaded machine: every thread idle, the server in
            // accept).
            const IN_FLIGHT: usize = 256;
            let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let accepted2 = accepted.clone();
            let server = smarm::spawn(move || {
                for _ in 0..WARMUP + CYCLES {
                    let (s, _) = l.accept().unwrap();
                    accepted2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    // Each connection gets its actor, as a server would.
                    let ended = ended2.clone();
                    smarm::spawn(move || {
                        let mut b = [0u8; 1];
                        let _ = (&s).read(&mut b);
                        drop(s);
                        ended.fetch_add(1, std::sync::atomic::Ordering::Release);
                    });
                }
            });
            let mut marks = Vec::new();
            for i in 0..WARMUP + CYCLES {
                if i == WARMUP {
                    marks.push((open_fds(), rss_kib()));
                }
                // Relaxed: a pacing hint; nothing is read through it.
                while accepted.load(std::sync::atomic::Ordering::Relaxed) + IN_FLIGHT < i {
                    smarm::yield_now();
                }
                let c = TcpStream::connect(addr).unwrap();
                set_linger_zero(c.as_raw_fd());
                drop(c);
            }
            server.join().unwrap();
            // Every connection actor has seen its reset, closed its socket and ended (its
            // counter is bumped after the close). Waiting for parked readers alone was not
            // enough: an actor woken but not yet run still holds its socket.
            while ended.load(std::sync::atomic::Ordering::Acquire) != WARMUP + CYCLES {
                smarm::yield_now();
            }
            marks.push((open_fds(), rss_kib()));
            (marks[1].0 as i64 - marks[0].0 as i64, marks[1].1 as i64 - marks[0].1 as i64)
        })
        .unwrap();
    assert!(fds <= 0, "{fds} more fds open after {CYCLES} connect/close cycles");
    // Flat: well under one byte per cycle on average (a leak of a socket's state would be
    // hundreds of bytes per cycle).
    assert!(rss < 4096, "RSS grew by {rss} KiB over {CYCLES} cycles");
}
