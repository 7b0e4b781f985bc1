//! The tokio comparison server for the echo load test (`python3 sweep.py http`): one task
//! per connection that writes back whatever it reads, on a multi-thread runtime with
//! `--threads N` workers.
//!
//! Run: `tokio_echo ADDR [--threads N]`; prints `tokio_echo: listening on IP:PORT` once bound
//! (ADDR may use port 0). SIGINT or SIGTERM stops it: the accept loop ends, the runtime is
//! shut down (open connections dropped), and the process exits with status 0.

#[path = "shutdown.rs"]
mod shutdown;

use std::io::Write;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() {
    let stop = shutdown::on_signal();
    let (addr, threads) = shutdown::args("tokio_echo");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().expect("runtime");
    let listener = rt.block_on(TcpListener::bind(&addr)).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    println!("tokio_echo: listening on {}", listener.local_addr().expect("local addr"));
    let _ = std::io::stdout().flush();
    rt.spawn(accept_loop(listener));
    let _ = stop.recv();
    rt.shutdown_timeout(Duration::from_secs(1));
    println!("tokio_echo: shut down");
}

async fn accept_loop(listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve(stream));
            }
            // Out of file descriptors and the like: back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
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
