//! `smarm::net`, `spawn_blocking` and `block_on`: behaviour on loopback, from actors and
//! from plain threads, including the bad-input and fault cases. Every wait here is on an
//! event (a message, a socket, a join); nothing sleeps to synchronise and nothing asserts
//! on elapsed time except "never early".

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use smarm::net::{TcpListener, TcpStream, UdpSocket};
use smarm::{DownReason, Runtime};

fn rt(threads: usize) -> Runtime {
    Runtime::builder().threads(threads).quiet_panics(true).build().unwrap()
}

fn echo_once(mut s: TcpStream) {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => s.write_all(&buf[..n]).unwrap(),
        }
    }
}

/// An actor echo server on an ephemeral port; returns its address.
fn start_echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    smarm::spawn(move || {
        for s in l.incoming() {
            let s = s.unwrap();
            smarm::spawn(move || echo_once(s));
        }
    });
    addr
}

#[test]
fn actors_echo_over_tcp_on_one_and_two_threads() {
    for threads in [1, 2] {
        let total = rt(threads)
            .run(|| {
                let addr = start_echo_server();
                let clients: Vec<_> = (0..20)
                    .map(|i| {
                        smarm::spawn(move || {
                            let mut s = TcpStream::connect(addr).unwrap();
                            let mut got = 0;
                            for round in 0..50 {
                                let msg = format!("client {i} round {round};");
                                s.write_all(msg.as_bytes()).unwrap();
                                let mut back = vec![0u8; msg.len()];
                                s.read_exact(&mut back).unwrap();
                                assert_eq!(back, msg.as_bytes());
                                got += 1;
                            }
                            got
                        })
                    })
                    .collect();
                clients.into_iter().map(|c| c.join().unwrap()).sum::<usize>()
            })
            .unwrap();
        assert_eq!(total, 20 * 50, "threads = {threads}");
    }
}

#[test]
fn plain_threads_use_the_same_types() {
    // A plain-thread server and client, no runtime at all.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || echo_once(l.accept().unwrap().0));
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"thread").unwrap();
    let mut b = [0u8; 6];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"thread");
    // A read timeout on a plain thread.
    c.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let t0 = Instant::now();
    assert_eq!(c.read(&mut b).unwrap_err().kind(), ErrorKind::TimedOut);
    assert!(t0.elapsed() >= Duration::from_millis(20), "timed out early");
    drop(c);
    server.join().unwrap();

    // An actor server, a plain-thread client.
    let (tx, rx) = std::sync::mpsc::channel();
    let runtime = std::thread::spawn(move || {
        rt(2).run(move || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            echo_once(l.accept().unwrap().0);
        })
    });
    let addr = rx.recv().unwrap();
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"to an actor").unwrap();
    let mut b = [0u8; 11];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"to an actor");
    drop(c);
    runtime.join().unwrap().unwrap();
}

#[test]
fn try_clone_lets_one_actor_read_while_another_writes() {
    rt(2)
        .run(|| {
            let addr = start_echo_server();
            let s = TcpStream::connect(addr).unwrap();
            let reader = s.try_clone().unwrap();
            const N: usize = 2000;
            let r = smarm::spawn(move || {
                let mut reader = reader;
                let mut buf = vec![0u8; N * 8];
                reader.read_exact(&mut buf).unwrap();
                for (i, chunk) in buf.chunks(8).enumerate() {
                    assert_eq!(u64::from_le_bytes(chunk.try_into().unwrap()), i as u64);
                }
            });
            let w = smarm::spawn(move || {
                let mut s = s;
                for i in 0..N as u64 {
                    s.write_all(&i.to_le_bytes()).unwrap();
                }
                s
            });
            let _s = w.join().unwrap();
            r.join().unwrap();
        })
        .unwrap();
}

#[test]
fn half_close_reads_eof_and_still_writes() {
    rt(2)
        .run(|| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let server = smarm::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut all = Vec::new();
                s.read_to_end(&mut all).unwrap(); // returns at the client's FIN
                s.write_all(&all).unwrap();
                s.write_all(b"!").unwrap();
            });
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"half").unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            let mut back = Vec::new();
            c.read_to_end(&mut back).unwrap();
            assert_eq!(back, b"half!");
            server.join().unwrap();
        })
        .unwrap();
}

#[test]
fn data_then_fin_in_one_edge_reads_the_data_then_eof() {
    rt(1)
        .run(|| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let mut c = TcpStream::connect(addr).unwrap();
            let (s, _) = l.accept().unwrap();
            // Park once first, so the socket is registered and its READ bit cleared.
            let reader = smarm::spawn(move || {
                let mut c2 = c.try_clone().unwrap();
                let mut b = [0u8; 1];
                c2.read_exact(&mut b).unwrap();
                // Now the peer writes and closes while we are not reading.
                c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                while !c.peek(&mut b).is_ok_and(|n| n == 1) {}
                smarm::sleep(Duration::from_millis(20));
                let mut big = [0u8; 4096];
                let n = c.read(&mut big).unwrap(); // short: clears READ
                assert_eq!(&big[..n], b"tail");
                assert_eq!(c.read(&mut big).unwrap(), 0, "EOF");
            });
            (&s).write_all(b"x").unwrap();
            // Wait for the reader to be parked again (on peek or read) before data + FIN.
            let diag = smarm::__private::Diagnostics::current().unwrap();
            while diag.io_waiters() == 0 {
                smarm::yield_now();
            }
            (&s).write_all(b"tail").unwrap();
            drop(s);
            reader.join().unwrap();
        })
        .unwrap();
}

#[test]
fn refused_reset_and_broken_pipe_are_errors_not_signals() {
    rt(1)
        .run(|| {
            // A port nobody listens on: bind one, learn it, close it.
            let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
            assert_eq!(TcpStream::connect(port).unwrap_err().kind(), ErrorKind::ConnectionRefused);

            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let c = TcpStream::connect(addr).unwrap();
            let (s, _) = l.accept().unwrap();
            // Close with a RST (SO_LINGER 0).
            let linger = libc::linger { l_onoff: 1, l_linger: 0 };
            use std::os::fd::AsRawFd;
            // SAFETY: a valid socket fd and a correctly sized option value.
            let rc = unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&linger as *const libc::linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0);
            drop(s);
            let mut b = [0u8; 8];
            assert_eq!((&c).read(&mut b).unwrap_err().kind(), ErrorKind::ConnectionReset);
            // Writing to the reset connection: an error (EPIPE), never SIGPIPE.
            let mut failed = None;
            for _ in 0..100 {
                if let Err(e) = (&c).write(&[0u8; 1024]) {
                    failed = Some(e.kind());
                    break;
                }
            }
            let kind = failed.expect("writes to a reset connection kept succeeding");
            assert!(matches!(kind, ErrorKind::BrokenPipe | ErrorKind::ConnectionReset), "{kind:?}");
        })
        .unwrap();
}

/// A listener whose accept queue is full: further SYNs are dropped, so a connect hangs.
fn black_hole() -> (std::net::TcpListener, Vec<std::net::TcpStream>, SocketAddr) {
    use std::os::fd::AsRawFd;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // Backlog 0: the accept queue holds one connection.
    // SAFETY: a valid listening socket fd.
    assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
    let addr = l.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            fillers.push(s);
        }
    }
    (l, fillers, addr)
}

#[test]
fn connect_timeout_to_a_black_hole_times_out_never_early() {
    let (_l, _fillers, addr) = black_hole();
    let timeout = Duration::from_millis(100);
    rt(1)
        .run(move || {
            let t0 = Instant::now();
            let e = TcpStream::connect_timeout(&addr, timeout).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
            assert!(t0.elapsed() >= timeout, "timed out early");
            assert_eq!(TcpStream::connect_timeout(&addr, Duration::ZERO).unwrap_err().kind(), ErrorKind::InvalidInput);
        })
        .unwrap();
    // And on a plain thread.
    let e = TcpStream::connect_timeout(&addr, timeout).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
}

#[test]
fn read_and_write_timeouts_end_a_slow_connection() {
    rt(1)
        .run(|| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            // A client that connects and then never reads nor writes (slowloris).
            let c = TcpStream::connect(addr).unwrap();
            let (s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
            s.set_write_timeout(Some(Duration::from_millis(30))).unwrap();
            assert_eq!(s.read_timeout().unwrap(), Some(Duration::from_millis(30)));
            // The slow client does not pin the (only) scheduler thread: another actor runs
            // the whole time the read waits.
            let done = Arc::new(AtomicBool::new(false));
            let d2 = done.clone();
            let other = smarm::spawn(move || {
                let mut turns = 0u64;
                while !d2.load(Ordering::Relaxed) {
                    turns += 1;
                    smarm::yield_now();
                }
                turns
            });
            let t0 = Instant::now();
            assert_eq!((&s).read(&mut [0u8; 16]).unwrap_err().kind(), ErrorKind::TimedOut);
            assert!(t0.elapsed() >= Duration::from_millis(30));
            done.store(true, Ordering::Relaxed);
            assert!(other.join().unwrap() > 0, "nothing else ran while the read waited");
            // Writes fill the socket buffers (the client never reads), then time out.
            let chunk = vec![7u8; 64 * 1024];
            let err = loop {
                if let Err(e) = (&s).write(&chunk) {
                    break e;
                }
            };
            assert_eq!(err.kind(), ErrorKind::TimedOut);
            assert_eq!(s.set_read_timeout(Some(Duration::ZERO)).unwrap_err().kind(), ErrorKind::InvalidInput);
            drop(c);
        })
        .unwrap();
}

#[test]
fn a_busy_runtime_still_accepts_and_answers() {
    // The one scheduler thread always has a CPU-bound actor queued (two of them take turns,
    // calling only `maybe_preempt`): it never idles and never runs out of queued work, so
    // only the busy-poll rule can see the connection the acceptor is parked on.
    rt(1)
        .run(move || {
            let stop = Arc::new(AtomicBool::new(false));
            let spins = Arc::new(AtomicUsize::new(0));
            let spinners: Vec<_> = (0..2)
                .map(|_| {
                    let (stop, spins) = (stop.clone(), spins.clone());
                    smarm::spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            spins.fetch_add(1, Ordering::Relaxed);
                            smarm::maybe_preempt();
                        }
                    })
                })
                .collect();
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let diag = smarm::__private::Diagnostics::current().unwrap();
            // The client connects only once the acceptor is parked in `accept`.
            let client = std::thread::spawn(move || {
                while diag.io_waiters() == 0 {
                    std::thread::yield_now();
                }
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.write_all(b"ping").unwrap();
                let mut b = [0u8; 4];
                c.read_exact(&mut b).unwrap();
                b
            });
            let stop2 = stop.clone();
            let acceptor = smarm::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut b = [0u8; 4];
                s.read_exact(&mut b).unwrap();
                s.write_all(b"pong").unwrap();
                stop2.store(true, Ordering::Relaxed);
            });
            acceptor.join().unwrap();
            assert_eq!(&client.join().unwrap(), b"pong");
            for h in spinners {
                h.join().unwrap();
            }
            assert!(spins.load(Ordering::Relaxed) > 0);
        })
        .unwrap();
}

#[test]
fn sleeping_works_while_an_idle_thread_waits_in_the_reactor() {
    rt(2)
        .run(|| {
            // An actor parked in accept makes the reactor and keeps a waiter.
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let acceptor = smarm::spawn(move || l.accept().map(|_| ()).is_ok());
            for ms in [1u64, 5, 20] {
                let t0 = Instant::now();
                smarm::sleep(Duration::from_millis(ms));
                assert!(t0.elapsed() >= Duration::from_millis(ms), "woke early");
            }
            let _c = TcpStream::connect(addr).unwrap();
            assert!(acceptor.join().unwrap());
        })
        .unwrap();
}

/// `Builder::busy_poll` with a spin far longer than any test: the spinning thread must still
/// deliver readiness (from an actor's socket and from a plain thread's), fire timers, and let
/// the runtime end when the root returns. A spin that ignored any of them would hang here
/// for an hour instead of finishing.
#[test]
fn busy_poll_delivers_readiness_and_timers_and_ends() {
    for threads in [1, 2] {
        Runtime::builder()
            .threads(threads)
            .busy_poll(Duration::from_secs(3600))
            .build()
            .unwrap()
            .run(|| {
                let addr = start_echo_server();
                let mut c = TcpStream::connect(addr).unwrap();
                for i in 0..100u32 {
                    c.write_all(&i.to_le_bytes()).unwrap();
                    let mut b = [0u8; 4];
                    c.read_exact(&mut b).unwrap();
                    assert_eq!(u32::from_le_bytes(b), i);
                }
                // Timers while the only waiters are sockets: the spin ends at the deadline.
                for ms in [1u64, 3] {
                    let t0 = Instant::now();
                    smarm::sleep(Duration::from_millis(ms));
                    assert!(t0.elapsed() >= Duration::from_millis(ms), "woke early");
                }
                // Readiness caused by a plain thread while every actor is parked.
                let l = TcpListener::bind("127.0.0.1:0").unwrap();
                let laddr = l.local_addr().unwrap();
                let reader = smarm::spawn(move || {
                    let (mut s, _) = l.accept().unwrap();
                    let mut b = [0u8; 5];
                    s.read_exact(&mut b).unwrap();
                    b
                });
                let writer = std::thread::spawn(move || {
                    let mut s = std::net::TcpStream::connect(laddr).unwrap();
                    s.write_all(b"hello").unwrap();
                    s
                });
                assert_eq!(&reader.join().unwrap(), b"hello");
                drop(writer.join().unwrap());
            })
            .unwrap();
    }
}

/// `TcpListener::bind` listens with a backlog of 1,024 (mio's own is 128): 300 clients
/// complete their handshakes while nobody accepts. With a backlog of 128 the 130th would
/// wait for SYN retransmissions and time out after 5 s.
#[test]
fn the_listener_backlog_holds_a_burst_of_connections() {
    rt(1)
        .run(|| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let clients = std::thread::spawn(move || {
                (0..300)
                    .map(|i| {
                        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                            .unwrap_or_else(|e| panic!("connection {i} not established: {e}"))
                    })
                    .collect::<Vec<_>>()
            });
            let clients = smarm::spawn_blocking(move || clients.join()).join().unwrap().unwrap();
            assert_eq!(clients.len(), 300);
            // Only now does anyone accept: every queued connection is there.
            for _ in 0..300 {
                l.accept().unwrap();
            }
        })
        .unwrap();
}

#[test]
fn udp_round_trip_between_actors() {
    rt(2)
        .run(|| {
            let a = UdpSocket::bind("127.0.0.1:0").unwrap();
            let b = UdpSocket::bind("127.0.0.1:0").unwrap();
            let a_addr = a.local_addr().unwrap();
            let b_addr = b.local_addr().unwrap();
            let echo = smarm::spawn(move || {
                let mut buf = [0u8; 64];
                for _ in 0..100 {
                    let (n, from) = b.recv_from(&mut buf).unwrap();
                    b.send_to(&buf[..n], from).unwrap();
                }
            });
            a.connect(b_addr).unwrap();
            let mut buf = [0u8; 64];
            for i in 0..100u32 {
                a.send(&i.to_le_bytes()).unwrap();
                let n = a.recv(&mut buf).unwrap();
                assert_eq!(&buf[..n], &i.to_le_bytes());
            }
            assert_eq!(a.peer_addr().unwrap(), b_addr);
            let _ = a_addr;
            echo.join().unwrap();
        })
        .unwrap();
}

#[test]
fn unix_streams_and_listener() {
    let dir = std::env::temp_dir().join(format!("smarm-net-test-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("sock");
    let _ = std::fs::remove_file(&path);
    let p2 = path.clone();
    rt(2)
        .run(move || {
            let l = smarm::net::unix::UnixListener::bind(&p2).unwrap();
            let server = smarm::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut buf = [0u8; 5];
                s.read_exact(&mut buf).unwrap();
                s.write_all(&buf).unwrap();
            });
            let mut c = smarm::net::unix::UnixStream::connect(&p2).unwrap();
            c.write_all(b"unix!").unwrap();
            let mut b = [0u8; 5];
            c.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"unix!");
            server.join().unwrap();
            // A pair, one end in each of two actors.
            let (x, y) = smarm::net::unix::UnixStream::pair().unwrap();
            let h = smarm::spawn(move || {
                let mut y = y;
                let mut b = [0u8; 3];
                y.read_exact(&mut b).unwrap();
                b
            });
            (&x).write_all(b"abc").unwrap();
            assert_eq!(&h.join().unwrap(), b"abc");
        })
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn spawn_blocking_keeps_a_one_thread_runtime_moving() {
    const CALLS: usize = 100;
    let diag = rt(1)
        .run(|| {
            // All 100 calls must be running at once for any to pass the barrier: the pool
            // grows to 100 threads, while the runtime's only scheduler thread stays free.
            let barrier = Arc::new(std::sync::Barrier::new(CALLS));
            let calls: Vec<_> = (0..CALLS)
                .map(|i| {
                    let b = barrier.clone();
                    smarm::spawn_blocking(move || {
                        b.wait();
                        i
                    })
                })
                .collect();
            // Meanwhile actors make progress on the single scheduler thread.
            let (tx, rx) = smarm::channel::channel::<u32>();
            let pinger = smarm::spawn(move || {
                for i in 0..1000 {
                    tx.send(i).unwrap();
                    smarm::yield_now();
                }
            });
            let mut got = 0;
            while rx.recv().is_ok() {
                got += 1;
            }
            assert_eq!(got, 1000);
            pinger.join().unwrap();
            let sum: usize = calls.into_iter().map(|h| h.join().unwrap()).sum();
            assert_eq!(sum, (0..CALLS).sum());
            let diag = smarm::__private::Diagnostics::current().unwrap();
            assert!(diag.blocking_threads() >= CALLS);
            // A panic in the closure is the handle's error.
            let err = smarm::spawn_blocking(|| -> u32 { panic!("blocking boom") }).join().unwrap_err();
            assert_eq!(err, DownReason::Panic("blocking boom".into()));
            diag
        })
        .unwrap();
    // The pool shut down with the runtime.
    assert_eq!(diag.blocking_threads(), 0);
}

#[test]
fn spawn_blocking_outside_a_runtime_runs_on_a_thread() {
    assert_eq!(smarm::spawn_blocking(|| 6 * 7).join().unwrap(), 42);
}

/// A future completed by someone else: the first poll stores the waker; `complete` wakes it.
#[derive(Default)]
struct Slot {
    value: parking_lot::Mutex<(Option<u32>, Option<std::task::Waker>)>,
}

impl Slot {
    fn complete(&self, v: u32) {
        let waker = {
            let mut g = self.value.lock();
            g.0 = Some(v);
            g.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

struct Wait(Arc<Slot>);

impl std::future::Future for Wait {
    type Output = u32;
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<u32> {
        let mut g = self.0.value.lock();
        match g.0 {
            Some(v) => std::task::Poll::Ready(v),
            None => {
                g.1 = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        }
    }
}

#[test]
fn block_on_parks_the_actor_not_the_thread() {
    // One scheduler thread: the future is completed by another actor, which can only run
    // if block_on parked the actor rather than blocking the thread.
    let v = rt(1)
        .run(|| {
            let slot = Arc::new(Slot::default());
            let s2 = slot.clone();
            let completer = smarm::spawn(move || {
                // Wait until the future has been polled once (it stored a waker).
                while s2.value.lock().1.is_none() {
                    smarm::yield_now();
                }
                s2.complete(41);
            });
            let v = smarm::block_on(Wait(slot));
            completer.join().unwrap();
            v + 1
        })
        .unwrap();
    assert_eq!(v, 42);
}

#[test]
fn block_on_is_woken_from_a_plain_thread_and_works_off_the_runtime() {
    let v = rt(2)
        .run(|| {
            let slot = Arc::new(Slot::default());
            let s2 = slot.clone();
            let t = std::thread::spawn(move || {
                while s2.value.lock().1.is_none() {
                    std::thread::yield_now();
                }
                s2.complete(7);
            });
            let v = smarm::block_on(Wait(slot));
            t.join().unwrap();
            v
        })
        .unwrap();
    assert_eq!(v, 7);
    // On a plain thread.
    let slot = Arc::new(Slot::default());
    let s2 = slot.clone();
    let t = std::thread::spawn(move || {
        while s2.value.lock().1.is_none() {
            std::thread::yield_now();
        }
        s2.complete(9);
    });
    assert_eq!(smarm::block_on(Wait(slot)), 9);
    t.join().unwrap();
}

#[test]
fn shutdown_handle_stops_a_server_from_a_plain_thread() {
    let r = rt(2).run(|| {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let handle = smarm::shutdown_handle();
        // Parked in accept when the shutdown comes: it is stopped there.
        let acceptor = smarm::spawn(move || l.accept().map(|_| ()));
        std::thread::spawn(move || assert!(handle.shutdown()));
        let _ = acceptor.join();
        loop {
            smarm::sleep(Duration::from_millis(5));
        }
    });
    assert!(matches!(r, Err(smarm::RunError::Root(DownReason::Shutdown))), "{r:?}");
}
