//! The tokio comparison server for the echo load test (`python3 sweep.py http`): one task
//! per connection that writes back whatever it reads, on a multi-thread runtime with
//! `--threads N` workers.
//!
//! Run: `tokio_echo ADDR [--threads N]`; prints `tokio_echo: listening on IP:PORT` once bound
//! (ADDR may use port 0). SIGINT or SIGTERM stops it: the accept loop ends, the runtime is
//! shut down (open connections dropped), and the process exits with status 0.

#[path = "shutdown.rs"]
mod shutdown;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn main() {
    shutdown::run_server("tokio_echo", "tokio_echo", serve);
}

async fn serve(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut buf = vec![0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if stream.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}
