//! Mutual authentication of every connection with the job's secret.
//!
//! Before any frame is accepted, both ends prove they hold the job secret
//! `K` with a password-authenticated key exchange (SPAKE2 over Ed25519,
//! the `spake2` crate) followed by key confirmation in both directions:
//!
//! ```text
//! 1 connector -> acceptor  MAGIC  A = SPAKE2-A(K)  len(idc) idc
//! 2 acceptor  -> connector MAGIC  B = SPAKE2-B(K)  len(ida) ida
//! 3 connector -> acceptor  HMAC(kc, T)
//! 4 acceptor  -> connector ACCEPTED HMAC(ka, T)   or REFUSED, then close
//! ```
//!
//! `k` is the SPAKE2 key (from both messages, `K`, and each side's fresh
//! ephemeral scalar), `kc`/`ka` are keys derived from `k` for each
//! direction, and `T` is the SHA-256 of messages 1 and 2, which binds the
//! two ends' proc addresses (their identities) into both proofs.
//!
//! Why a transcript gives nothing to guess against: `A` and `B` are group
//! elements blinded by a uniformly random scalar, so they are distributed
//! the same whatever `K` is; the proofs are MACs under `k`, which needs
//! one side's ephemeral scalar besides `K` (a Diffie-Hellman problem). A
//! passive eavesdropper cannot test candidate secrets offline. An active
//! attacker gets one guess per connection: its proof (message 3) commits
//! to one candidate, and the acceptor answers with its own proof only
//! after that one verified; a failed proof gets `REFUSED` and the
//! connection is closed. Weak secrets are still refused at the entry
//! points (see `crate::secret`), since online guessing remains possible.
//!
//! Each side checks the other's proof in constant time and drops the
//! connection on any mismatch, bad magic, invalid group element, oversized
//! field or timeout; nothing the peer sent is ever dispatched. The
//! connector waits two round trips, the acceptor one; the two ends' curve
//! arithmetic overlaps (about four scalar multiplications on the path).
//!
//! This authenticates peers; it does not encrypt or integrity-protect the
//! frames that follow. That is what optional TLS on TCP links is for
//! (`crate::tls`): with TLS this handshake runs inside the TLS session (a
//! TLS failure surfaces here as [`AuthError::Tls`]). See docs/security.md.
//!
//! The interface: [`connect_handshake`] and [`accept_handshake`], blocking
//! functions over a byte stream, and [`Acceptor`], the acceptor's side as a
//! state machine over bytes for a scheduler that reads without blocking
//! (`accept_handshake` drives one; so can a poller). Whoever schedules them
//! owns the deadlines.

use std::io::{self, Read, Write};

use hmac::{Hmac, Mac};
use rand_core::{CryptoRng, RngCore};
use sha2::{Digest, Sha256};
use spake2::{Ed25519Group, Identity, Password, Spake2};

type HmacSha256 = Hmac<Sha256>;

/// The protocol's magic bytes (the last one is its version).
pub const MAGIC: &[u8; 8] = b"MONARCH\x02";
/// Length of a SPAKE2 message: a side byte and a compressed point.
pub const PAKE_MSG: usize = 33;
/// Length of a key-confirmation tag.
pub const TAG: usize = 32;
/// The acceptor's status byte before its tag: the connector's proof verified.
pub const ACCEPTED: u8 = 1;
/// The acceptor's status byte when the connector's proof failed.
pub const REFUSED: u8 = 0;
const MAX_ID: usize = 4096;

/// The connector's SPAKE2 identity (side A). The proc addresses are bound
/// through `T` instead, since the connector learns the acceptor's only in
/// message 2.
pub const ROLE_CONNECTOR: &[u8] = b"monarch-connector";
/// The acceptor's SPAKE2 identity (side B).
pub const ROLE_ACCEPTOR: &[u8] = b"monarch-acceptor";

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
    #[error("peer is not a monarch endpoint of this version (bad magic)")]
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
    /// The peer's key-exchange message is not a valid SPAKE2 message.
    #[error("peer sent an invalid key-exchange message ({0})")]
    BadKeyExchange(String),
    /// The peer's proof is wrong: it does not hold the job secret.
    #[error("peer failed the challenge (wrong or missing job secret)")]
    BadMac,
    /// The acceptor refused our proof: it holds another job secret.
    #[error("peer refused our proof: it holds a different job secret")]
    Refused,
    /// No random bytes from the kernel.
    #[error("no random bytes from the kernel: {0}")]
    Random(io::Error),
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

/// Kernel randomness handed to SPAKE2 (which draws its ephemeral scalar
/// from an RNG that cannot report failure): 64 bytes fetched up front,
/// so a failing kernel source is an error here, never a panic or a
/// guessable scalar. Longer draws extend the seed with SHA-256.
struct KernelSeed {
    seed: [u8; 64],
    pos: usize,
    block: u64,
}

impl KernelSeed {
    fn new() -> Result<KernelSeed, AuthError> {
        let mut seed = [0u8; 64];
        crate::random::fill(&mut seed).map_err(AuthError::Random)?;
        Ok(KernelSeed {
            seed,
            pos: 0,
            block: 0,
        })
    }
}

impl RngCore for KernelSeed {
    fn next_u32(&mut self) -> u32 {
        rand_core::impls::next_u32_via_fill(self)
    }
    fn next_u64(&mut self) -> u64 {
        rand_core::impls::next_u64_via_fill(self)
    }
    fn fill_bytes(&mut self, out: &mut [u8]) {
        for b in out {
            if self.pos == self.seed.len() {
                let mut h = Sha256::new();
                h.update(self.seed);
                h.update(self.block.to_le_bytes());
                self.block += 1;
                let d = h.finalize();
                self.seed[..32].copy_from_slice(&d);
                self.seed[32..].copy_from_slice(&Sha256::digest(d));
                self.pos = 0;
            }
            *b = self.seed[self.pos];
            self.pos += 1;
        }
    }
    fn try_fill_bytes(&mut self, out: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(out);
        Ok(())
    }
}

impl CryptoRng for KernelSeed {}

fn start(secret: &[u8], connector: bool) -> Result<(Spake2<Ed25519Group>, Vec<u8>), AuthError> {
    let pw = Password::new(secret);
    let (c, a) = (Identity::new(ROLE_CONNECTOR), Identity::new(ROLE_ACCEPTOR));
    let rng = KernelSeed::new()?;
    Ok(if connector {
        Spake2::start_a_with_rng(&pw, &c, &a, rng)
    } else {
        Spake2::start_b_with_rng(&pw, &c, &a, rng)
    })
}

/// The two directions' confirmation keys, from the SPAKE2 key.
struct Keys {
    connector: [u8; 32],
    acceptor: [u8; 32],
}

fn derive(k: &[u8], label: &[u8]) -> [u8; 32] {
    let mut m = <HmacSha256 as Mac>::new_from_slice(k).expect("HMAC takes any key length");
    m.update(label);
    m.finalize().into_bytes().into()
}

impl Keys {
    fn from_spake2(k: &[u8]) -> Keys {
        Keys {
            connector: derive(k, b"monarch confirm connector"),
            acceptor: derive(k, b"monarch confirm acceptor"),
        }
    }
}

fn keys(pake: Spake2<Ed25519Group>, peer_msg: &[u8]) -> Result<Keys, AuthError> {
    let k = pake
        .finish(peer_msg)
        .map_err(|e| AuthError::BadKeyExchange(e.to_string()))?;
    Ok(Keys::from_spake2(&k))
}

/// The two proofs (connector's, acceptor's) of a session whose SPAKE2 key
/// is `spake2_key` and whose hellos were `hello_c` and `hello_a` (both
/// from their magic on). What an attacker must compute to test a guess;
/// public so tests can show that it cannot.
pub fn proofs(spake2_key: &[u8], hello_c: &[u8], hello_a: &[u8]) -> ([u8; TAG], [u8; TAG]) {
    let k = Keys::from_spake2(spake2_key);
    let t = transcript(hello_c, hello_a);
    (tag(&k.connector, &t), tag(&k.acceptor, &t))
}

fn tag(key: &[u8; 32], transcript: &[u8; 32]) -> [u8; TAG] {
    let mut m = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(transcript);
    m.finalize().into_bytes().into()
}

fn tag_ok(key: &[u8; 32], transcript: &[u8; 32], got: &[u8]) -> bool {
    let mut m = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(transcript);
    m.verify_slice(got).is_ok() // constant time
}

/// Messages 1 and 2 as sent: MAGIC, the SPAKE2 message, the identity.
fn hello(pake_msg: &[u8], id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + PAKE_MSG + 2 + id.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(pake_msg);
    out.extend_from_slice(&(id.len() as u16).to_le_bytes());
    out.extend_from_slice(id.as_bytes());
    out
}

/// Read the rest of a peer's hello after its magic; returns the message
/// as the peer sent it (for the transcript), its SPAKE2 part and identity.
fn read_hello<R: Read>(r: &mut R) -> Result<(Vec<u8>, [u8; PAKE_MSG], String), AuthError> {
    let mut pake_msg = [0u8; PAKE_MSG];
    r.read_exact(&mut pake_msg)?;
    let mut len = [0u8; 2];
    r.read_exact(&mut len)?;
    let len = u16::from_le_bytes(len) as usize;
    if len > MAX_ID {
        return Err(AuthError::BadIdentity);
    }
    let mut id = vec![0u8; len];
    r.read_exact(&mut id)?;
    let id = String::from_utf8(id).map_err(|_| AuthError::BadIdentity)?;
    Ok((hello(&pake_msg, &id), pake_msg, id))
}

fn transcript(m1: &[u8], m2: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((m1.len() as u32).to_le_bytes());
    h.update(m1);
    h.update(m2);
    h.finalize().into()
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
    let (pake, pake_msg) = start(secret, true)?;
    let m1 = hello(&pake_msg, my_id);
    s.write_all(&m1)?;
    read_magic(s, AuthError::PeerWantsTls)?;
    let (m2, peer_msg, ida) = read_hello(s)?;
    let keys = keys(pake, &peer_msg)?;
    let t = transcript(&m1, &m2);
    s.write_all(&tag(&keys.connector, &t))?;
    let mut status = [0u8; 1];
    match s.read_exact(&mut status) {
        Ok(()) => {}
        // Acceptors answer a wrong proof with REFUSED, so a hang-up here is
        // a lost connection (the acceptor stopped), not a refusal.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(AuthError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection before answering our proof",
            )))
        }
        Err(e) => return Err(e.into()),
    }
    if status[0] != ACCEPTED {
        return Err(AuthError::Refused);
    }
    let mut ta = [0u8; TAG];
    s.read_exact(&mut ta)?;
    if !tag_ok(&keys.acceptor, &t, &ta) {
        return Err(AuthError::BadMac);
    }
    Ok(ida)
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
        /// What to send the connector (`ACCEPTED` and our proof) before
        /// using the connection.
        reply: Vec<u8>,
        /// The identity the connector proved.
        peer: String,
    },
}

/// Magic, SPAKE2 message and identity length: the fixed part of a hello.
const HELLO_HEAD: usize = MAGIC.len() + PAKE_MSG + 2;

enum AcceptorState {
    /// Nothing done yet.
    Start,
    /// Our SPAKE2 message is made; waiting for the connector's hello.
    Hello(Spake2<Ed25519Group>, Vec<u8>),
    /// Our hello is out; the key exchange is finished at the next step.
    Exchange {
        pake: Spake2<Ed25519Group>,
        peer_msg: [u8; PAKE_MSG],
        transcript: [u8; 32],
        peer: String,
    },
    /// Waiting for the connector's proof.
    Proof {
        keys: Keys,
        transcript: [u8; 32],
        peer: String,
    },
    /// Accepted or refused.
    Over,
}

/// The acceptor's side of the handshake as a state machine over bytes, so
/// that one thread can drive many handshakes without blocking on any.
/// Feed [`Acceptor::advance`] the bytes received and not yet consumed; it
/// asks for no more than the message it waits for. Its first call (input
/// may be empty) makes our SPAKE2 message, so that work overlaps the
/// connector's; the call after a [`Step::Reply`] finishes the key exchange,
/// so call it once the reply is sent. An error ends the handshake: close
/// the connection; on [`AuthError::BadMac`] send `REFUSED` first, as
/// [`accept_handshake`] does (a connector takes a bare hang-up for a lost
/// connection, not a refusal).
pub struct Acceptor {
    state: AcceptorState,
}

impl Default for Acceptor {
    fn default() -> Acceptor {
        Acceptor::new()
    }
}

/// Check the magic at the front of `input` as far as it has arrived.
fn check_magic(input: &[u8]) -> Result<(), AuthError> {
    let n = MAGIC.len().min(input.len());
    if input[..n] == MAGIC[..n] {
        Ok(())
    } else if looks_like_tls(input) {
        Err(AuthError::UnexpectedTls)
    } else if input.len() < 2 {
        Ok(()) // a TLS record or not: told by the next byte
    } else {
        Err(AuthError::BadMagic)
    }
}

impl Acceptor {
    /// A handshake waiting for the connector's first message.
    pub fn new() -> Acceptor {
        Acceptor {
            state: AcceptorState::Start,
        }
    }

    /// Take the next step with `input`, the bytes received and not yet
    /// consumed. After [`Step::Done`] or an error the handshake is over.
    pub fn advance(&mut self, secret: &[u8], my_id: &str, input: &[u8]) -> Result<Step, AuthError> {
        let r = self.step(secret, my_id, input);
        if r.is_err() {
            self.state = AcceptorState::Over;
        }
        r
    }

    fn step(&mut self, secret: &[u8], my_id: &str, input: &[u8]) -> Result<Step, AuthError> {
        match std::mem::replace(&mut self.state, AcceptorState::Over) {
            AcceptorState::Start => {
                if my_id.len() > MAX_ID {
                    return Err(AuthError::BadIdentity);
                }
                let (pake, pake_msg) = start(secret, false)?;
                self.state = AcceptorState::Hello(pake, pake_msg);
                self.step(secret, my_id, input)
            }
            AcceptorState::Hello(pake, pake_msg) => {
                check_magic(input)?;
                if input.len() < HELLO_HEAD {
                    self.state = AcceptorState::Hello(pake, pake_msg);
                    return Ok(Step::Need(HELLO_HEAD));
                }
                let len = u16::from_le_bytes([input[HELLO_HEAD - 2], input[HELLO_HEAD - 1]]);
                if len as usize > MAX_ID {
                    return Err(AuthError::BadIdentity);
                }
                let consumed = HELLO_HEAD + len as usize;
                if input.len() < consumed {
                    self.state = AcceptorState::Hello(pake, pake_msg);
                    return Ok(Step::Need(consumed));
                }
                let m1 = &input[..consumed];
                let peer = String::from_utf8(m1[HELLO_HEAD..].to_vec())
                    .map_err(|_| AuthError::BadIdentity)?;
                let mut peer_msg = [0u8; PAKE_MSG];
                peer_msg.copy_from_slice(&m1[MAGIC.len()..MAGIC.len() + PAKE_MSG]);
                let reply = hello(&pake_msg, my_id);
                self.state = AcceptorState::Exchange {
                    pake,
                    peer_msg,
                    transcript: transcript(m1, &reply),
                    peer,
                };
                Ok(Step::Reply { consumed, reply })
            }
            AcceptorState::Exchange {
                pake,
                peer_msg,
                transcript,
                peer,
            } => {
                self.state = AcceptorState::Proof {
                    keys: keys(pake, &peer_msg)?,
                    transcript,
                    peer,
                };
                self.step(secret, my_id, input)
            }
            AcceptorState::Proof {
                keys,
                transcript,
                peer,
            } => {
                if input.len() < TAG {
                    self.state = AcceptorState::Proof {
                        keys,
                        transcript,
                        peer,
                    };
                    return Ok(Step::Need(TAG));
                }
                if !tag_ok(&keys.connector, &transcript, &input[..TAG]) {
                    return Err(AuthError::BadMac);
                }
                let mut reply = Vec::with_capacity(1 + TAG);
                reply.push(ACCEPTED);
                reply.extend_from_slice(&tag(&keys.acceptor, &transcript));
                Ok(Step::Done {
                    consumed: TAG,
                    reply,
                    peer,
                })
            }
            AcceptorState::Over => Err(AuthError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the handshake is over",
            ))),
        }
    }
}

/// Acceptor side. Returns the connector's identity. Drives an
/// [`Acceptor`] over a blocking stream, and tells a connector whose proof
/// failed so (`REFUSED`) before hanging up. Nothing it sends before the
/// connector's proof verified depends on the secret in a way that can be
/// tested (see the module docs).
pub fn accept_handshake<S: Read + Write>(
    s: &mut S,
    secret: &[u8],
    my_id: &str,
) -> Result<String, AuthError> {
    let mut acceptor = Acceptor::new();
    let mut input = Vec::new();
    loop {
        match acceptor.advance(secret, my_id, &input) {
            Ok(Step::Need(total)) => read_more(s, &mut input, total)?,
            Ok(Step::Reply { consumed, reply }) => {
                input.drain(..consumed);
                s.write_all(&reply)?;
            }
            Ok(Step::Done { reply, peer, .. }) => {
                s.write_all(&reply)?;
                return Ok(peer);
            }
            Err(e) => {
                if matches!(e, AuthError::BadMac) {
                    let _ = s.write_all(&[REFUSED]);
                }
                return Err(e);
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
        // A peer that hung up after TLS bytes is a TLS peer.
        Ok(0) if looks_like_tls(input) => Err(AuthError::UnexpectedTls),
        Ok(0) => Err(AuthError::Io(io::ErrorKind::UnexpectedEof.into())),
        Ok(_) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests;
