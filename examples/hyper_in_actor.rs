//! hyper 1.x inside actors: each connection is an actor that calls
//! `smarm::block_on(serve_connection(..))`. No tokio: the connection's socket is a smarm
//! `TcpStream`, whose `futures_io::AsyncRead`/`AsyncWrite` (feature `futures-io`) wait on
//! smarm's own reactor, and the adapter below turns those into hyper's `rt::Read`/`rt::Write`.
//!
//! Run: `cargo run --release --features futures-io --example hyper_in_actor [ADDR] [--threads N]`
//! (default `127.0.0.1:8081`), then `curl http://127.0.0.1:8081/`; Ctrl-C stops it.
//! `--self-test` serves on an ephemeral port, makes 100 keep-alive requests from a plain
//! thread, checks the answers and exits (CI runs this).
//!
//! Crates that need *tokio's* reactor or timer cannot be driven this way; see the
//! `block_on` docs for running them on a tokio runtime beside smarm.

#[path = "common/ctrl_c.rs"]
mod ctrl_c;
#[path = "common/server.rs"]
mod server;

use std::convert::Infallible;
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use smarm::net::TcpStream;

/// hyper's I/O traits over any `futures_io` stream (the adapter hyper leaves to users).
struct FuturesIo<T>(T);

impl<T: futures_io::AsyncRead + Unpin> hyper::rt::Read for FuturesIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        // Through a stack buffer: `put_slice` keeps this free of `unsafe`.
        let mut tmp = [0u8; 8192];
        let want = buf.remaining().min(tmp.len());
        match Pin::new(&mut self.0).poll_read(cx, &mut tmp[..want]) {
            Poll::Ready(Ok(n)) => {
                buf.put_slice(&tmp[..n]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: futures_io::AsyncWrite + Unpin> hyper::rt::Write for FuturesIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_close(cx)
    }
}

async fn hello(_req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"Hello from an actor!"))))
}

/// One connection: hyper's connection future, driven by the actor that owns the socket.
fn serve(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let conn = http1::Builder::new().serve_connection(FuturesIo(stream), service_fn(hello));
    if let Err(e) = smarm::block_on(conn) {
        eprintln!("hyper_in_actor: connection error: {e}");
    }
}

fn main() {
    if std::env::args().any(|a| a == "--self-test") {
        return self_test();
    }
    let (addr, threads) = server::args("127.0.0.1:8081");
    let out = server::runtime(threads).run(move || {
        server::start("hyper_in_actor", &addr, serve);
        server::serve_until_ctrl_c()
    });
    server::finish("hyper_in_actor", out);
}

/// Serves on an ephemeral port and checks 100 keep-alive requests from a plain thread.
fn self_test() {
    let out = server::runtime(Some(2)).run(|| {
        let listener = smarm::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        smarm::spawn(move || server::accept_loop(&listener, serve));
        // The client is a plain thread with std's blocking socket; the root waits for it.
        let client = smarm::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(addr)?;
            let mut buf = vec![0u8; 4096];
            for _ in 0..100 {
                s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")?;
                let mut got = Vec::new();
                while !got.ends_with(b"Hello from an actor!") {
                    let n = s.read(&mut buf)?;
                    if n == 0 {
                        return Err(io::Error::other("closed early"));
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                assert!(got.starts_with(b"HTTP/1.1 200 OK"), "{}", String::from_utf8_lossy(&got));
            }
            Ok::<_, io::Error>(100)
        });
        client.join().expect("client").expect("requests")
    });
    println!("hyper_in_actor: self-test answered {} requests", out.expect("run"));
}
