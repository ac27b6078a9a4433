//! Optional TLS 1.3 on TCP links (rustls with the `ring` provider).
//!
//! Enabled for a process by three PEM files named in its environment:
//! `MONARCH_TLS_CERT` (this process's certificate chain), `MONARCH_TLS_KEY`
//! (its private key) and `MONARCH_TLS_CA` (the CA certificates every peer's
//! chain must lead to). All three or none; `monarch host --tls-cert/
//! --tls-key/--tls-ca` sets them for the agent and the procs it starts.
//! When set, every TCP connection this process opens or accepts (control
//! connections and data-plane connections) runs mutual TLS: both ends
//! present a certificate and verify the other's against the CA. Peers are
//! addressed by IP, so a certificate's names are not checked: holding a
//! certificate from the job's CA is what admits a peer (see
//! docs/hosts.md). Unix-socket links never use TLS. The job-secret
//! handshake (`crate::auth`) still runs, inside TLS.
//!
//! A [`TlsStream`] is a TCP socket plus one shared rustls connection; its
//! clones (a connection's reader and writer halves) share that state
//! behind a mutex held only while encrypting, decrypting or handing
//! ciphertext to the kernel, never while waiting for the socket. Blocking
//! `Read`/`Write` serve handshakes and the data plane; the non-blocking
//! halves used by `conn.rs` are [`TlsStream::recv_plain`],
//! [`TlsStream::send_plain`] and [`TlsStream::flush_tls`].

use parking_lot::{Mutex, MutexGuard};
use std::io::{self, BufRead, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, ClientConfig, ClientConnection, Connection, DigitallySignedStruct,
    RootCertStore, ServerConfig, ServerConnection, SignatureScheme,
};

use crate::error::{Error, Result};
use crate::frame::FrameError;

/// PEM file: this process's certificate (chain, leaf first).
pub const ENV_TLS_CERT: &str = "MONARCH_TLS_CERT";
/// PEM file: the private key of that certificate.
pub const ENV_TLS_KEY: &str = "MONARCH_TLS_KEY";
/// PEM file: the CA certificate(s) peers' certificates must chain to.
pub const ENV_TLS_CA: &str = "MONARCH_TLS_CA";

/// Ciphertext read from the socket per system call.
const RAW_CHUNK: usize = 64 * 1024;
/// Plaintext handed to rustls per encryption step (bounds the ciphertext
/// buffered before it is written to the socket).
const SEND_CHUNK: usize = 256 * 1024;

/// Client and server configurations built from one certificate, key and CA.
pub struct TlsConfig {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConfig")
    }
}

fn bad(what: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid(format!("TLS configuration: {what}: {e}"))
}

impl TlsConfig {
    /// Build from PEM files (see the module docs).
    pub fn from_files(cert: &Path, key: &Path, ca: &Path) -> Result<TlsConfig> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| bad(&format!("cannot read {}", p.display()), e))
        };
        TlsConfig::from_pem(&read(cert)?, &read(key)?, &read(ca)?)
    }

    /// Build from PEM text: certificate chain, private key, CA certificates.
    pub fn from_pem(cert: &[u8], key: &[u8], ca: &[u8]) -> Result<TlsConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad("certificate", e))?;
        if certs.is_empty() {
            return Err(bad("certificate", "no CERTIFICATE block in the PEM"));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| bad("private key", e))?;
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca) {
            let c = c.map_err(|e| bad("CA certificate", e))?;
            roots.add(c).map_err(|e| bad("CA certificate", e))?;
        }
        if roots.is_empty() {
            return Err(bad("CA certificate", "no CERTIFICATE block in the PEM"));
        }
        let roots = Arc::new(roots);
        let tls13 = &[&rustls::version::TLS13];

        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                .build()
                .map_err(|e| bad("CA", e))?;
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(tls13)
            .map_err(|e| bad("protocol", e))?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| bad("certificate and key", e))?;
        // No session tickets: nothing is written after the handshake except
        // our own records (and resumption is not used).
        server.send_tls13_tickets = 0;

        let server_verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| bad("CA", e))?;
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(tls13)
            .map_err(|e| bad("protocol", e))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CaOnly(server_verifier)))
            .with_client_auth_cert(certs, key)
            .map_err(|e| bad("certificate and key", e))?;
        client.resumption = rustls::client::Resumption::disabled();
        Ok(TlsConfig {
            client: Arc::new(client),
            server: Arc::new(server),
        })
    }
}

/// Server certificates are verified against the CA (chain, validity,
/// usage) like any webpki client does, except for the name: peers are
/// reached by IP addresses that certificates need not list.
#[derive(Debug)]
struct CaOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for CaOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain to the CA first and the name last, so a
        // name mismatch means everything else verified.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

type EnvKey = [Option<String>; 3];

/// This process's TLS configuration from its environment (None: TLS is
/// off). Reloaded when the variables change, so a program may set them
/// before its first runtime. An error names what is wrong.
pub fn global() -> Result<Option<Arc<TlsConfig>>> {
    type Cached = (EnvKey, std::result::Result<Option<Arc<TlsConfig>>, Error>);
    static CACHE: Mutex<Option<Cached>> = Mutex::new(None);
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let key: EnvKey = [var(ENV_TLS_CERT), var(ENV_TLS_KEY), var(ENV_TLS_CA)];
    let mut cache = CACHE.lock();
    if let Some((k, r)) = cache.as_ref() {
        if *k == key {
            return r.clone();
        }
    }
    let r = match &key {
        [None, None, None] => Ok(None),
        [Some(c), Some(k), Some(a)] => {
            TlsConfig::from_files(Path::new(c), Path::new(k), Path::new(a)).map(|c| Some(Arc::new(c)))
        }
        _ => Err(Error::invalid(format!(
            "TLS configuration: {ENV_TLS_CERT}, {ENV_TLS_KEY} and {ENV_TLS_CA} must be set together \
             (missing: {})",
            [ENV_TLS_CERT, ENV_TLS_KEY, ENV_TLS_CA]
                .iter()
                .zip(&key)
                .filter(|(_, v)| v.is_none())
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    };
    *cache = Some((key, r.clone()));
    r
}

/// A TLS failure carried inside an `io::Error` (kind `InvalidData`).
#[derive(Debug)]
pub(crate) struct TlsFailure(pub String);

impl std::fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsFailure {}

fn failure(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, TlsFailure(msg))
}

/// Turn an error of rustls (or one it wrapped in an `io::Error`) into a
/// `TlsFailure` with a hint at the usual cause.
fn explain(e: &rustls::Error, handshaking: bool) -> io::Error {
    use rustls::Error as E;
    let hint = match e {
        E::InvalidMessage(_) | E::InappropriateMessage { .. } if handshaking => {
            " (the peer does not speak TLS: is it configured with MONARCH_TLS_*?)"
        }
        E::InvalidCertificate(_) => {
            " (the peer's certificate is not signed by our CA, or has expired)"
        }
        E::AlertReceived(_) if handshaking => {
            " (the peer refused the handshake: is our certificate signed by its CA?)"
        }
        E::AlertReceived(_) => " (the peer refused our certificate or closed the session)",
        E::NoCertificatesPresented => " (the peer presented no certificate)",
        _ => "",
    };
    failure(format!("TLS: {e}{hint}"))
}

fn rewrap(e: io::Error, handshaking: bool) -> io::Error {
    if let Some(r) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return explain(r, handshaking);
    }
    if handshaking
        && matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
        )
    {
        return failure(
            "TLS: the peer closed the connection during the TLS handshake (is it configured \
             for TLS? does it accept our certificate?)"
                .into(),
        );
    }
    e
}

/// The TLS description of `e`, when `e` is a TLS failure.
pub fn describe(e: &io::Error) -> Option<String> {
    let inner = e.get_ref()?;
    if let Some(f) = inner.downcast_ref::<TlsFailure>() {
        return Some(f.0.clone());
    }
    inner
        .downcast_ref::<rustls::Error>()
        .map(|r| format!("TLS: {r}"))
}

struct State {
    conn: Connection,
    /// Ciphertext read from the socket and not yet handed to rustls.
    raw: Vec<u8>,
    raw_pos: usize,
    /// The last socket read filled `raw` (more may be waiting).
    raw_full: bool,
}

/// A TCP socket carrying one TLS session (see the module docs).
pub struct TlsStream {
    tcp: TcpStream,
    st: Arc<Mutex<State>>,
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsStream({:?})", self.tcp)
    }
}

/// Writes to a socket with `MSG_NOSIGNAL` (see `socket::send_vectored`).
struct Sock(RawFd);

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        crate::socket::send_vectored(self.0, &[io::IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        crate::socket::send_vectored(self.0, bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: reads at most buf.len() bytes into buf.
            let n =
                unsafe { libc::recv(self.0, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl TlsStream {
    /// Start a client session on a connected socket (the handshake runs on
    /// first use).
    pub fn client(tcp: TcpStream, cfg: &TlsConfig) -> io::Result<TlsStream> {
        let ip = tcp.peer_addr()?.ip();
        let conn = ClientConnection::new(cfg.client.clone(), ServerName::IpAddress(ip.into()))
            .map_err(|e| explain(&e, true))?;
        Ok(TlsStream::wrap(tcp, conn.into()))
    }

    /// Start a server session on an accepted socket (the handshake runs on
    /// first use).
    pub fn server(tcp: TcpStream, cfg: &TlsConfig) -> io::Result<TlsStream> {
        let conn = ServerConnection::new(cfg.server.clone()).map_err(|e| explain(&e, true))?;
        Ok(TlsStream::wrap(tcp, conn.into()))
    }

    fn wrap(tcp: TcpStream, mut conn: Connection) -> TlsStream {
        // We bound what we hand to rustls ourselves (SEND_CHUNK).
        conn.set_buffer_limit(None);
        TlsStream {
            tcp,
            st: Arc::new(Mutex::new(State {
                conn,
                raw: Vec::new(),
                raw_pos: 0,
                raw_full: false,
            })),
        }
    }

    /// The TCP socket under the TLS session.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Another handle on the same socket and session.
    pub fn try_clone(&self) -> io::Result<TlsStream> {
        Ok(TlsStream {
            tcp: self.tcp.try_clone()?,
            st: self.st.clone(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock()
    }

    /// Run the handshake to its end on a blocking socket.
    fn handshake(&self, st: &mut State) -> io::Result<()> {
        let mut sock = Sock(self.tcp.as_raw_fd());
        while st.conn.is_handshaking() {
            st.conn
                .complete_io(&mut sock)
                .map_err(|e| rewrap(e, true))?;
        }
        Ok(())
    }

    /// Hand buffered ciphertext to rustls and decrypt it. Returns whether
    /// there was any.
    fn feed(st: &mut State) -> io::Result<bool> {
        if st.raw_pos >= st.raw.len() {
            return Ok(false);
        }
        let State {
            conn, raw, raw_pos, ..
        } = st;
        let mut rest = &raw[*raw_pos..];
        let n = conn.read_tls(&mut rest)?;
        *raw_pos += n;
        let handshaking = conn.is_handshaking();
        conn.process_new_packets()
            .map_err(|e| explain(&e, handshaking))?;
        Ok(true)
    }

    /// One read of ciphertext from the socket into `raw` (which must be
    /// used up). Ok(None): would block; Ok(Some(0)): end of stream.
    fn fill_raw(&self, st: &mut State) -> io::Result<Option<usize>> {
        st.raw.clear();
        st.raw_pos = 0;
        st.raw.reserve(RAW_CHUNK);
        let n = loop {
            // SAFETY: reads at most RAW_CHUNK bytes into the vector's spare
            // capacity (reserved above); the length is set to what was read.
            let n = unsafe {
                libc::recv(
                    self.tcp.as_raw_fd(),
                    st.raw.as_mut_ptr() as *mut libc::c_void,
                    RAW_CHUNK,
                    0,
                )
            };
            if n >= 0 {
                // SAFETY: the kernel initialized n bytes.
                unsafe { st.raw.set_len(n as usize) };
                break n as usize;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => return Ok(None),
                _ => return Err(e),
            }
        };
        st.raw_full = n == RAW_CHUNK;
        if n == 0 {
            // Let rustls know, so its reader reports a clean or unclean end.
            let _ = st.conn.read_tls(&mut io::empty());
        }
        Ok(Some(n))
    }

    /// Whether the session holds data read from the socket and not yet
    /// taken: decrypted plaintext, or ciphertext not yet decrypted. A
    /// handshake's last read can take the peer's first frames with it,
    /// and no `poll` on the socket reports those.
    pub(crate) fn holds_data(&self) -> bool {
        let mut st = self.lock();
        if st.raw_pos < st.raw.len() {
            return true;
        }
        matches!(st.conn.reader().fill_buf(), Ok(chunk) if !chunk.is_empty())
    }

    /// Non-blocking: decrypt what has arrived, appending up to `room`
    /// plaintext bytes to `dst` (within its spare capacity). Returns the
    /// bytes appended and whether more may be ready at once.
    pub(crate) fn recv_plain(
        &self,
        dst: &mut Vec<u8>,
        room: usize,
    ) -> std::result::Result<(usize, bool), FrameError> {
        let room = room.min(dst.capacity() - dst.len());
        let mut st = self.lock();
        let mut got = 0;
        loop {
            while got < room {
                let mut r = st.conn.reader();
                let n = match r.fill_buf() {
                    Ok(chunk) if !chunk.is_empty() => {
                        let n = chunk.len().min(room - got);
                        dst.extend_from_slice(&chunk[..n]);
                        n
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // Ok(empty): the peer ended the session cleanly;
                    // UnexpectedEof: the socket ended without that.
                    Ok(_) => {
                        return if got > 0 {
                            Ok((got, true))
                        } else {
                            Err(FrameError::Closed)
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        return if got > 0 {
                            Ok((got, true))
                        } else {
                            Err(FrameError::Closed)
                        };
                    }
                    Err(e) => return Err(e.into()),
                };
                r.consume(n);
                got += n;
            }
            if got == room {
                return Ok((got, true));
            }
            if Self::feed(&mut st)? {
                continue;
            }
            if got > 0 {
                // Everything read so far is handed out; a full socket read
                // means more may be waiting.
                return Ok((got, st.raw_full));
            }
            match self.fill_raw(&mut st)? {
                None => return Ok((0, false)),
                Some(0) => continue, // the reader reports the end
                Some(_) => {}
            }
        }
    }

    /// Encrypt `bufs` (at most `SEND_CHUNK` bytes of them) and write the
    /// ciphertext, waiting for socket space as needed (the session is not
    /// locked while waiting). Returns the plaintext bytes taken.
    pub(crate) fn send_plain(
        &self,
        bufs: &[io::IoSlice<'_>],
        nonblocking: bool,
    ) -> io::Result<usize> {
        let mut take: Vec<io::IoSlice<'_>> = Vec::with_capacity(bufs.len());
        let mut total = 0;
        for b in bufs {
            if total >= SEND_CHUNK {
                break;
            }
            let n = b.len().min(SEND_CHUNK - total);
            take.push(io::IoSlice::new(&b[..n]));
            total += n;
        }
        let n = {
            let mut st = self.lock();
            if st.conn.is_handshaking() {
                self.handshake(&mut st)?;
            }
            st.conn.writer().write_vectored(&take)?
        };
        self.send_all(nonblocking)?;
        Ok(n)
    }

    /// Write all queued ciphertext (waiting with poll on a non-blocking
    /// socket; a blocking one times out as its write timeout says).
    fn send_all(&self, nonblocking: bool) -> io::Result<()> {
        let fd = self.tcp.as_raw_fd();
        loop {
            let r = {
                let mut st = self.lock();
                if !st.conn.wants_write() {
                    return Ok(());
                }
                st.conn.write_tls(&mut Sock(fd))
            };
            match r {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && nonblocking => {
                    crate::socket::wait_fd(fd, libc::POLLOUT)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Non-blocking: write queued ciphertext as far as the socket takes
    /// it; once none is queued, encrypt `plain` (may be empty) and write
    /// that too. Returns (whether `plain` was taken, whether anything is
    /// still waiting: ciphertext, or `plain` if not taken). Plaintext is
    /// encrypted only when the queue is empty, so at most one batch of
    /// ciphertext waits here and callers keep their back-pressure.
    pub(crate) fn flush_tls(&self, plain: &[u8]) -> io::Result<(bool, bool)> {
        let fd = self.tcp.as_raw_fd();
        let mut st = self.lock();
        let mut taken = plain.is_empty();
        loop {
            while st.conn.wants_write() {
                match st.conn.write_tls(&mut Sock(fd)) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok((taken, true)),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if taken {
                return Ok((true, false));
            }
            st.conn.writer().write_all(plain)?;
            taken = true;
        }
    }
}

impl AsRawFd for TlsStream {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp.as_raw_fd()
    }
}

/// Blocking reads (handshakes, the data plane): the socket must be in
/// blocking mode; its read timeout applies.
impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut st = self.lock();
        if st.conn.is_handshaking() {
            self.handshake(&mut st)?;
        }
        loop {
            match st.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if Self::feed(&mut st)? {
                continue;
            }
            match self.fill_raw(&mut st)? {
                Some(_) => {}
                None => return Err(io::ErrorKind::WouldBlock.into()),
            }
        }
    }
}

/// Blocking writes (handshakes, the data plane): the socket must be in
/// blocking mode; its write timeout applies.
impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send_plain(&[io::IoSlice::new(buf)], false)
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.send_plain(bufs, false)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.send_all(false)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A CA and `n` leaf certificates signed by it: (ca_pem, [(cert, key)]).
    pub(crate) fn test_pki(n: usize) -> (String, Vec<(String, String)>) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "monarch test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaves = (0..n)
            .map(|i| {
                let key = rcgen::KeyPair::generate().unwrap();
                let params = rcgen::CertificateParams::new(vec![format!("proc{i}")]).unwrap();
                let cert = params.signed_by(&key, &issuer).unwrap();
                (cert.pem(), key.serialize_pem())
            })
            .collect();
        (ca.pem(), leaves)
    }

    fn config(ca: &str, leaf: &(String, String)) -> TlsConfig {
        TlsConfig::from_pem(leaf.0.as_bytes(), leaf.1.as_bytes(), ca.as_bytes()).unwrap()
    }

    fn pair(server: &TlsConfig, client: &TlsConfig) -> (TlsStream, TlsStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        for t in [&c, &s] {
            t.set_read_timeout(Some(std::time::Duration::from_secs(20)))
                .unwrap();
        }
        (
            TlsStream::server(s, server).unwrap(),
            TlsStream::client(c, client).unwrap(),
        )
    }

    #[test]
    fn mutual_tls_carries_bytes_both_ways() {
        let (ca, leaves) = test_pki(2);
        let (mut s, mut c) = pair(&config(&ca, &leaves[0]), &config(&ca, &leaves[1]));
        let big: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
        let expect = big.clone();
        let t = std::thread::spawn(move || {
            let mut got = vec![0u8; expect.len()];
            s.read_exact(&mut got).unwrap();
            assert!(got == expect);
            s.write_all(b"done").unwrap();
        });
        c.write_all(&big).unwrap();
        let mut done = [0u8; 4];
        c.read_exact(&mut done).unwrap();
        assert_eq!(&done, b"done");
        t.join().unwrap();
    }

    #[test]
    fn a_certificate_from_another_ca_is_refused_by_both_sides() {
        let (ca, leaves) = test_pki(1);
        let (other_ca, other) = test_pki(1);
        // Client with a foreign certificate (and trusting only its own CA).
        let (mut s, mut c) = pair(&config(&ca, &leaves[0]), &config(&other_ca, &other[0]));
        let t = std::thread::spawn(move || {
            let mut b = [0u8; 1];
            s.read(&mut b).unwrap_err()
        });
        let ec = c
            .write_all(b"x")
            .and_then(|_| c.read(&mut [0u8; 1]).map(|_| ()));
        let es = t.join().unwrap();
        let es = describe(&es).expect("server error is a TLS error");
        assert!(es.contains("certificate"), "{es}");
        let ec = describe(&ec.unwrap_err()).expect("client error is a TLS error");
        assert!(ec.contains("TLS"), "{ec}");
    }

    #[test]
    fn plain_bytes_to_a_tls_server_fail_the_handshake() {
        let (ca, leaves) = test_pki(1);
        let cfg = config(&ca, &leaves[0]);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let mut s = TlsStream::server(s, &cfg).unwrap();
        c.write_all(b"MONARCH\x01 plain handshake bytes .........")
            .unwrap();
        let e = s.read(&mut [0u8; 8]).unwrap_err();
        let d = describe(&e).expect("a TLS error");
        assert!(d.contains("does not speak TLS"), "{d}");
    }

    #[test]
    fn configuration_errors_name_the_problem() {
        let (ca, leaves) = test_pki(1);
        let e = TlsConfig::from_pem(b"junk", leaves[0].1.as_bytes(), ca.as_bytes()).unwrap_err();
        assert!(e.message.contains("certificate"), "{e}");
        let e = TlsConfig::from_pem(leaves[0].0.as_bytes(), b"", ca.as_bytes()).unwrap_err();
        assert!(e.message.contains("private key"), "{e}");
        let e = TlsConfig::from_files(
            Path::new("/nonexistent/c.pem"),
            Path::new("k"),
            Path::new("a"),
        )
        .unwrap_err();
        assert!(e.message.contains("/nonexistent/c.pem"), "{e}");
    }
}
