//! Mutual authentication of every connection with the job's secret.
//!
//! Before any frame is accepted, both ends prove they know the job secret
//! `K` without sending it (HMAC-SHA256 challenge–response, fresh 32-byte
//! nonces from the kernel on both sides):
//!
//! ```text
//! connector -> acceptor  MAGIC nc
//! acceptor  -> connector MAGIC na len(ida) ida HMAC(K, "monarch-acceptor"  | nc | na | ida)
//! connector -> acceptor        len(idc) idc HMAC(K, "monarch-connector" | na | nc | idc)
//! ```
//!
//! `ida`/`idc` are the two ends' proc addresses (their identities), bound
//! into the MACs. Each side checks the other's MAC in constant time and
//! drops the connection on any mismatch, bad magic, oversized field or
//! timeout; nothing the peer sent is ever dispatched. The acceptor answers
//! only after the connector's challenge, so a peer that never
//! authenticates learns nothing but a MAC over nonces it chose, which it
//! cannot use (every session's acceptor nonce is fresh).
//!
//! This authenticates peers; it does not encrypt or integrity-protect the
//! frames that follow. That is what optional TLS on TCP links is for
//! (`crate::tls`): with TLS this handshake runs inside the TLS session (a
//! TLS failure surfaces here as [`AuthError::Tls`]). See docs/hosts.md.

use std::io::{self, Read, Write};

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const MAGIC: &[u8; 8] = b"MONARCH\x01";
const NONCE: usize = 32;
const MAC: usize = 32;
const MAX_ID: usize = 4096;

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// Reading or writing the socket failed.
    #[error("i/o during handshake: {0}")]
    Io(io::Error),
    /// The TLS session under the handshake failed (see `crate::tls`).
    #[error("{0}")]
    Tls(String),
    /// The peer did not start with the monarch magic bytes.
    #[error("peer is not a monarch endpoint (bad magic)")]
    BadMagic,
    #[error(
        "peer started a TLS handshake, but TLS is not configured here \
         (set MONARCH_TLS_CERT, MONARCH_TLS_KEY and MONARCH_TLS_CA, or `monarch host --tls-*`)"
    )]
    /// The peer speaks TLS and this process has no TLS configuration.
    UnexpectedTls,
    #[error(
        "peer answered with a TLS alert: it requires TLS, which is not configured here \
         (set MONARCH_TLS_CERT, MONARCH_TLS_KEY and MONARCH_TLS_CA, or `monarch host --tls-*`)"
    )]
    /// The peer answered with a TLS alert: it requires TLS.
    PeerWantsTls,
    /// The peer's identity is not valid UTF-8 or is too long.
    #[error("peer identity too long or not UTF-8")]
    BadIdentity,
    /// The peer's MAC is wrong: it does not hold the job secret.
    #[error("peer failed the challenge (wrong or missing job secret)")]
    BadMac,
}

impl From<io::Error> for AuthError {
    fn from(e: io::Error) -> AuthError {
        match crate::tls::describe(&e) {
            Some(m) => AuthError::Tls(m),
            None => AuthError::Io(e),
        }
    }
}

/// A TLS record header: content type (0x14..=0x17), version 3.x.
fn looks_like_tls(b: &[u8]) -> bool {
    b.len() >= 2 && (0x14..=0x17).contains(&b[0]) && b[1] == 0x03
}

/// Read and check the peer's magic; TLS bytes instead (a TLS alert is
/// shorter than the magic, and the peer then hangs up) are `if_tls`.
fn read_magic<R: Read>(r: &mut R, if_tls: AuthError) -> Result<(), AuthError> {
    let mut magic = [0u8; 8];
    let mut got = 0;
    while got < magic.len() {
        match r.read(&mut magic[got..]) {
            Ok(0) if looks_like_tls(&magic[..got]) => return Err(if_tls),
            Ok(0) => return Err(AuthError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    if &magic == MAGIC {
        Ok(())
    } else if looks_like_tls(&magic) {
        Err(if_tls)
    } else {
        Err(AuthError::BadMagic)
    }
}

fn nonce() -> Result<[u8; NONCE], AuthError> {
    let mut buf = [0u8; NONCE];
    crate::random::fill(&mut buf).map_err(AuthError::Io)?;
    Ok(buf)
}

fn mac(secret: &[u8], label: &[u8], a: &[u8], b: &[u8], id: &[u8]) -> [u8; MAC] {
    let mut m = <HmacSha256 as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(label);
    m.update(a);
    m.update(b);
    m.update(&(id.len() as u32).to_le_bytes());
    m.update(id);
    m.finalize().into_bytes().into()
}

fn check(secret: &[u8], label: &[u8], a: &[u8], b: &[u8], id: &[u8], got: &[u8]) -> bool {
    let mut m = <HmacSha256 as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(label);
    m.update(a);
    m.update(b);
    m.update(&(id.len() as u32).to_le_bytes());
    m.update(id);
    m.verify_slice(got).is_ok() // constant time
}

fn read_id<R: Read>(r: &mut R) -> Result<String, AuthError> {
    let mut len = [0u8; 2];
    r.read_exact(&mut len)?;
    let len = u16::from_le_bytes(len) as usize;
    if len > MAX_ID {
        return Err(AuthError::BadIdentity);
    }
    let mut id = vec![0u8; len];
    r.read_exact(&mut id)?;
    String::from_utf8(id).map_err(|_| AuthError::BadIdentity)
}

fn put_id(out: &mut Vec<u8>, id: &str) {
    out.extend_from_slice(&(id.len() as u16).to_le_bytes());
    out.extend_from_slice(id.as_bytes());
}

/// Connector side. Returns the acceptor's identity.
pub fn connect_handshake<S: Read + Write>(
    s: &mut S,
    secret: &[u8],
    my_id: &str,
) -> Result<String, AuthError> {
    if my_id.len() > MAX_ID {
        return Err(AuthError::BadIdentity);
    }
    let nc = nonce()?;
    let mut out = Vec::with_capacity(8 + NONCE);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&nc);
    s.write_all(&out)?;
    read_magic(s, AuthError::PeerWantsTls)?;
    let mut na = [0u8; NONCE];
    s.read_exact(&mut na)?;
    let ida = read_id(s)?;
    let mut ma = [0u8; MAC];
    s.read_exact(&mut ma)?;
    if !check(secret, b"monarch-acceptor", &nc, &na, ida.as_bytes(), &ma) {
        return Err(AuthError::BadMac);
    }
    let mut out = Vec::with_capacity(2 + my_id.len() + MAC);
    put_id(&mut out, my_id);
    out.extend_from_slice(&mac(
        secret,
        b"monarch-connector",
        &na,
        &nc,
        my_id.as_bytes(),
    ));
    s.write_all(&out)?;
    Ok(ida)
}

/// Acceptor side. Returns the connector's identity. Drives an
/// [`Acceptor`] over a blocking stream.
pub fn accept_handshake<S: Read + Write>(
    s: &mut S,
    secret: &[u8],
    my_id: &str,
) -> Result<String, AuthError> {
    let mut acceptor = Acceptor::new();
    let mut input = Vec::new();
    loop {
        match acceptor.advance(secret, my_id, &input)? {
            Step::Need(total) => read_more(s, &mut input, total)?,
            Step::Reply { consumed, reply } => {
                input.drain(..consumed);
                s.write_all(&reply)?;
            }
            Step::Done { reply, peer, .. } => {
                s.write_all(&reply)?;
                return Ok(peer);
            }
        }
    }
}

/// One read of at most `total - input.len()` bytes, appended to `input`.
fn read_more<R: Read>(r: &mut R, input: &mut Vec<u8>, total: usize) -> Result<(), AuthError> {
    let have = input.len();
    input.resize(total.max(have + 1), 0);
    let got = loop {
        match r.read(&mut input[have..]) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => break other,
        }
    };
    input.truncate(have + got.as_ref().map_or(0, |n| *n));
    match got {
        Ok(0) => Err(AuthError::Io(io::ErrorKind::UnexpectedEof.into())),
        Ok(_) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The acceptor's side of the handshake as a state machine over bytes, so
/// that one thread can drive many handshakes without blocking on any
/// (`runtime::handshakes`). Feed [`Acceptor::advance`] the bytes received
/// and not yet consumed; it asks for no more than the message it waits for.
pub struct Acceptor {
    state: AcceptorState,
}

enum AcceptorState {
    /// Waiting for the connector's `MAGIC nc`.
    Challenge,
    /// Our answer is sent; waiting for the connector's proof.
    Proof { nc: [u8; NONCE], na: [u8; NONCE] },
}

/// What an [`Acceptor`] needs or does next.
#[derive(Debug)]
pub enum Step {
    /// The message waited for is incomplete: it takes this many input
    /// bytes in all (more than were given).
    Need(usize),
    /// A message was read: send the reply, then feed the rest.
    Reply {
        /// Input bytes the message took.
        consumed: usize,
        /// What to send the connector.
        reply: Vec<u8>,
    },
    /// The connector proved it holds the secret.
    Done {
        /// Input bytes the last message took; what follows is the
        /// connection's first data.
        consumed: usize,
        /// What to send the connector (may be empty) before using the
        /// connection.
        reply: Vec<u8>,
        /// The identity the connector proved.
        peer: String,
    },
}

/// Read one message from the front of `input`; None while it is incomplete.
fn parse<T>(
    input: &[u8],
    read: impl FnOnce(&mut &[u8]) -> Result<T, AuthError>,
) -> Result<Option<(T, usize)>, AuthError> {
    let mut rest = input;
    match read(&mut rest) {
        Ok(v) => Ok(Some((v, input.len() - rest.len()))),
        Err(AuthError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

impl Default for Acceptor {
    fn default() -> Acceptor {
        Acceptor::new()
    }
}

impl Acceptor {
    /// A handshake waiting for the connector's first message.
    pub fn new() -> Acceptor {
        Acceptor {
            state: AcceptorState::Challenge,
        }
    }

    /// Take the next step with `input`, the bytes received and not yet
    /// consumed. After [`Step::Done`] the handshake is over.
    pub fn advance(&mut self, secret: &[u8], my_id: &str, input: &[u8]) -> Result<Step, AuthError> {
        match &self.state {
            AcceptorState::Challenge => {
                let Some((nc, consumed)) = parse(input, |r| {
                    read_magic(r, AuthError::UnexpectedTls)?;
                    let mut nc = [0u8; NONCE];
                    r.read_exact(&mut nc)?;
                    Ok(nc)
                })?
                else {
                    return Ok(Step::Need(MAGIC.len() + NONCE));
                };
                let na = nonce()?;
                let mut out = Vec::with_capacity(8 + NONCE + 2 + my_id.len() + MAC);
                out.extend_from_slice(MAGIC);
                out.extend_from_slice(&na);
                put_id(&mut out, my_id);
                out.extend_from_slice(&mac(
                    secret,
                    b"monarch-acceptor",
                    &nc,
                    &na,
                    my_id.as_bytes(),
                ));
                self.state = AcceptorState::Proof { nc, na };
                Ok(Step::Reply {
                    consumed,
                    reply: out,
                })
            }
            AcceptorState::Proof { nc, na } => {
                let Some(((idc, mc), consumed)) = parse(input, |r| {
                    let idc = read_id(r)?;
                    let mut mc = [0u8; MAC];
                    r.read_exact(&mut mc)?;
                    Ok((idc, mc))
                })?
                else {
                    return Ok(Step::Need(match input {
                        [a, b, ..] => 2 + u16::from_le_bytes([*a, *b]) as usize + MAC,
                        _ => 2,
                    }));
                };
                if !check(secret, b"monarch-connector", na, nc, idc.as_bytes(), &mc) {
                    return Err(AuthError::BadMac);
                }
                Ok(Step::Done {
                    consumed,
                    reply: Vec::new(),
                    peer: idc,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn run(
        ks: &'static [u8],
        kc: &'static [u8],
    ) -> (Result<String, AuthError>, Result<String, AuthError>) {
        let (mut a, mut c) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            let r = accept_handshake(&mut a, ks, "unix:/acceptor");
            drop(a);
            r
        });
        let rc = connect_handshake(&mut c, kc, "tcp:1.2.3.4:5");
        drop(c);
        (t.join().unwrap(), rc)
    }

    #[test]
    fn same_secret_authenticates_both_ways() {
        let (ra, rc) = run(b"secret", b"secret");
        assert_eq!(ra.unwrap(), "tcp:1.2.3.4:5");
        assert_eq!(rc.unwrap(), "unix:/acceptor");
    }

    #[test]
    fn wrong_secret_is_refused_by_both() {
        let (ra, rc) = run(b"secret", b"guess");
        // The connector refuses the acceptor's proof first and hangs up.
        assert!(matches!(rc, Err(AuthError::BadMac)));
        assert!(ra.is_err());
    }

    /// One end with TLS, the other plain: (acceptor's error, connector's).
    fn mixed(tls_acceptor: bool) -> (AuthError, AuthError) {
        use crate::transport::Stream;
        let (ca, leaves) = crate::tls::tests::test_pki(1);
        let cfg = crate::tls::TlsConfig::from_pem(
            leaves[0].0.as_bytes(),
            leaves[0].1.as_bytes(),
            ca.as_bytes(),
        )
        .unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        let t = std::time::Duration::from_secs(20);
        a.set_read_timeout(Some(t)).unwrap();
        c.set_read_timeout(Some(t)).unwrap();
        let (mut a, mut c) = if tls_acceptor {
            (Stream::tcp(a, Some(&cfg), true).unwrap(), Stream::Tcp(c))
        } else {
            (Stream::Tcp(a), Stream::tcp(c, Some(&cfg), false).unwrap())
        };
        let th = std::thread::spawn(move || {
            let r = accept_handshake(&mut a, b"k", "acceptor");
            drop(a); // hang up, as the runtime does
            r
        });
        let rc = connect_handshake(&mut c, b"k", "connector");
        (th.join().unwrap().unwrap_err(), rc.unwrap_err())
    }

    #[test]
    fn plain_connector_meets_tls_acceptor() {
        let (ea, ec) = mixed(true);
        assert!(
            matches!(&ea, AuthError::Tls(m) if m.contains("does not speak TLS")),
            "{ea}"
        );
        assert!(matches!(ec, AuthError::PeerWantsTls), "{ec}");
    }

    #[test]
    fn tls_connector_meets_plain_acceptor() {
        let (ea, ec) = mixed(false);
        assert!(matches!(ea, AuthError::UnexpectedTls), "{ea}");
        assert!(
            matches!(&ec, AuthError::Tls(m) if m.contains("handshake")),
            "{ec}"
        );
    }

    #[test]
    fn garbage_is_bad_magic() {
        let (mut a, mut c) = UnixStream::pair().unwrap();
        c.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert!(matches!(
            accept_handshake(&mut a, b"k", "x"),
            Err(AuthError::BadMagic)
        ));
    }

    #[test]
    fn secret_never_appears_on_the_wire() {
        let (mut a, mut c) = UnixStream::pair().unwrap();
        let secret: &'static [u8] = b"a-very-recognizable-secret";
        let t = std::thread::spawn(move || {
            let mut seen = Vec::new();
            // Record what the acceptor sends by running it on a pipe pair.
            let r = accept_handshake(&mut a, secret, "id");
            let _ = a.read_to_end(&mut seen);
            r
        });
        let mut wire = Vec::new();
        {
            // A recording wrapper around the connector's stream.
            struct Rec<'a>(&'a mut UnixStream, &'a mut Vec<u8>);
            impl Read for Rec<'_> {
                fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                    let n = self.0.read(b)?;
                    self.1.extend_from_slice(&b[..n]);
                    Ok(n)
                }
            }
            impl Write for Rec<'_> {
                fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                    self.1.extend_from_slice(b);
                    self.0.write(b)
                }
                fn flush(&mut self) -> io::Result<()> {
                    Ok(())
                }
            }
            connect_handshake(&mut Rec(&mut c, &mut wire), secret, "me").unwrap();
        }
        drop(c);
        t.join().unwrap().unwrap();
        assert!(!wire.windows(secret.len()).any(|w| w == secret));
    }
}
