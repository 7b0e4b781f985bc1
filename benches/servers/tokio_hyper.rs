//! The tokio + hyper 1.x comparison server for the HTTP load test (`python3 sweep.py http`):
//! `GET /plaintext` and `GET /json` in the TechEmpower shape, the same responses as
//! `examples/http_hello.rs`, on a multi-thread runtime with `--threads N` workers.
//!
//! Run: `tokio_hyper_server ADDR [--threads N]`; prints `tokio_hyper: listening on IP:PORT`
//! once bound (ADDR may use port 0). HTTP/1.1 with keep-alive; pipelined requests are
//! answered with their responses flushed together (`pipeline_flush`). hyper adds the `Date`
//! header (cached per second) and `content-length`. SIGINT or SIGTERM stops it: the runtime
//! is shut down (open connections dropped) and the process exits with status 0.

#[path = "shutdown.rs"]
mod shutdown;

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE, SERVER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

const PLAINTEXT: &[u8] = b"Hello, World!";
const JSON: &[u8] = br#"{"message":"Hello, World!"}"#;

fn main() {
    shutdown::run_server("tokio_hyper_server", "tokio_hyper", serve);
}

async fn serve(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let _ = http1::Builder::new()
        .keep_alive(true)
        .pipeline_flush(true)
        .serve_connection(TokioIo::new(stream), service_fn(handle))
        .await;
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/plaintext") => (StatusCode::OK, "text/plain", PLAINTEXT),
        (&Method::GET, "/json") => (StatusCode::OK, "application/json", JSON),
        _ => (StatusCode::NOT_FOUND, "text/plain", &b"Not Found"[..]),
    };
    let mut rsp = Response::new(Full::new(Bytes::from_static(body)));
    *rsp.status_mut() = status;
    let h = rsp.headers_mut();
    h.insert(SERVER, HeaderValue::from_static("hyper"));
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(rsp)
}
