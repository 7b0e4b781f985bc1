//! SIGINT/SIGTERM and the command line for the comparison servers of the load test
//! (`python3 sweep.py http`).
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
