//! Ctrl-C (SIGINT) and SIGTERM for the server examples: the handler only writes a byte to a
//! pipe (async-signal-safe); a plain thread waiting on the pipe runs the callback, which
//! stops the runtime from outside any actor (`smarm::ShutdownHandle`).

use std::io::Read;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::atomic::{AtomicI32, Ordering};

static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_: libc::c_int) {
    // Relaxed: the fd was stored before the handler was installed.
    let fd = PIPE_WRITE.load(Ordering::Relaxed);
    // SAFETY: write(2) is async-signal-safe; the buffer is a valid one-byte static.
    unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) };
}

/// Calls `f` once, on its own thread, when SIGINT or SIGTERM arrives.
pub fn on_ctrl_c(f: impl FnOnce() + Send + 'static) {
    let (mut rx, tx) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    // Relaxed: published to the handler by the sigaction syscalls below.
    PIPE_WRITE.store(tx.into_raw_fd(), Ordering::Relaxed);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with a valid handler and an empty mask is a valid
        // argument; the handler only calls write(2).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    std::thread::spawn(move || {
        let mut b = [0u8; 1];
        if rx.read(&mut b).is_ok() {
            f();
        }
        // Keep the read end open: a second signal then writes into the buffer harmlessly.
        // SAFETY: the fd is owned by `rx`, which we leak on purpose.
        let _ = unsafe { std::fs::File::from_raw_fd(rx.into_raw_fd()) }.into_raw_fd();
    });
}
