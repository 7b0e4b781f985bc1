//! The echo load client of the load test (`python3 sweep.py http`).
//!
//! Run: `echo_client ADDR --connections N --seconds S --warmup W --size BYTES`.
//!
//! Opens N connections first, then on each one sends a BYTES-sized message, waits until the
//! whole echo is back (and checks it byte for byte), and repeats: ping-pong, one message in
//! flight per connection. Round trips that complete during the first W seconds are warm-up
//! and not counted; those completing in the next S seconds are counted, and their latency
//! (send start to last byte of the echo) goes into a log-linear histogram (64 sub-buckets per
//! power of two of nanoseconds: about 1.5% resolution). Prints one line:
//!
//! `messages/s=123456.7 p50_us=12.3 p99_us=45.6 max_us=789.0 messages=1234567 connections=N size=BYTES seconds=S errors=0`
//!
//! A connection that fails (reset, EOF, wrong bytes, or no echo within 5 s) stops and counts
//! one error; the first error is printed on stderr. Exit status 1 when nothing was counted.
//! Runs on a tokio multi-thread runtime with one worker (pin it with `taskset`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SUB_BITS: u32 = 6;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = SUB * (64 - SUB_BITS as usize + 1);

/// A log-linear histogram of nanoseconds.
struct Hist {
    counts: Vec<u64>,
    max: u64,
}

impl Hist {
    fn new() -> Hist {
        Hist { counts: vec![0; BUCKETS], max: 0 }
    }

    fn index(v: u64) -> usize {
        if v < SUB as u64 {
            return v as usize;
        }
        let e = 63 - v.leading_zeros(); // >= SUB_BITS
        let mantissa = (v >> (e - SUB_BITS)) as usize; // in [SUB, 2 * SUB)
        SUB + (e - SUB_BITS) as usize * SUB + (mantissa - SUB)
    }

    /// The middle of bucket `i`, in nanoseconds.
    fn value(i: usize) -> f64 {
        if i < SUB {
            return i as f64;
        }
        let e = (i - SUB) / SUB + SUB_BITS as usize;
        let mantissa = ((i - SUB) % SUB + SUB) as f64;
        let width = (1u64 << (e - SUB_BITS as usize)) as f64;
        mantissa * width + width / 2.0
    }

    fn record(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.max = self.max.max(ns);
    }

    fn merge(&mut self, other: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.max = self.max.max(other.max);
    }

    fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The value at quantile `q` (0..=1), in nanoseconds.
    fn quantile(&self, q: f64) -> f64 {
        let total = self.total();
        if total == 0 {
            return 0.0;
        }
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::value(i).min(self.max as f64);
            }
        }
        self.max as f64
    }
}

struct Config {
    addr: SocketAddr,
    connections: usize,
    seconds: f64,
    warmup: f64,
    size: usize,
}

fn usage() -> ! {
    eprintln!("usage: echo_client ADDR --connections N --seconds S --warmup W --size BYTES");
    std::process::exit(2);
}

fn parse_args() -> Config {
    let mut cfg = Config {
        addr: "127.0.0.1:7878".parse().expect("default address"),
        connections: 100,
        seconds: 10.0,
        warmup: 2.0,
        size: 64,
    };
    let mut addr = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--connections" => cfg.connections = val().parse().unwrap_or_else(|_| usage()),
            "--seconds" => cfg.seconds = val().parse().unwrap_or_else(|_| usage()),
            "--warmup" => cfg.warmup = val().parse().unwrap_or_else(|_| usage()),
            "--size" => cfg.size = val().parse().unwrap_or_else(|_| usage()),
            _ if addr.is_none() && !a.starts_with('-') => addr = Some(a),
            _ => usage(),
        }
    }
    if let Some(a) = addr {
        cfg.addr = a.parse().unwrap_or_else(|e| {
            eprintln!("echo_client: bad address {a}: {e}");
            std::process::exit(2)
        });
    }
    if cfg.connections == 0 || cfg.size == 0 || cfg.seconds <= 0.0 || cfg.warmup < 0.0 {
        usage();
    }
    cfg
}

/// One connection's result: the histogram of counted round trips and the error, if any.
struct Outcome {
    hist: Hist,
    error: Option<String>,
}

async fn ping_pong(mut stream: TcpStream, size: usize, id: usize, warm_end: Instant, end: Instant) -> Outcome {
    let mut hist = Hist::new();
    // A message per connection that differs from its neighbours', so crossed wires show.
    let msg: Vec<u8> = (0..size).map(|i| (i.wrapping_add(id) % 251) as u8).collect();
    let mut buf = vec![0u8; size];
    let error = loop {
        let t0 = Instant::now();
        if t0 >= end {
            break None;
        }
        let round = async {
            stream.write_all(&msg).await?;
            stream.read_exact(&mut buf).await?;
            Ok::<(), std::io::Error>(())
        };
        match tokio::time::timeout(Duration::from_secs(5), round).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => break Some(format!("connection {id}: {e}")),
            Err(_) => break Some(format!("connection {id}: no echo within 5 s")),
        }
        if buf != msg {
            break Some(format!("connection {id}: the echo differs from the message"));
        }
        let t1 = Instant::now();
        if t1 >= warm_end && t1 < end {
            hist.record((t1 - t0).as_nanos() as u64);
        }
    };
    Outcome { hist, error }
}

async fn run(cfg: Config) -> i32 {
    let mut streams = Vec::with_capacity(cfg.connections);
    for i in 0..cfg.connections {
        match TcpStream::connect(cfg.addr).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                streams.push(s);
            }
            Err(e) => {
                eprintln!("echo_client: connect {} (connection {i}): {e}", cfg.addr);
                return 1;
            }
        }
    }
    let start = Instant::now();
    let warm_end = start + Duration::from_secs_f64(cfg.warmup);
    let end = warm_end + Duration::from_secs_f64(cfg.seconds);
    let tasks: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(id, s)| tokio::spawn(ping_pong(s, cfg.size, id, warm_end, end)))
        .collect();
    let mut hist = Hist::new();
    let mut errors = 0;
    for t in tasks {
        let out = t.await.expect("connection task");
        hist.merge(&out.hist);
        if let Some(e) = out.error {
            if errors == 0 {
                eprintln!("echo_client: {e}");
            }
            errors += 1;
        }
    }
    let messages = hist.total();
    println!(
        "messages/s={:.1} p50_us={:.1} p99_us={:.1} max_us={:.1} messages={} connections={} size={} seconds={} errors={}",
        messages as f64 / cfg.seconds,
        hist.quantile(0.50) / 1e3,
        hist.quantile(0.99) / 1e3,
        hist.max as f64 / 1e3,
        messages,
        cfg.connections,
        cfg.size,
        cfg.seconds,
        errors
    );
    i32::from(messages == 0)
}

fn main() {
    let cfg = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let code = rt.block_on(run(cfg));
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::Hist;

    #[test]
    fn buckets_are_monotonic_and_close() {
        let mut last = 0;
        for v in (0..100_000u64).chain([1 << 20, 1 << 30, u64::MAX / 2, u64::MAX]) {
            let i = Hist::index(v);
            assert!(i >= last && i < super::BUCKETS);
            last = i;
            let mid = Hist::value(i);
            assert!((mid - v as f64).abs() <= v as f64 / 64.0 + 1.0, "{v} -> {mid}");
        }
    }
}
