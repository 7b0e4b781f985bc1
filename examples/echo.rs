//! TCP echo server: an acceptor actor under a supervisor, one actor per connection.
//!
//! Run: `cargo run --release --example echo [ADDR]` (default `127.0.0.1:7878`), then
//! `nc 127.0.0.1 7878`. Ctrl-C stops it cleanly: the runtime is told to shut down from a
//! plain thread, the supervisor stops the acceptor, and the open connections' actors are
//! shut down (their sockets closed).
//!
//! - Each connection is its own actor, written as plain blocking code: `read`, `write_all`.
//!   A connection that stays silent for `IDLE_TIMEOUT` is closed (a slow client cannot hold
//!   an actor forever, and never holds a scheduler thread).
//! - The acceptor backs off when the process runs out of file descriptors (`EMFILE`) and
//!   keeps serving once some are free again, instead of spinning or dying.

#[path = "common/ctrl_c.rs"]
mod ctrl_c;

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::Duration;

use smarm::net::{TcpListener, TcpStream};
use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags};

const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:7878".into());
    let rt = smarm::Runtime::builder().build().expect("runtime");
    let out = rt.run(move || {
        let handle = smarm::shutdown_handle();
        ctrl_c::on_ctrl_c(move || {
            handle.shutdown();
        });
        let listener = Arc::new(TcpListener::bind(&addr).unwrap_or_else(|e| panic!("bind {addr}: {e}")));
        println!("echo: listening on {}", listener.local_addr().expect("local addr"));
        let _ = io::stdout().flush();
        let acceptor = ChildSpec::worker("acceptor", move || {
            let listener = listener.clone();
            Ok(smarm::spawn_link(move || accept_loop(&listener)).pid())
        });
        let _sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![acceptor]).expect("supervisor");
        // Serve until shut down (Ctrl-C).
        loop {
            smarm::sleep(Duration::from_secs(3600));
        }
    });
    match out {
        Err(smarm::RunError::Root(smarm::DownReason::Shutdown)) => println!("echo: shut down"),
        other => panic!("echo: unexpected end: {other:?}"),
    }
}

/// Accepts connections forever, one actor each; backs off while out of file descriptors.
fn accept_loop(listener: &TcpListener) {
    let mut backoff = Duration::from_millis(5);
    loop {
        match listener.accept() {
            Ok((stream, _peer)) => {
                backoff = Duration::from_millis(5);
                smarm::spawn(move || {
                    let _ = serve(stream);
                });
            }
            Err(e) if out_of_resources(&e) => {
                eprintln!("echo: accept: {e}; retrying in {backoff:?}");
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

fn serve(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n])?;
    }
}
