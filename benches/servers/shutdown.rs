//! SIGINT/SIGTERM, the command line and the serving loop of the comparison servers of the
//! load test (`python3 sweep.py http`).
//!
//! The signals are blocked in the main thread before the runtime starts (every thread it
//! spawns inherits the mask), and one plain thread takes them with `sigwait`: no handler
//! runs inside the runtime's threads, and no extra crate feature is needed.

use std::sync::mpsc;

/// `ADDR [--threads N]`: the address to bind and the number of worker threads (default: all
/// cores).
pub fn args(name: &str) -> (String, usize) {
    let mut addr = None;
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--threads" {
            let v = it.next().unwrap_or_else(|| usage(name));
            threads = v.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| usage(name));
        } else if addr.is_none() && !a.starts_with('-') {
            addr = Some(a);
        } else {
            usage(name);
        }
    }
    (addr.unwrap_or_else(|| usage(name)), threads)
}

fn usage(name: &str) -> ! {
    eprintln!("usage: {name} ADDR [--threads N]");
    std::process::exit(2);
}

/// Blocks SIGINT and SIGTERM in the calling thread (call it first thing in `main`, before any
/// thread exists) and returns a receiver that gets one message when either arrives.
pub fn on_signal() -> mpsc::Receiver<()> {
    // SAFETY: `set` is a valid, initialised sigset_t; the calls only read and write it.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        assert_eq!(rc, 0, "pthread_sigmask");
        set
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: `set` is valid and the signals in it are blocked in every thread.
        if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
            let _ = tx.send(());
        }
    });
    rx
}

/// The whole server: parses `ADDR [--threads N]` (usage under `name`), binds, prints
/// `LABEL: listening on ADDR`, spawns `handler` for each accepted connection on a
/// multi-thread runtime with N workers, and on SIGINT/SIGTERM shuts the runtime down.
pub fn run_server<Fut>(name: &str, label: &str, handler: fn(tokio::net::TcpStream) -> Fut)
where
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    use std::io::Write;
    let stop = on_signal();
    let (addr, threads) = args(name);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().expect("runtime");
    let listener = rt.block_on(tokio::net::TcpListener::bind(&addr)).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    println!("{label}: listening on {}", listener.local_addr().expect("local addr"));
    let _ = std::io::stdout().flush();
    rt.spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(handler(stream));
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
            }
        }
    });
    let _ = stop.recv();
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    println!("{label}: shut down");
}
