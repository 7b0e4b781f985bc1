//! The server examples as processes: the echo server's accept loop under `EMFILE`, and
//! http_hello's clean shutdown on Ctrl-C (SIGINT). `cargo test` builds the examples next to
//! the test binaries (`target/<profile>/examples/`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The path of example `name`, built by `cargo test` for this profile.
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples").join(name);
    assert!(dir.exists(), "{} is missing: run the tests with `cargo test` (which builds the examples)", dir.display());
    dir
}

/// Starts example `name` on an ephemeral port; returns the child and its address, read
/// from its "listening on" line.
fn start(name: &str, nofile: Option<u64>) -> (Child, std::net::SocketAddr, BufReader<std::process::ChildStderr>) {
    let mut cmd = Command::new(example(name));
    cmd.args(["127.0.0.1:0", "--threads", "2"]).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(n) = nofile {
        // SAFETY: setrlimit is async-signal-safe, as pre_exec requires.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit { rlim_cur: n, rlim_max: n };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("no address in {line:?}"));
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (child, addr, err)
}

fn sigint(pid: u32) {
    // SAFETY: kill(2) with a valid pid and signal.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
}

fn echo_roundtrip(addr: std::net::SocketAddr, msg: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).unwrap();
    // A generous bound: a broken server fails the test instead of hanging it.
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(msg).unwrap();
    let mut back = vec![0u8; msg.len()];
    c.read_exact(&mut back).unwrap();
    back
}

/// Runs `body`; if it panics, kills the server and panics again with what the server
/// printed and how it ended, so a failure in CI says why the server stopped answering.
fn or_report_server(
    child: &mut Child,
    err: &mut BufReader<std::process::ChildStderr>,
    body: impl FnOnce(&mut BufReader<std::process::ChildStderr>),
) {
    if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(err))) {
        let status = child.try_wait().unwrap();
        let _ = child.kill();
        let mut stderr = String::new();
        let _ = err.read_to_string(&mut stderr);
        let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
        panic!("{}\nserver status then: {status:?}\nserver stderr:\n{stderr}", msg.unwrap_or_default());
    }
}

#[test]
fn echo_backs_off_at_emfile_and_serves_again_once_fds_are_free() {
    let (mut child, addr, mut err) = start("echo", Some(48));
    let pid = child.id();
    or_report_server(&mut child, &mut err, |err| {
        assert_eq!(echo_roundtrip(addr, b"before"), b"before");
        // More connections than the server has fds: its accept hits EMFILE.
        let clients: Vec<TcpStream> = (0..80).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(err.read_line(&mut line).unwrap() > 0, "the server ended without reporting EMFILE");
            if line.contains("Too many open files") {
                break;
            }
        }
        // Free them; the server keeps serving.
        drop(clients);
        assert_eq!(echo_roundtrip(addr, b"after"), b"after");
    });
    sigint(pid);
    let status = child.wait().unwrap();
    assert!(status.success(), "echo exited with {status}");
}

#[test]
fn http_hello_shuts_down_cleanly_on_ctrl_c_closing_open_connections() {
    let (mut child, addr, mut err) = start("http_hello", None);
    let pid = child.id();
    or_report_server(&mut child, &mut err, |_| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c.write_all(b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.ends_with(b"Hello, World!") {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200 OK"));
        // The connection is kept alive (and its actor parked in read) when Ctrl-C comes.
        sigint(pid);
        let n = c.read(&mut buf).unwrap();
        assert_eq!(n, 0, "the open connection was not closed by the shutdown");
    });
    let status = child.wait().unwrap();
    assert!(status.success(), "http_hello exited with {status}");
}
