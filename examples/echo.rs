//! TCP echo server: an acceptor actor under a supervisor, one actor per connection.
//!
//! Run: `cargo run --release --example echo [ADDR] [--threads N]` (default
//! `127.0.0.1:7878`), then `nc 127.0.0.1 7878`. Ctrl-C stops it cleanly: the runtime is told
//! to shut down from a plain thread, the supervisor stops the acceptor, and the open
//! connections' actors are shut down (their sockets closed).
//!
//! - Each connection is its own actor, written as plain blocking code: `read`, `write_all`.
//!   A connection that stays silent for `IDLE_TIMEOUT` is closed (a slow client cannot hold
//!   an actor forever, and never holds a scheduler thread).
//! - The acceptor (`common/server.rs`) backs off when the process runs out of file
//!   descriptors (`EMFILE`) and keeps serving once some are free again.

#[path = "common/ctrl_c.rs"]
mod ctrl_c;
#[path = "common/server.rs"]
mod server;

use std::io::{self, Read, Write};
use std::time::Duration;

use smarm::net::TcpStream;

const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

fn main() {
    let (addr, threads) = server::args("127.0.0.1:7878");
    let out = server::runtime(threads).run(move || {
        server::start("echo", &addr, |s| {
            let _ = serve(s);
        });
        server::serve_until_ctrl_c()
    });
    server::finish("echo", out);
}

fn serve(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n])?;
    }
}
