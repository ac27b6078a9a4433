//! Data-plane connections: the stream types, the authentication handshake,
//! the request/response encoding, and the client's pool of idle
//! connections per owner.
//!
//! Data connections are separate from the control connections (a bulk
//! transfer never sits in front of a control message). Every connection
//! starts with the job's mutual authentication over the job token (SPAKE2
//! and key confirmation, `monarch_core::auth`, the same handshake as
//! control connections); then the client sends fixed 40-byte requests
//! `[op u8][7 pad][id u64][key u64][offset u64][len u64]` (little-endian)
//! and the owner answers `[0]` (ok) or `[1][u32 len][message]`.
//! With a TLS configuration (`monarch_core::tls`), TCP data connections run
//! inside mutual TLS like control connections (abstract Unix sockets never).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;
use std::time::Duration;

use monarch_core::auth::{self, AuthError};
use monarch_core::tls::{self, TlsStream};
use monarch_core::{Error, ErrorKind, Result};
use parking_lot::Mutex;

use crate::{identity, pacing};

pub const OP_READ: u8 = 1;
pub const OP_WRITE: u8 = 2;
pub const OP_LEASE_READ: u8 = 3;
pub const OP_LEASE_WRITE: u8 = 4;
pub const OP_RELEASE: u8 = 5;
pub const OP_DROP: u8 = 6;
/// ibverbs: set up a queue pair for this connection (see `ibverbs::qp`).
pub const OP_IB_CONNECT: u8 = 7;
/// ibverbs: lease a range and learn its address and rkey.
pub const OP_IB_LEASE_READ: u8 = 8;
pub const OP_IB_LEASE_WRITE: u8 = 9;

/// How long a peer may stall in the middle of a request or transfer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
    Tls(TlsStream),
}

impl Stream {
    /// An accepted (`server`) or opened TCP stream, inside TLS when this
    /// process has a TLS configuration.
    pub fn tcp(s: TcpStream, server: bool) -> io::Result<Stream> {
        let config = tls::global().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(match config {
            None => Stream::Tcp(s),
            Some(cfg) if server => Stream::Tls(TlsStream::server(s, &cfg)?),
            Some(cfg) => Stream::Tls(TlsStream::client(s, &cfg)?),
        })
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
            Stream::Tls(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Tcp(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

impl monarch_core::transport::SetTimeouts for Stream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        Stream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        Stream::set_write_timeout(self, t)
    }
}

impl Stream {
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Tls(s) => s.tcp().set_read_timeout(t),
        }
    }
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Tls(s) => s.tcp().set_write_timeout(t),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub op: u8,
    pub id: u64,
    pub key: u64,
    pub offset: u64,
    pub len: u64,
}

impl Request {
    pub fn encode(&self) -> [u8; 40] {
        let mut b = [0u8; 40];
        b[0] = self.op;
        b[8..16].copy_from_slice(&self.id.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.to_le_bytes());
        b[24..32].copy_from_slice(&self.offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8; 40]) -> Request {
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        Request {
            op: b[0],
            id: u(8),
            key: u(16),
            offset: u(24),
            len: u(32),
        }
    }
}

/// Write an answer: Ok or an error message.
pub fn send_status(s: &mut Stream, r: &std::result::Result<(), String>) -> io::Result<()> {
    match r {
        Ok(()) => s.write_all(&[0]),
        Err(m) => {
            let m = m.as_bytes();
            let mut b = Vec::with_capacity(5 + m.len());
            b.push(1);
            b.extend_from_slice(&(m.len() as u32).to_le_bytes());
            b.extend_from_slice(m);
            s.write_all(&b)
        }
    }
}

/// Read an answer. `Ok(Err(msg))` is a refusal by the owner.
pub fn recv_status(s: &mut Stream) -> io::Result<std::result::Result<(), String>> {
    let mut t = [0u8; 1];
    s.read_exact(&mut t)?;
    if t[0] == 0 {
        return Ok(Ok(()));
    }
    let mut n = [0u8; 4];
    s.read_exact(&mut n)?;
    let n = (u32::from_le_bytes(n) as usize).min(1 << 20);
    let mut m = vec![0u8; n];
    s.read_exact(&mut m)?;
    Ok(Err(String::from_utf8_lossy(&m).into_owned()))
}

/// Owner side of the handshake (the job's mutual authentication,
/// `monarch_core::auth`); false when the peer does not know the job token.
pub fn accept_handshake<S: Read + Write>(s: &mut S, token: &str, my_id: &str) -> bool {
    match auth::accept_handshake(s, token.as_bytes(), my_id) {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(error = %e, "dropping data-plane connection: authentication failed");
            false
        }
    }
}

/// Client side of the handshake.
pub fn client_handshake(s: &mut Stream, token: &str, my_id: &str, owner: &str) -> Result<()> {
    auth::connect_handshake(s, token.as_bytes(), my_id)
        .map(|_| ())
        .map_err(|e| match e {
            // The connection broke: the owner is gone (or going).
            AuthError::Io(e) => lost(owner, "the data-plane handshake", e),
            e => Error::new(
                ErrorKind::Io,
                format!("data-plane authentication with proc {owner} failed: {e}"),
            ),
        })
}

/// Where a data connection goes: `unix:@name` (abstract socket) or
/// `tcp:ip:port`.
fn open(target: &str) -> io::Result<Stream> {
    if let Some(name) = target.strip_prefix("unix:@") {
        use std::os::linux::net::SocketAddrExt;
        let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        let s = UnixStream::connect_addr(&a)?;
        Ok(Stream::Unix(s))
    } else if let Some(hp) = target.strip_prefix("tcp:") {
        use std::net::ToSocketAddrs;
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("no address for {hp}"));
        for a in hp.to_socket_addrs()? {
            match TcpStream::connect_timeout(&a, Duration::from_secs(10)) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    return Stream::tcp(s, false);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad data-plane address {target}"),
        ))
    }
}

fn pool() -> &'static Mutex<HashMap<String, Vec<Stream>>> {
    static P: OnceLock<Mutex<HashMap<String, Vec<Stream>>>> = OnceLock::new();
    P.get_or_init(|| Mutex::new(HashMap::new()))
}

/// An idle authenticated connection to `target`, or a new one.
pub fn get(target: &str, token: &str, owner: &str) -> Result<Stream> {
    let me = identity::my_id();
    if let Some(s) = pool().lock().get_mut(target).and_then(|v| v.pop()) {
        return Ok(s);
    }
    let mut s = open(target).map_err(|e| {
        Error::new(
            ErrorKind::ProcFailed,
            format!("cannot reach the data plane of proc {owner} (is it alive?): {e}"),
        )
    })?;
    s.set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|_| s.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| Error::io("data-plane socket", e))?;
    client_handshake(&mut s, token, &me, owner)?;
    Ok(s)
}

/// Return a healthy connection to the pool (at most a few per target).
pub fn put(target: &str, s: Stream) {
    let mut p = pool().lock();
    let v = p.entry(target.to_string()).or_default();
    if v.len() < 16 {
        v.push(s);
    }
}

/// Forget every idle connection to `target` (after it failed).
pub fn forget(target: &str) {
    pool().lock().remove(target);
}

/// The error for a connection that broke mid-operation: the owner is gone.
pub fn lost(owner: &str, what: &str, e: io::Error) -> Error {
    Error::new(
        ErrorKind::ProcFailed,
        format!("lost the data connection to proc {owner} during {what} (the owner died?): {e}"),
    )
}

/// Write all of `b`, a piece (`bulk_chunk`) per call, yielding between
/// pieces, at the copier priority (bulk data: see `pacing::bulk_chunk`).
pub fn write_bulk(s: &mut Stream, b: &[u8]) -> io::Result<()> {
    let _copier = pacing::Copier::new(b.len());
    for (i, piece) in b.chunks(pacing::bulk_chunk()).enumerate() {
        if i > 0 {
            pacing::between_chunks();
        }
        s.write_all(piece)?;
    }
    Ok(())
}

/// Fill all of `b`, a piece per call, yielding between pieces.
pub fn read_bulk(s: &mut Stream, b: &mut [u8]) -> io::Result<()> {
    let _copier = pacing::Copier::new(b.len());
    for (i, piece) in b.chunks_mut(pacing::bulk_chunk()).enumerate() {
        if i > 0 {
            pacing::between_chunks();
        }
        s.read_exact(piece)?;
    }
    Ok(())
}

/// Send `req` and read the owner's answer, mapping a refusal to an error.
pub fn request(s: &mut Stream, req: &Request, owner: &str, what: &str) -> Result<()> {
    s.write_all(&req.encode())
        .map_err(|e| lost(owner, what, e))?;
    match recv_status(s).map_err(|e| lost(owner, what, e))? {
        Ok(()) => Ok(()),
        Err(m) => Err(Error::invalid(format!(
            "proc {owner} refused the {what}: {m}"
        ))),
    }
}
