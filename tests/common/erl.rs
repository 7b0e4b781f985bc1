//! Real Erlang nodes for the cluster tests: a private `epmd`, `erl` nodes started with an
//! `-eval` script whose output lines the test reads, all killed when dropped. Every wait is
//! bounded. A missing `erl` or `epmd` fails the test with the Debian package to install.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long any one wait for Erlang may take before the test fails.
pub const ERL_TIMEOUT: Duration = Duration::from_secs(30);

/// A unique suffix for node names (pid and a counter).
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}_{}_{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A free TCP port on loopback (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn need(program: &str) {
    if Command::new("which").arg(program).stdout(Stdio::null()).status().map(|s| !s.success()).unwrap_or(true) {
        panic!("`{program}` not found: install Debian's erlang-base (apt-get install erlang-base)");
    }
}

/// A private `epmd` on its own port, killed on drop.
pub struct Epmd {
    child: Child,
    pub port: u16,
}

impl Epmd {
    pub fn start() -> Epmd {
        need("epmd");
        let port = free_port();
        let child = Command::new("epmd")
            .args(["-port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("epmd: install Debian's erlang-base");
        // Ready when it accepts connections (bounded).
        let deadline = Instant::now() + ERL_TIMEOUT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "epmd did not start listening on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Epmd { child, port }
    }
}

impl Drop for Epmd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An `erl` node running an `-eval` script; its stdout lines arrive on `lines`.
pub struct Erl {
    child: Child,
    lines: std::sync::Mutex<mpsc::Receiver<String>>,
    pub name: String,
    pub pid: u32,
}

impl Erl {
    /// Starts `erl -name <alive>@127.0.0.1` with `cookie`, EPMD at `epmd_port`, a 2 s
    /// `net_ticktime`, evaluating `script` (which should end with `halt()`).
    pub fn start(alive: &str, cookie: &str, epmd_port: u16, script: &str) -> Erl {
        Self::start_with(alive, cookie, epmd_port, script, &[])
    }

    pub fn start_with(alive: &str, cookie: &str, epmd_port: u16, script: &str, extra: &[&str]) -> Erl {
        need("erl");
        let name = format!("{alive}@127.0.0.1");
        let mut child = Command::new("erl")
            .args(["-name", &name, "-setcookie", cookie, "-noshell", "-start_epmd", "false"])
            .args(["-kernel", "net_ticktime", "2"])
            .args(["-kernel", "dist_auto_connect", "always"])
            .args(extra)
            .args(["-eval", script])
            .env("ERL_EPMD_PORT", epmd_port.to_string())
            // A node whose -eval process exits abnormally would write erl_crash.dump here.
            .env("ERL_CRASH_DUMP_SECONDS", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("erl: install Debian's erlang-base");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                eprintln!("[erl] {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let pid = child.id();
        Erl { child, lines: std::sync::Mutex::new(lines), name, pid }
    }

    /// The next output line, or a panic after [`ERL_TIMEOUT`].
    pub fn line(&self) -> String {
        let lines = self.lines.lock().unwrap();
        lines.recv_timeout(ERL_TIMEOUT).unwrap_or_else(|_| panic!("no output from {} in time", self.name))
    }

    /// Reads lines until one starts with `prefix`; returns the rest of it.
    pub fn expect(&self, prefix: &str) -> String {
        loop {
            let l = self.line();
            if let Some(rest) = l.strip_prefix(prefix) {
                return rest.to_string();
            }
        }
    }

    /// Sends a signal to the erl OS process.
    pub fn signal(&self, sig: &str) {
        Command::new("kill").args([&format!("-{sig}"), &self.pid.to_string()]).status().unwrap();
    }

    /// [`expect`](Self::expect) from an actor: on the blocking pool, so the scheduler thread
    /// keeps running the node's actors meanwhile.
    pub fn expect_in_actor(self: &std::sync::Arc<Self>, prefix: &str) -> String {
        let (me, prefix) = (self.clone(), prefix.to_string());
        smarm::spawn_blocking(move || me.expect(&prefix)).join().unwrap()
    }

    /// Waits (bounded) for the node to exit.
    pub fn wait(mut self) {
        let deadline = Instant::now() + ERL_TIMEOUT;
        loop {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            assert!(Instant::now() < deadline, "{} did not exit in time", self.name);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Erl {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.pid.to_string()]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
