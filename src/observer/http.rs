//! The observer's HTTP/1.1: just enough of a server for a browser and `curl`. It parses a
//! request head (request line and headers) from the front of a connection's buffer, skips
//! a body announced by `Content-Length`, and writes whole responses, each with a
//! `Content-Length` and `Cache-Control: no-store`.
//!
//! Limits: a head longer than [`MAX_HEAD`] is refused with 431, a body longer than
//! [`MAX_BODY`] with 413; `Transfer-Encoding` (chunked bodies), a malformed request line or
//! header, or another HTTP version than 1.0 and 1.1 get 400. Every refusal closes the
//! connection (the rest of its input cannot be framed).

use std::fmt::Write;

/// Largest request head accepted (request line and headers, blank line included).
pub(crate) const MAX_HEAD: usize = 8 * 1024;
/// Largest request body accepted (no route takes one; a client may still send one).
pub(crate) const MAX_BODY: usize = 64 * 1024;

/// A parsed request head.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Request<'a> {
    pub(crate) method: &'a str,
    /// The request target's path, without the query string.
    pub(crate) path: &'a str,
    /// The query string (after `?`, still percent-encoded); empty if none.
    pub(crate) query: &'a str,
    /// Bytes of the head (request line, headers, blank line) plus the body.
    pub(crate) len: usize,
    /// Close the connection after answering (`Connection: close`, or HTTP/1.0 without
    /// `keep-alive`).
    pub(crate) close: bool,
    /// The value of the `X-Smarm-Observer` header, if sent (see the kill route).
    pub(crate) observer_header: Option<&'a str>,
    /// The value of the `Host` header, if sent.
    pub(crate) host: Option<&'a str>,
}

/// What the front of the buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed<'a> {
    /// A whole request (head and body).
    Request(Request<'a>),
    /// Not a whole request yet: read more.
    Partial,
    /// A request the server refuses, with this status; the connection is then closed.
    Refused(Status),
}

/// The statuses the observer answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    BadRequest,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    HeadTooLarge,
}

impl Status {
    fn line(self) -> &'static str {
        match self {
            Status::Ok => "200 OK",
            Status::BadRequest => "400 Bad Request",
            Status::Forbidden => "403 Forbidden",
            Status::NotFound => "404 Not Found",
            Status::MethodNotAllowed => "405 Method Not Allowed",
            Status::PayloadTooLarge => "413 Payload Too Large",
            Status::HeadTooLarge => "431 Request Header Fields Too Large",
        }
    }
}

/// Parses the request at the front of `buf`.
pub(crate) fn parse(buf: &[u8]) -> Parsed<'_> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > MAX_HEAD {
            return Parsed::Refused(Status::HeadTooLarge);
        }
        // A first line that is already wrong need not wait for the rest of the head.
        if let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") {
            if std::str::from_utf8(&buf[..eol]).ok().and_then(request_line).is_none() {
                return Parsed::Refused(Status::BadRequest);
            }
        }
        return Parsed::Partial;
    };
    let head_len = end + 4;
    if head_len > MAX_HEAD {
        return Parsed::Refused(Status::HeadTooLarge);
    }
    let Ok(head) = std::str::from_utf8(&buf[..end]) else {
        return Parsed::Refused(Status::BadRequest);
    };
    let mut lines = head.split("\r\n");
    let Some((method, target, minor)) = lines.next().and_then(request_line) else {
        return Parsed::Refused(Status::BadRequest);
    };
    let mut close = minor == 0;
    let mut body = 0usize;
    let mut observer_header = None;
    let mut host = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Parsed::Refused(Status::BadRequest);
        };
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Parsed::Refused(Status::BadRequest);
        }
        let value = value.trim_matches([' ', '\t']);
        if name.eq_ignore_ascii_case("content-length") {
            match value.parse::<usize>() {
                Ok(n) if value.bytes().all(|b| b.is_ascii_digit()) => body = n,
                _ => return Parsed::Refused(Status::BadRequest),
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Refused(Status::BadRequest);
        } else if name.eq_ignore_ascii_case("connection") {
            for option in value.split(',').map(str::trim) {
                if option.eq_ignore_ascii_case("close") {
                    close = true;
                } else if option.eq_ignore_ascii_case("keep-alive") {
                    close = false;
                }
            }
        } else if name.eq_ignore_ascii_case("x-smarm-observer") {
            observer_header = Some(value);
        } else if name.eq_ignore_ascii_case("host") {
            host = Some(value);
        }
    }
    if body > MAX_BODY {
        return Parsed::Refused(Status::PayloadTooLarge);
    }
    if buf.len() - head_len < body {
        return Parsed::Partial;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Parsed::Request(Request { method, path, query, len: head_len + body, close, observer_header, host })
}

/// `METHOD SP /target SP HTTP/1.x` → (method, target, x).
fn request_line(line: &str) -> Option<(&str, &str, u8)> {
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return None;
    }
    if !target.starts_with('/') || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    let minor = match version {
        "HTTP/1.1" => 1,
        "HTTP/1.0" => 0,
        _ => return None,
    };
    Some((method, target, minor))
}

/// A `tchar` of RFC 9110 (the bytes a header name is made of).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Appends a whole response: status line, headers (`extra` is zero or more
/// `Name: value\r\n` lines), and `body`.
pub(crate) fn respond(out: &mut Vec<u8>, status: Status, content_type: &str, body: &[u8], close: bool, extra: &str) {
    let mut head = String::with_capacity(200);
    let _ = write!(
        head,
        "HTTP/1.1 {}\r\nServer: smarm-observer\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n{extra}",
        status.line(),
        body.len()
    );
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body);
}

/// `%XX` escapes decoded (a pid in a path arrives as `%3C0.5.1%3E`). `None` for a truncated
/// or non-hex escape, or a result that is not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(p: Parsed<'_>) -> Request<'_> {
        match p {
            Parsed::Request(r) => r,
            other => panic!("not a request: {other:?}"),
        }
    }

    #[test]
    fn a_get_with_headers_and_a_query_parses() {
        let raw = b"GET /api/processes?x=1 HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\nGET /";
        let r = request(parse(raw));
        assert_eq!((r.method, r.path, r.close), ("GET", "/api/processes", false));
        assert_eq!(r.len, raw.len() - 5);
    }

    #[test]
    fn http_1_0_closes_unless_keep_alive_and_close_is_honoured() {
        assert!(request(parse(b"GET / HTTP/1.0\r\n\r\n")).close);
        assert!(!request(parse(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")).close);
        assert!(request(parse(b"GET / HTTP/1.1\r\nconnection: close\r\n\r\n")).close);
    }

    #[test]
    fn a_body_is_waited_for_and_counted() {
        assert_eq!(parse(b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nab"), Parsed::Partial);
        let r = request(parse(b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"));
        assert_eq!(r.len, 42);
    }

    #[test]
    fn malformed_requests_are_refused() {
        for raw in [
            &b"GARBAGE\r\n\r\n"[..],
            b"GET /\r\n\r\n",
            b"GET / HTTP/2\r\n\r\n",
            b"get / HTTP/1.1\r\n\r\n",
            b"GET x HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"\xff / HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(parse(raw), Parsed::Refused(Status::BadRequest), "{:?}", String::from_utf8_lossy(raw));
        }
        // A bad first line is refused before the head is complete.
        assert_eq!(parse(b"NOT HTTP\r\nHost"), Parsed::Refused(Status::BadRequest));
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost"), Parsed::Partial);
    }

    #[test]
    fn oversized_heads_and_bodies_are_refused() {
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_HEAD + 1, b'a');
        assert_eq!(parse(&big), Parsed::Refused(Status::HeadTooLarge));
        big.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse(&big), Parsed::Refused(Status::HeadTooLarge));
        let raw = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", MAX_BODY + 1);
        assert_eq!(parse(raw.as_bytes()), Parsed::Refused(Status::PayloadTooLarge));
    }

    #[test]
    fn percent_escapes_decode() {
        assert_eq!(percent_decode("%3C0.5.1%3e").as_deref(), Some("<0.5.1>"));
        assert_eq!(percent_decode("0.5.1").as_deref(), Some("0.5.1"));
        assert_eq!(percent_decode("%3"), None);
        assert_eq!(percent_decode("%zz"), None);
    }

    #[test]
    fn responses_carry_length_and_no_store() {
        let mut out = Vec::new();
        respond(&mut out, Status::NotFound, "text/plain", b"nope", true, "Allow: GET\r\n");
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(s.contains("Content-Length: 4\r\n"));
        assert!(s.contains("Cache-Control: no-store\r\n"));
        assert!(s.contains("Allow: GET\r\n"));
        assert!(s.contains("Connection: close\r\n"));
        assert!(s.ends_with("\r\n\r\nnope"));
    }
}
