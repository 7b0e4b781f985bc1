//! HTTP/1.1 hello server in the TechEmpower shape: `GET /plaintext` and `GET /json`, with
//! keep-alive and pipelining, one actor per connection, parsed with `httparse`.
//!
//! Run: `cargo run --release --example http_hello [ADDR] [--threads N]` (default
//! `127.0.0.1:8080`), then `curl http://127.0.0.1:8080/plaintext`. Ctrl-C stops it: the
//! runtime is shut down from a plain thread (a `ShutdownHandle`), the acceptor's supervisor
//! stops it, and every connection actor is stopped where it is parked, closing its socket.
//!
//! Each connection reads into a buffer, answers every complete request in it (pipelined
//! requests are answered in order, in one write), and keeps the connection unless the client
//! asked to close it (`Connection: close`, or HTTP/1.0 without keep-alive). A request that
//! cannot be parsed gets a 400 and the connection is closed; headers longer than
//! `MAX_HEAD` get a 431. An idle connection is closed after `IDLE_TIMEOUT`.

#[path = "common/ctrl_c.rs"]
mod ctrl_c;
#[path = "common/server.rs"]
mod server;

use std::io::{self, Read, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use smarm::net::TcpStream;

const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest request head accepted.
const MAX_HEAD: usize = 8 * 1024;
const MAX_HEADERS: usize = 32;
/// Largest request body accepted (the routes take none; a client may still send one).
const MAX_BODY: usize = 64 * 1024;

fn main() {
    let (addr, threads) = server::args("127.0.0.1:8080");
    let out = server::runtime(threads).run(move || {
        server::start("http_hello", &addr, |s| {
            let _ = Connection::new().serve(s);
        });
        server::serve_until_ctrl_c()
    });
    server::finish("http_hello", out);
}

struct Connection {
    /// `inbuf[..filled]`: bytes read and not yet consumed by a complete request.
    inbuf: Vec<u8>,
    filled: usize,
    out: Vec<u8>,
    date: Date,
}

/// What the parser made of the front of the input buffer.
enum Parsed {
    /// A whole request of this many bytes (head and body); close after answering?
    Request {
        len: usize,
        close: bool,
    },
    Partial,
    Bad,
}

/// A connection's read buffer (grown for a large request, given back after it).
const BUF: usize = 4096;

impl Connection {
    fn new() -> Connection {
        Connection { inbuf: vec![0; BUF], filled: 0, out: Vec::new(), date: Date::default() }
    }

    fn serve(&mut self, mut stream: TcpStream) -> io::Result<()> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
        loop {
            if self.filled == self.inbuf.len() {
                self.inbuf.resize(self.inbuf.len() * 2, 0);
            }
            let n = stream.read(&mut self.inbuf[self.filled..])?;
            if n == 0 {
                return Ok(());
            }
            self.filled += n;
            // Answer every complete request in the buffer, in order, with one write.
            let mut consumed = 0;
            let mut close = false;
            self.date.refresh();
            loop {
                match self.parse_and_answer(consumed) {
                    Parsed::Request { len, close: c } => {
                        consumed += len;
                        if c {
                            close = true;
                            break;
                        }
                    }
                    Parsed::Partial => {
                        if self.filled - consumed > MAX_HEAD {
                            self.out.extend_from_slice(RESPONSE_431);
                            close = true;
                        }
                        break;
                    }
                    Parsed::Bad => {
                        self.out.extend_from_slice(RESPONSE_400);
                        close = true;
                        break;
                    }
                }
            }
            self.inbuf.copy_within(consumed..self.filled, 0);
            self.filled -= consumed;
            if !self.out.is_empty() {
                stream.write_all(&self.out)?;
                self.out.clear();
            }
            if close {
                return Ok(());
            }
            if self.filled == 0 && self.inbuf.len() > BUF {
                self.inbuf = vec![0; BUF];
            }
        }
    }

    /// Parses the request starting at `at` and appends its response to `out`.
    fn parse_and_answer(&mut self, at: usize) -> Parsed {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        let head_len = match req.parse(&self.inbuf[at..self.filled]) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Parsed::Partial,
            Err(_) => return Parsed::Bad,
        };
        let mut body_len = 0usize;
        let mut close = req.version == Some(0);
        for h in req.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                match std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse().ok()) {
                    Some(n) => body_len = n,
                    None => return Parsed::Bad,
                }
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                // Chunked request bodies are not needed by this server's routes.
                return Parsed::Bad;
            } else if h.name.eq_ignore_ascii_case("connection") {
                if h.value.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if h.value.eq_ignore_ascii_case(b"keep-alive") {
                    close = false;
                }
            }
        }
        if body_len > MAX_BODY {
            return Parsed::Bad;
        }
        if self.filled - at - head_len < body_len {
            return Parsed::Partial;
        }
        match (req.method, req.path) {
            (Some("GET"), Some("/plaintext")) => {
                self.head(b"text/plain", b"Hello, World!".len(), close);
                self.out.extend_from_slice(b"Hello, World!");
            }
            (Some("GET"), Some("/json")) => {
                // Serialised per request (TechEmpower's rule), straight into the output.
                let message = "Hello, World!";
                self.head(b"application/json", json_message_len(message), close);
                write_json_message(&mut self.out, message);
            }
            _ => self.respond_status(b"404 Not Found", close),
        }
        Parsed::Request { len: head_len + body_len, close }
    }

    /// A 200 response's head, for a body of `len` bytes that the caller appends.
    fn head(&mut self, content_type: &[u8], len: usize, close: bool) {
        let o = &mut self.out;
        o.extend_from_slice(b"HTTP/1.1 200 OK\r\nServer: smarm\r\nContent-Type: ");
        o.extend_from_slice(content_type);
        o.extend_from_slice(b"\r\nContent-Length: ");
        push_decimal(o, len);
        o.extend_from_slice(b"\r\nDate: ");
        o.extend_from_slice(self.date.bytes());
        if close {
            o.extend_from_slice(b"\r\nConnection: close");
        }
        o.extend_from_slice(b"\r\n\r\n");
    }

    fn respond_status(&mut self, status: &[u8], close: bool) {
        let o = &mut self.out;
        o.extend_from_slice(b"HTTP/1.1 ");
        o.extend_from_slice(status);
        o.extend_from_slice(b"\r\nServer: smarm\r\nContent-Length: 0\r\nDate: ");
        o.extend_from_slice(self.date.bytes());
        if close {
            o.extend_from_slice(b"\r\nConnection: close");
        }
        o.extend_from_slice(b"\r\n\r\n");
    }
}

const RESPONSE_400: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nServer: smarm\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
const RESPONSE_431: &[u8] =
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nServer: smarm\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Appends `n` in decimal (no allocation).
fn push_decimal(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The JSON escape of one character, if it needs one.
fn json_escape(c: char) -> Option<String> {
    match c {
        '"' => Some("\\\"".into()),
        '\\' => Some("\\\\".into()),
        c if (c as u32) < 0x20 => Some(format!("\\u{:04x}", c as u32)),
        _ => None,
    }
}

/// The length of `{"message":"<text>"}` with `text` escaped.
fn json_message_len(text: &str) -> usize {
    let escaped: usize = text.chars().map(|c| json_escape(c).map_or(c.len_utf8(), |e| e.len())).sum();
    r#"{"message":""}"#.len() + escaped
}

/// Appends `{"message":"<text>"}` with JSON escaping.
fn write_json_message(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(br#"{"message":""#);
    for c in text.chars() {
        match json_escape(c) {
            Some(e) => out.extend_from_slice(e.as_bytes()),
            None => out.extend_from_slice(c.encode_utf8(&mut [0u8; 4]).as_bytes()),
        }
    }
    out.extend_from_slice(br#""}"#);
}

/// The `Date` header value (IMF-fixdate), formatted once per second per connection.
#[derive(Default)]
struct Date {
    secs: u64,
    text: [u8; 29],
}

impl Date {
    fn refresh(&mut self) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if now != self.secs || self.text[0] == 0 {
            self.secs = now;
            self.text = imf_fixdate(now);
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.text
    }
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` for `secs` since the Unix epoch.
fn imf_fixdate(secs: u64) -> [u8; 29] {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let s = format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        day,
        MONTHS[(month - 1) as usize],
        year,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    let mut out = [0u8; 29];
    out.copy_from_slice(&s.as_bytes()[..29]);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_and_decimals_are_written_as_expected() {
        let mut out = Vec::new();
        super::write_json_message(&mut out, "Hello, \"World\"!\n");
        assert_eq!(out, br#"{"message":"Hello, \"World\"!\u000a"}"#);
        assert_eq!(super::json_message_len("Hello, \"World\"!\n"), out.len());
        let mut d = Vec::new();
        super::push_decimal(&mut d, 0);
        super::push_decimal(&mut d, 13);
        super::push_decimal(&mut d, 1234567890);
        assert_eq!(d, b"0131234567890");
    }

    #[test]
    fn imf_fixdate_matches_known_dates() {
        assert_eq!(&super::imf_fixdate(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&super::imf_fixdate(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&super::imf_fixdate(1_709_164_800), b"Thu, 29 Feb 2024 00:00:00 GMT");
    }
}
