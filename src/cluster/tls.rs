//! TLS for Erlang distribution connections (the transport of `-proto_dist inet_tls`), on rustls
//! with the `ring` provider and mutual certificates.
//!
//! What this module owns: the TLS configuration ([`TlsConfig`]: our certificate chain and key,
//! the CA that must have signed every peer, whether the server's certificate must name the host
//! we dial), the TLS handshake on a connected socket ([`connect`], [`accept`]) and the split of
//! the resulting connection into a reading half ([`TlsReader`]) and a writing half
//! ([`TlsWriter`]) that two threads (actors) use at the same time. The Erlang distribution
//! handshake and everything after it run unchanged over these halves; this module knows nothing
//! about Erlang. It is generic over the socket through [`Socket`], which `std::net::TcpStream`
//! implements here; any blocking, cloneable stream can implement it.
//!
//! Invariants:
//! - Both sides present a certificate and both require the peer's, verified against the
//!   configured CA (mutual TLS). Session resumption is disabled in both directions, so every
//!   connection verifies a full certificate chain.
//! - The two halves share one rustls connection behind a mutex that is never held across a
//!   socket read or write: the reader reads socket bytes into its own buffer, then locks only to
//!   feed them to rustls and take plaintext; the writer locks only to encrypt into its own
//!   buffer, then writes that buffer to its own socket handle. A reader blocked in `read` never
//!   stops the writer, and the other way round.
//! - TLS output produced while reading (an alert after a protocol error, a TLS 1.3 key-update
//!   answer) leaves with the writer's next `write` or `flush`, in order: it stays queued in the
//!   shared rustls connection (rustls itself holds a key-update answer back until the next
//!   application write). The reader never writes to the socket, so it can never block on a
//!   peer that does not read. [`TlsReader::has_pending_output`] tells whether queued output
//!   waits; an idle writer sends it on [`TlsWriter::flush`]. (The Erlang distribution sends a
//!   tick at least every quarter `net_ticktime`, which carries it out.)
//! - After a fatal TLS error, a socket write failure or [`TlsWriter::close`], every later write
//!   fails; reads after a local close return end of stream.
//! - Memory per connection is bounded: the reader's socket buffer ([`READ_BUF`]), rustls's own
//!   bounded buffers, and the writer's output buffer (at most one write's worth of records,
//!   since rustls accepts at most its send-buffer limit per write).
//! - Nothing here panics on network input.
//!
//! Limits:
//! - [`TlsConfig::verify_hostname`] applies to the server's certificate when we connect (as
//!   OTP does: the client checks the server against the node's host). When we accept, the
//!   client's node name is not known until the distribution handshake has run over TLS; check
//!   it afterwards with [`TlsReader::check_peer_host`] if wanted (OTP's `inet_tls_dist` checks
//!   client host names only with `net_kernel:allow/1`).
//! - In TLS 1.3 the client sends its certificate last, so when the server rejects it the
//!   client's [`connect`] may already have returned; the rejection (the server's alert) then
//!   surfaces as an error from the first read of the [`TlsReader`].
//! - No certificate revocation lists, no OCSP, no SNI-based certificate selection, no ALPN.
//! - The socket must block: a read that returns `WouldBlock` is taken to be the socket's read
//!   timeout expiring and is reported as `TimedOut` (std sockets return `WouldBlock` on Unix
//!   when their read timeout expires). A timed-out read loses nothing and may be retried. The
//!   handshake is bounded per step by that timeout, not in total.
//! - No TLS 1.2 renegotiation (rustls refuses it). OTP renegotiates a TLS 1.2 connection after
//!   `renegotiate_at` records it sent (default 2^28), which then ends the connection: run the
//!   Erlang side with `{versions, ['tlsv1.3', ...]}` (OTP 25's distribution defaults to
//!   `['tlsv1.2']`); TLS 1.3 uses key updates, which work.
//!
//! Interop notes for the distribution layer (OTP 25 `inet_tls_dist`): over TLS the handshake
//! messages carry a 4-byte length (`{packet, 4}` from the start), not the 2-byte one of plain
//! TCP. OTP's client checks the server certificate against the host part of the node name as
//! a DNS name only (`{dns_id, Host}`, also for `node@127.0.0.1`), so a certificate with only an
//! IP address SAN fails there unless it also names the address as a DNS SAN or the Erlang
//! side sets a `customize_hostname_check` `match_fun`; OTP's server checks client host names
//! only with `net_kernel:allow/1`.

// A complete TLS transport: smarm uses connect/accept and the two halves; the peer-host check
// after accept, the protocol query and the explicit close serve its tests and diagnostics.
#![allow(dead_code)]
// TlsConfig and TlsError are public (cluster::TlsConfig); their docs name the private functions.
#![allow(rustdoc::private_intra_doc_links)]

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name, Resumption, WebPkiServerVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{NoServerSessionStorage, ParsedCertificate, WebPkiClientVerifier};
use rustls::{
    ClientConfig, ClientConnection, Connection, DigitallySignedStruct, ProtocolVersion, RootCertStore, ServerConfig,
    ServerConnection, SignatureScheme,
};

/// Size of the reader's socket buffer: one maximal TLS record (16 KiB of ciphertext plus header
/// and expansion) fits twice.
pub const READ_BUF: usize = 36 * 1024;

/// A blocking, cloneable byte stream that TLS runs on.
///
/// Reads and writes block until they make progress; a read timeout, if the socket has one, is
/// reported as `TimedOut` or `WouldBlock`. [`Socket::try_clone`] must return a second handle to
/// the same stream (the reader and the writer each own one); [`Socket::shutdown`] must shut both
/// directions down, waking a read blocked on any handle.
pub trait Socket: Read + Write + Send + 'static {
    /// A second handle to the same stream.
    fn try_clone(&self) -> io::Result<Self>
    where
        Self: Sized;
    /// Shuts the stream down in both directions.
    fn shutdown(&self) -> io::Result<()>;
}

impl Socket for TcpStream {
    fn try_clone(&self) -> io::Result<Self> {
        TcpStream::try_clone(self)
    }

    fn shutdown(&self) -> io::Result<()> {
        TcpStream::shutdown(self, Shutdown::Both)
    }
}

/// Why a TLS configuration could not be built or a TLS handshake failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsError {
    /// The socket (or a PEM file) failed; a handshake step that outlasted the socket's read
    /// timeout is an error of kind `TimedOut`.
    Io(io::Error),
    /// A PEM input is malformed or lacks the expected items (what and why in the text; never
    /// key material).
    Pem(String),
    /// The certificates or the key were rejected by rustls (e.g. a key that does not match the
    /// certificate, an unusable CA certificate).
    Config(String),
    /// The host name to verify or to send is not a valid DNS name or IP address.
    InvalidHost(String),
    /// The TLS handshake failed: a certificate was rejected (by us or, through its alert, by the
    /// peer), the peer spoke no TLS, or it closed the connection during the handshake.
    Handshake(String),
    /// The peer's certificate is not valid for the host given to [`TlsReader::check_peer_host`].
    PeerHost(String),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Io(e) => write!(f, "TLS I/O error: {e}"),
            TlsError::Pem(m) => write!(f, "bad PEM input: {m}"),
            TlsError::Config(m) => write!(f, "bad TLS configuration: {m}"),
            TlsError::InvalidHost(h) => write!(f, "not a valid host name or IP address for TLS: {h:?}"),
            TlsError::Handshake(m) => write!(f, "TLS handshake failed: {m}"),
            TlsError::PeerHost(m) => write!(f, "peer certificate rejected: {m}"),
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for TlsError {
    fn from(e: io::Error) -> Self {
        TlsError::Io(e)
    }
}

/// Certificates, key and trust for both roles of a node: the same chain and key are presented
/// when connecting and when accepting, and peers in both roles must chain to the same CA.
///
/// Cheap to clone (the rustls configurations are shared). `Debug` shows counts and flags only,
/// never key material.
#[derive(Clone)]
pub struct TlsConfig {
    /// Client side, checking the server certificate's name against the host we dial.
    client_strict: Arc<ClientConfig>,
    /// Client side, checking the server certificate's chain only.
    client_ca_only: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    certificates: usize,
    trust_anchors: usize,
    verify_hostname: bool,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("certificates", &self.certificates)
            .field("trust_anchors", &self.trust_anchors)
            .field("private_key", &"<redacted>")
            .field("verify_hostname", &self.verify_hostname)
            .finish()
    }
}

impl TlsConfig {
    /// Builds a configuration from PEM text: `cert_chain_pem` holds our certificate followed by
    /// any intermediates, `key_pem` its private key (PKCS#8, PKCS#1 or SEC1), `ca_pem` one or
    /// more CA certificates that every peer's certificate must chain to. Host names are verified
    /// (see [`TlsConfig::verify_hostname`]).
    pub fn from_pem(cert_chain_pem: &[u8], key_pem: &[u8], ca_pem: &[u8]) -> Result<TlsConfig, TlsError> {
        let certs = CertificateDer::pem_slice_iter(cert_chain_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Pem(format!("certificate chain: {e}")))?;
        if certs.is_empty() {
            return Err(TlsError::Pem("certificate chain: no CERTIFICATE section".into()));
        }
        // Only the section kind is reported on failure, never the key's bytes.
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Pem(format!("private key: {e}")))?;
        let cas = CertificateDer::pem_slice_iter(ca_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Pem(format!("CA certificates: {e}")))?;
        if cas.is_empty() {
            return Err(TlsError::Pem("CA certificates: no CERTIFICATE section".into()));
        }
        let mut roots = RootCertStore::empty();
        for ca in cas {
            roots.add(ca).map_err(|e| TlsError::Config(format!("CA certificate: {e}")))?;
        }
        Self::build(certs, key, roots)
    }

    /// Like [`TlsConfig::from_pem`], reading the three PEM files.
    pub fn from_pem_files(cert: &Path, key: &Path, ca: &Path) -> Result<TlsConfig, TlsError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| TlsError::Io(io::Error::new(e.kind(), format!("{}: {e}", p.display()))))
        };
        Self::from_pem(&read(cert)?, &read(key)?, &read(ca)?)
    }

    /// Whether [`connect`] requires the server's certificate to be valid for the host it dials
    /// (a DNS name or IP address subject alternative name matching the host part of the node
    /// name). Default `true`; with `false` only the chain to the CA is checked.
    pub fn verify_hostname(mut self, on: bool) -> TlsConfig {
        self.verify_hostname = on;
        self
    }

    /// Whether host names are verified (see [`TlsConfig::verify_hostname`]).
    pub fn verifies_hostname(&self) -> bool {
        self.verify_hostname
    }

    fn build(
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        roots: RootCertStore,
    ) -> Result<TlsConfig, TlsError> {
        let config_err = |e: rustls::Error| TlsError::Config(e.to_string());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let trust_anchors = roots.len();
        let roots = Arc::new(roots);

        let client_verifier = WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let mut server = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(config_err)?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(config_err)?;
        server.session_storage = Arc::new(NoServerSessionStorage {});
        server.send_tls13_tickets = 0;

        let strict = WebPkiServerVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let ca_only = Arc::new(CaOnlyVerifier {
            inner: Arc::clone(&strict),
            roots,
            algorithms: provider.signature_verification_algorithms.all,
        });
        let mut client_strict = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(config_err)?
            .with_webpki_verifier(strict)
            .with_client_auth_cert(certs.clone(), key.clone_key())
            .map_err(config_err)?;
        client_strict.resumption = Resumption::disabled();
        let mut client_ca_only = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(config_err)?
            .dangerous()
            .with_custom_certificate_verifier(ca_only)
            .with_client_auth_cert(certs.clone(), key)
            .map_err(config_err)?;
        client_ca_only.resumption = Resumption::disabled();

        Ok(TlsConfig {
            client_strict: Arc::new(client_strict),
            client_ca_only: Arc::new(client_ca_only),
            server: Arc::new(server),
            certificates: certs.len(),
            trust_anchors,
            verify_hostname: true,
        })
    }
}

/// The server-certificate check for `verify_hostname(false)`: the full webpki chain check to our
/// trust anchors (validity period, key usage for TLS server authentication, signatures), without
/// the name check. Handshake signatures are checked by the standard verifier.
#[derive(Debug)]
struct CaOnlyVerifier {
    inner: Arc<WebPkiServerVerifier>,
    roots: Arc<RootCertStore>,
    algorithms: &'static [&'static dyn rustls::pki_types::SignatureVerificationAlgorithm],
}

impl ServerCertVerifier for CaOnlyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(&cert, &self.roots, intermediates, now, self.algorithms)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Parses the host part of a node name (`name@host`) as a TLS server name.
fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(host.to_owned()).map_err(|_| TlsError::InvalidHost(host.to_owned()))
}

/// Runs the TLS client handshake on `sock` (connected to the node on `host`, the host part of
/// its node name) and splits the connection.
///
/// `host` is sent as SNI when it is a DNS name and, with [`TlsConfig::verify_hostname`], must
/// be named by the server's certificate. Blocks until the handshake is done; a step that outlasts
/// the socket's read timeout fails with [`TlsError::Io`] of kind `TimedOut`.
pub fn connect<S: Socket>(cfg: &TlsConfig, host: &str, sock: S) -> Result<(TlsReader<S>, TlsWriter<S>), TlsError> {
    let name = server_name(host)?;
    let client = if cfg.verify_hostname { &cfg.client_strict } else { &cfg.client_ca_only };
    let conn = ClientConnection::new(Arc::clone(client), name).map_err(|e| TlsError::Config(e.to_string()))?;
    establish(Connection::Client(conn), sock)
}

/// Runs the TLS server handshake on an accepted `sock`, requiring a client certificate signed by
/// the configured CA, and splits the connection. Blocking and timeouts as in [`connect`].
pub fn accept<S: Socket>(cfg: &TlsConfig, sock: S) -> Result<(TlsReader<S>, TlsWriter<S>), TlsError> {
    let conn = ServerConnection::new(Arc::clone(&cfg.server)).map_err(|e| TlsError::Config(e.to_string()))?;
    establish(Connection::Server(conn), sock)
}

fn establish<S: Socket>(mut conn: Connection, mut sock: S) -> Result<(TlsReader<S>, TlsWriter<S>), TlsError> {
    handshake(&mut conn, &mut sock)?;
    let writer_sock = sock.try_clone()?;
    let shared = Arc::new(Shared { state: Mutex::new(State { conn, closed: false, failed: None }) });
    let reader = TlsReader { shared: Arc::clone(&shared), sock, buf: vec![0; READ_BUF], start: 0, end: 0 };
    let writer = TlsWriter { shared, sock: writer_sock, out: Vec::new() };
    Ok((reader, writer))
}

/// Drives the handshake to completion on the socket alone (no other handle exists yet).
fn handshake<S: Socket>(conn: &mut Connection, sock: &mut S) -> Result<(), TlsError> {
    loop {
        send_tls(conn, sock)?;
        if !conn.is_handshaking() {
            break;
        }
        let n = match conn.read_tls(sock) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(TlsError::Io(timeout(e))),
        };
        if n == 0 {
            return Err(TlsError::Handshake("the peer closed the connection".into()));
        }
        if let Err(e) = conn.process_new_packets() {
            // rustls has queued an alert telling the peer why; send it if the socket lets us.
            let _ = send_tls(conn, sock);
            return Err(TlsError::Handshake(e.to_string()));
        }
    }
    // Decrypt application data that arrived together with the last handshake flight, so that
    // the reader finds it as plaintext instead of waiting on the socket for more.
    if let Err(e) = conn.process_new_packets() {
        let _ = send_tls(conn, sock);
        return Err(TlsError::Handshake(e.to_string()));
    }
    Ok(())
}

/// Writes all queued TLS records to `sock` (handshake only).
fn send_tls<S: Socket>(conn: &mut Connection, sock: &mut S) -> Result<(), TlsError> {
    while conn.wants_write() {
        match conn.write_tls(sock) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(TlsError::Io(timeout(e))),
        }
    }
    sock.flush().map_err(|e| TlsError::Io(timeout(e)))
}

/// Reports an expired read or write timeout as `TimedOut` (std returns `WouldBlock` on Unix).
fn timeout(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "TLS: the socket timed out")
    } else {
        e
    }
}

/// The rustls connection shared by both halves, and what the halves learned about it.
struct State {
    conn: Connection,
    /// [`TlsWriter::close`] ran: writes fail, reads end.
    closed: bool,
    /// A fatal error (TLS protocol error or broken output stream); later writes report it.
    failed: Option<String>,
}

struct Shared {
    state: Mutex<State>,
}

impl Shared {
    /// Locks the state. A poisoned lock (a thread panicked inside rustls) fails the connection.
    fn lock(&self) -> io::Result<MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| io::Error::other("TLS connection state poisoned by a panic"))
    }

    fn check_peer_host(&self, host: &str) -> Result<(), TlsError> {
        let name = server_name(host)?;
        let cert = {
            let st = self.lock()?;
            match st.conn.peer_certificates().and_then(|c| c.first()) {
                Some(c) => c.clone(),
                None => return Err(TlsError::PeerHost("the peer presented no certificate".into())),
            }
        };
        let parsed = ParsedCertificate::try_from(&cert).map_err(|e| TlsError::PeerHost(e.to_string()))?;
        verify_server_name(&parsed, &name).map_err(|e| TlsError::PeerHost(format!("{host}: {e}")))
    }

    fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.lock().ok().and_then(|st| st.conn.protocol_version())
    }
}

/// Moves every queued TLS record into `out`.
fn drain(conn: &mut Connection, out: &mut Vec<u8>) -> io::Result<()> {
    while conn.wants_write() {
        conn.write_tls(out)?;
    }
    Ok(())
}

/// The reading half of a TLS connection: `Read` yields the peer's plaintext.
///
/// `read` returns `Ok(0)` when the peer closed the TLS session cleanly (`close_notify`) or after
/// a local [`TlsWriter::close`]; a TCP end of stream without `close_notify` is an error of kind
/// `UnexpectedEof`; a TLS protocol error is an error of kind `InvalidData` wrapping the
/// `rustls::Error`. An expired read timeout is `TimedOut` and may be retried.
pub struct TlsReader<S: Socket> {
    shared: Arc<Shared>,
    sock: S,
    /// Socket bytes not yet handed to rustls: `buf[start..end]`.
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl<S: Socket> fmt::Debug for TlsReader<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsReader").field("buffered", &self.end.saturating_sub(self.start)).finish_non_exhaustive()
    }
}

impl<S: Socket> TlsReader<S> {
    /// Checks that the peer's certificate is valid for `host` (DNS or IP subject alternative
    /// name), e.g. the host part of the node name an accepting side learned from the
    /// distribution handshake.
    pub fn check_peer_host(&self, host: &str) -> Result<(), TlsError> {
        self.shared.check_peer_host(host)
    }

    /// The negotiated TLS version.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.shared.protocol_version()
    }

    /// Whether TLS output produced while reading (e.g. an alert) waits for the writer's next
    /// `write` or `flush`. A TLS 1.3 key-update answer is not counted: rustls sends it with the
    /// next application data.
    pub fn has_pending_output(&self) -> bool {
        self.shared.lock().map(|st| st.conn.wants_write()).unwrap_or(false)
    }

    /// Under the lock: plaintext if any, else the buffered socket bytes fed to rustls.
    /// `Ok(Some(n))` is the answer for `read`; `Ok(None)` means the socket must be read.
    fn step(&mut self, out: &mut [u8]) -> io::Result<Option<usize>> {
        let mut st = self.shared.lock()?;
        loop {
            match st.conn.reader().read(out) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // Our own close shut the socket; whatever the stream says now, it ended.
                Err(_) if st.closed => return Ok(Some(0)),
                Err(e) => return Err(e),
            }
            if let Some(why) = &st.failed {
                return Err(io::Error::new(io::ErrorKind::InvalidData, why.clone()));
            }
            if st.closed {
                return Ok(Some(0));
            }
            let pending = self.buf.get(self.start..self.end).unwrap_or(&[]);
            if pending.is_empty() {
                return Ok(None);
            }
            let mut rd = pending;
            let used = st.conn.read_tls(&mut rd)?;
            if used == 0 {
                // rustls refused bytes although no plaintext is waiting: give up rather than spin.
                let why = "TLS: the record buffer is full".to_owned();
                st.failed = Some(why.clone());
                return Err(io::Error::new(io::ErrorKind::InvalidData, why));
            }
            self.start += used;
            if let Err(e) = st.conn.process_new_packets() {
                st.failed = Some(e.to_string());
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }
}

impl<S: Socket> Read for TlsReader<S> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            if let Some(n) = self.step(out)? {
                return Ok(n);
            }
            // Nothing buffered: read the socket without holding the lock.
            self.start = 0;
            self.end = 0;
            let n = match self.sock.read(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if self.shared.lock()?.closed {
                        return Ok(0);
                    }
                    return Err(timeout(e));
                }
            };
            if n == 0 {
                // End of stream: tell rustls, which then reports a clean or an unclean close.
                let mut st = self.shared.lock()?;
                st.conn.read_tls(&mut io::empty())?;
                continue;
            }
            self.end = n.min(self.buf.len());
        }
    }
}

/// The writing half of a TLS connection: `Write` encrypts and sends plaintext.
///
/// Each `write` encrypts up to rustls's send-buffer limit (64 KiB) and sends the records before
/// returning, together with any TLS output the reader left queued. `flush` sends queued output
/// only. After a fatal error or a close both still send what is queued (e.g. the alert telling
/// the peer why) and then fail with `BrokenPipe`. Dropping the writer does not close the
/// connection: call [`TlsWriter::close`]. To abort a write blocked on a peer that stopped
/// reading, shut the socket down through another handle.
pub struct TlsWriter<S: Socket> {
    shared: Arc<Shared>,
    sock: S,
    /// Records to send, filled under the lock and written without it.
    out: Vec<u8>,
}

impl<S: Socket> fmt::Debug for TlsWriter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsWriter").finish_non_exhaustive()
    }
}

impl<S: Socket> TlsWriter<S> {
    /// Sends `close_notify` (best effort: errors are ignored) and shuts the socket down in both
    /// directions, which also ends a read blocked in the [`TlsReader`] (it returns `Ok(0)`).
    /// Later writes fail with `BrokenPipe`. Idempotent.
    pub fn close(&self) {
        let mut out = Vec::new();
        if let Ok(mut st) = self.shared.lock() {
            if !st.closed {
                st.closed = true;
                st.conn.send_close_notify();
                let _ = drain(&mut st.conn, &mut out);
            }
        }
        if !out.is_empty() {
            if let Ok(mut s) = self.sock.try_clone() {
                let _ = s.write_all(&out);
                let _ = s.flush();
            }
        }
        let _ = self.sock.shutdown();
    }

    /// See [`TlsReader::check_peer_host`].
    pub fn check_peer_host(&self, host: &str) -> Result<(), TlsError> {
        self.shared.check_peer_host(host)
    }

    /// Sends `self.out`; a failure leaves a partial record on the wire, so it fails the
    /// connection for later writes.
    fn send_out(&mut self) -> io::Result<()> {
        let res = self.sock.write_all(&self.out).and_then(|()| self.sock.flush()).map_err(timeout);
        self.out.clear();
        if let Err(e) = &res {
            if let Ok(mut st) = self.shared.lock() {
                st.failed.get_or_insert_with(|| format!("TLS: sending failed: {e}"));
            }
        }
        res
    }

    /// Under the lock: the error for a failed or closed connection, queued output into `out`.
    fn check_and_drain(&mut self, st: &mut State) -> io::Result<Option<io::Error>> {
        drain(&mut st.conn, &mut self.out)?;
        if st.closed {
            return Ok(Some(io::Error::new(io::ErrorKind::BrokenPipe, "TLS connection closed")));
        }
        Ok(st.failed.as_ref().map(|why| io::Error::new(io::ErrorKind::BrokenPipe, why.clone())))
    }
}

impl<S: Socket> Write for TlsWriter<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let shared = Arc::clone(&self.shared);
        let mut st = shared.lock()?;
        if let Some(e) = self.check_and_drain(&mut st)? {
            drop(st);
            // Still deliver a queued alert, so the peer learns why.
            let _ = self.send_out();
            return Err(e);
        }
        let n = st.conn.writer().write(buf)?;
        drain(&mut st.conn, &mut self.out)?;
        drop(st);
        self.send_out()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        let shared = Arc::clone(&self.shared);
        let mut st = shared.lock()?;
        let err = self.check_and_drain(&mut st)?;
        drop(st);
        if self.out.is_empty() {
            return match err {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        self.send_out()?;
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_errors_are_reported_without_key_material() {
        let err = TlsConfig::from_pem(b"", b"", b"").unwrap_err();
        assert!(matches!(&err, TlsError::Pem(m) if m.contains("certificate chain")), "{err}");

        let bogus_cert = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let secret = b"-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n";
        // The key parses as PEM but is no key; the CA is missing: PEM error naming the CA.
        let err = TlsConfig::from_pem(bogus_cert, secret, b"").unwrap_err();
        assert!(matches!(&err, TlsError::Pem(m) if m.contains("CA")), "{err}");
        // No key section at all.
        let err = TlsConfig::from_pem(bogus_cert, bogus_cert, bogus_cert).unwrap_err();
        assert!(matches!(&err, TlsError::Pem(m) if m.contains("private key")), "{err}");
        // Broken base64 in a certificate.
        let broken = b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        let err = TlsConfig::from_pem(broken, secret, bogus_cert).unwrap_err();
        assert!(matches!(&err, TlsError::Pem(_)), "{err}");
        // Missing end marker.
        let err = TlsConfig::from_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n", secret, bogus_cert).unwrap_err();
        assert!(matches!(&err, TlsError::Pem(_)), "{err}");
        // Garbage CA certificate (valid PEM, not DER): a configuration error.
        let err = TlsConfig::from_pem(bogus_cert, secret, bogus_cert).unwrap_err();
        assert!(matches!(&err, TlsError::Config(_)), "{err}");
        assert!(!err.to_string().contains("c2VjcmV0"), "{err}");
    }

    #[test]
    fn missing_files_name_the_path() {
        let p = Path::new("/nonexistent/h-tls/cert.pem");
        let err = TlsConfig::from_pem_files(p, p, p).unwrap_err();
        assert!(matches!(&err, TlsError::Io(e) if e.kind() == io::ErrorKind::NotFound), "{err}");
        assert!(err.to_string().contains("/nonexistent/h-tls/cert.pem"), "{err}");
    }

    #[test]
    fn host_names() {
        assert!(server_name("localhost").is_ok());
        assert!(server_name("127.0.0.1").is_ok());
        assert!(server_name("::1").is_ok());
        assert!(server_name("node.example.org").is_ok());
        assert!(matches!(server_name(""), Err(TlsError::InvalidHost(_))));
        assert!(matches!(server_name("a b"), Err(TlsError::InvalidHost(_))));
        assert!(matches!(server_name("bad..name"), Err(TlsError::InvalidHost(_))));
    }

    #[test]
    fn timeouts_are_timed_out() {
        assert_eq!(timeout(io::ErrorKind::WouldBlock.into()).kind(), io::ErrorKind::TimedOut);
        assert_eq!(timeout(io::ErrorKind::TimedOut.into()).kind(), io::ErrorKind::TimedOut);
        assert_eq!(timeout(io::ErrorKind::ConnectionReset.into()).kind(), io::ErrorKind::ConnectionReset);
    }

    #[test]
    fn errors_display() {
        let e = TlsError::Io(io::Error::new(io::ErrorKind::TimedOut, "slow"));
        assert!(e.to_string().contains("slow"));
        assert!(std::error::Error::source(&e).is_some());
        assert!(TlsError::Handshake("x".into()).to_string().contains("handshake"));
        assert!(TlsError::InvalidHost("a b".into()).to_string().contains("a b"));
        assert!(TlsError::PeerHost("h".into()).to_string().contains("h"));
        assert!(TlsError::Config("c".into()).to_string().contains("configuration"));
    }
}
