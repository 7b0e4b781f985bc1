//! What the server examples share: the command line (`ADDR [--threads N]`), and the
//! acceptor: an actor under a supervisor that accepts forever, one actor per connection,
//! backing off while the process is out of file descriptors.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use smarm::net::{TcpListener, TcpStream};
use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags};

/// `ADDR [--threads N]`: the address (default `default_addr`) and the scheduler threads
/// (default: all cores).
pub fn args(default_addr: &str) -> (String, Option<usize>) {
    let mut addr = default_addr.to_string();
    let mut threads = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--threads" {
            let n = it.next().and_then(|n| n.parse().ok()).expect("--threads takes a number");
            threads = Some(n);
        } else {
            addr = a;
        }
    }
    (addr, threads)
}

/// A runtime with `threads` scheduler threads (default: all cores).
pub fn runtime(threads: Option<usize>) -> smarm::Runtime {
    let mut b = smarm::Runtime::builder().max_actors(1 << 20);
    if let Some(n) = threads {
        b = b.threads(n);
    }
    b.build().expect("runtime")
}

/// Installs the Ctrl-C (SIGINT/SIGTERM) handler, binds `addr`, prints `NAME: listening on
/// ADDR`, and starts the acceptor under a supervisor (restarted if it ever fails); each
/// accepted connection runs `handler` in its own actor. Returns once the acceptor runs.
///
/// The handler comes first: once the address is printed a client may connect (and use up
/// the process's file descriptors) or send the signal, and neither may find it missing.
pub fn start(name: &'static str, addr: &str, handler: fn(TcpStream)) {
    let handle = smarm::shutdown_handle();
    crate::ctrl_c::on_ctrl_c(move || {
        eprintln!("{name}: shutting down");
        handle.shutdown();
    });
    let listener = Arc::new(TcpListener::bind(addr).unwrap_or_else(|e| panic!("{name}: bind {addr}: {e}")));
    println!("{name}: listening on {}", listener.local_addr().expect("local addr"));
    use std::io::Write;
    let _ = io::stdout().flush();
    let acceptor = ChildSpec::worker("acceptor", move || {
        let listener = listener.clone();
        Ok(smarm::spawn_link(move || accept_loop(&listener, handler)).pid())
    });
    // The supervisor is a root supervisor: on shutdown it stops the acceptor first.
    let _sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![acceptor]).expect("supervisor");
}

/// Accepts connections forever, one actor each; backs off while out of file descriptors.
pub fn accept_loop(listener: &TcpListener, handler: fn(TcpStream)) {
    let mut backoff = Duration::from_millis(5);
    loop {
        match listener.accept() {
            Ok((stream, _peer)) => {
                backoff = Duration::from_millis(5);
                // A full runtime (max_actors) drops the connection: closing it is the answer.
                let _ = smarm::try_spawn(move || handler(stream));
            }
            Err(e) if out_of_resources(&e) => {
                eprintln!("accept: {e}; retrying in {backoff:?}");
                smarm::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            // The peer gave up before we accepted (ECONNABORTED) and the like: next one.
            Err(_) => {}
        }
    }
}

/// `EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`: the process or system is out of something that
/// closing connections gives back.
fn out_of_resources(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// Serves until Ctrl-C (or SIGTERM; the handler `start` installed stops the runtime from a
/// plain thread).
pub fn serve_until_ctrl_c() -> ! {
    loop {
        smarm::sleep(Duration::from_secs(3600));
    }
}

/// `run`'s result for a server stopped by Ctrl-C: print and exit 0, anything else panics.
pub fn finish<T: std::fmt::Debug>(name: &str, out: Result<T, smarm::RunError>) {
    match out {
        Err(smarm::RunError::Root(smarm::DownReason::Shutdown)) => println!("{name}: shut down"),
        other => panic!("{name}: unexpected end: {other:?}"),
    }
}
