//! `futures_io::AsyncRead`/`AsyncWrite` of smarm's sockets (feature `futures-io`), driven by
//! `smarm::block_on` in actors: readiness comes from smarm's reactor, no other runtime.
#![cfg(feature = "futures-io")]

use std::future::poll_fn;
use std::io::{ErrorKind, Read, Write};
use std::pin::Pin;

use futures_io::{AsyncRead, AsyncWrite};
use smarm::net::{unix::UnixStream, TcpListener, TcpStream};

async fn read_exact<R: AsyncRead + Unpin>(r: &mut R, mut buf: &mut [u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut *r).poll_read(cx, buf)).await?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        buf = &mut buf[n..];
    }
    Ok(())
}

async fn write_all<W: AsyncWrite + Unpin>(w: &mut W, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut *w).poll_write(cx, buf)).await?;
        buf = &buf[n..];
    }
    Ok(())
}

#[test]
fn async_tcp_echo_between_actors() {
    smarm::Runtime::builder()
        .threads(2)
        .build()
        .unwrap()
        .run(|| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            // The server side is plain blocking code; the client is async over the reactor.
            let server = smarm::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut buf = vec![0u8; 100_000];
                s.read_exact(&mut buf).unwrap();
                s.write_all(&buf).unwrap();
            });
            let mut c = TcpStream::connect(addr).unwrap();
            let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
            let back = smarm::block_on(async {
                // 100 kB each way: the writes and reads both return Pending on the way.
                write_all(&mut c, &data).await.unwrap();
                let mut back = vec![0u8; data.len()];
                read_exact(&mut c, &mut back).await.unwrap();
                back
            });
            assert_eq!(back, data);
            server.join().unwrap();
            // Close: the peer reads end-of-file.
            let (mut a, b) = UnixStream::pair().unwrap();
            smarm::block_on(poll_fn(|cx| Pin::new(&mut a).poll_close(cx))).unwrap();
            assert_eq!((&b).read(&mut [0u8; 4]).unwrap(), 0);
        })
        .unwrap();
}

#[test]
fn polling_off_an_actor_is_an_error_not_a_hang() {
    let (mut a, _b) = UnixStream::pair().unwrap();
    let mut buf = [0u8; 4];
    let e = smarm::block_on(poll_fn(|cx| Pin::new(&mut a).poll_read(cx, &mut buf))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Other);
}
