//! What someone without the job secret learns from the handshake gives
//! no offline test of candidate secrets (docs/security.md).
//!
//! The secret here is a dictionary word on purpose: the handshake layer
//! takes any bytes (the entry points refuse weak secrets, see
//! `monarch_core::secret`), and a weak secret is what an offline
//! dictionary attack would find. Each test records real handshakes over
//! real sockets and runs the dictionary attack an attacker would:
//!
//! - an attacker who connects and fails gets the acceptor's hello (a
//!   blinded group element and its address) and `REFUSED`, nothing else;
//! - a recorded successful session: for every candidate, the attacker
//!   recomputes the session's proofs from the candidate and everything it
//!   saw; no candidate reproduces them, the right one included (while the
//!   same check singles out the secret in an HMAC challenge-response
//!   transcript, and does reproduce them given a side's ephemeral scalar);
//! - one connection tests at most the one guess the attacker committed to
//!   in its hello, even granting it the acceptor's key.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use hmac::{Hmac, Mac};
use monarch_core::auth::{
    accept_handshake, connect_handshake, proofs, AuthError, ACCEPTED, MAGIC, PAKE_MSG, REFUSED,
    ROLE_ACCEPTOR, ROLE_CONNECTOR, TAG,
};
use monarch_core::Runtime;
use rand_core::{CryptoRng, RngCore};
use sha2::Sha256;
use spake2::{Ed25519Group, Identity, Password, Spake2};

const SECRET: &str = "dragon";
const DICTIONARY: &[&str] = &[
    "123456", "password", "12345678", "qwerty", "abc123", "monkey", "letmein", "dragon", "111111",
    "baseball", "iloveyou", "trustno1", "sunshine", "master", "welcome", "shadow", "monarch",
    "secret", "hunter2", "football",
];

/// A stream that keeps what was sent and received through it.
struct Recorder<S> {
    s: S,
    sent: Vec<u8>,
    got: Vec<u8>,
}

impl<S: Read> Read for Recorder<S> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let n = self.s.read(b)?;
        self.got.extend_from_slice(&b[..n]);
        Ok(n)
    }
}

impl<S: Write> Write for Recorder<S> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let n = self.s.write(b)?;
        self.sent.extend_from_slice(&b[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.s.flush()
    }
}

fn timeouts(s: &UnixStream) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
}

/// A session between an acceptor holding `acceptor_secret` and a
/// connector holding `connector_secret`: the two results and everything
/// each side sent (the acceptor's bytes up to its hanging up).
struct Session {
    acceptor: Result<String, AuthError>,
    connector: Result<String, AuthError>,
    from_connector: Vec<u8>,
    from_acceptor: Vec<u8>,
}

fn session(acceptor_secret: &'static str, connector_secret: &str) -> Session {
    let (mut a, c) = UnixStream::pair().unwrap();
    timeouts(&a);
    timeouts(&c);
    let t = std::thread::spawn(move || {
        let r = accept_handshake(&mut a, acceptor_secret.as_bytes(), "unix:/acceptor");
        drop(a); // hang up, as the runtime does
        r
    });
    let mut rec = Recorder {
        s: c,
        sent: Vec::new(),
        got: Vec::new(),
    };
    let connector = connect_handshake(&mut rec, connector_secret.as_bytes(), "tcp:10.0.0.1:5");
    let acceptor = t.join().unwrap();
    // Whatever else the acceptor sent before hanging up.
    let mut rest = Vec::new();
    rec.s.read_to_end(&mut rest).unwrap();
    rec.got.extend(rest);
    Session {
        acceptor,
        connector,
        from_connector: rec.sent,
        from_acceptor: rec.got,
    }
}

/// The length of a hello (magic, SPAKE2 message, identity) at `b`.
fn hello_len(b: &[u8]) -> usize {
    let at = MAGIC.len() + PAKE_MSG;
    at + 2 + u16::from_le_bytes([b[at], b[at + 1]]) as usize
}

/// The acceptor's bytes to a connector that failed: its hello, then
/// `REFUSED` (from `accept_handshake`) or nothing (a scheduler that just
/// closes the connection).
fn assert_hello_then_refused(from_acceptor: &[u8], acceptor_id: &str) {
    assert_eq!(&from_acceptor[..MAGIC.len()], MAGIC);
    assert_eq!(from_acceptor[MAGIC.len()], b'B', "a SPAKE2 side-B message");
    let h = hello_len(from_acceptor);
    assert_eq!(
        &from_acceptor[h - acceptor_id.len()..h],
        acceptor_id.as_bytes()
    );
    let after = &from_acceptor[h..];
    assert!(
        after.is_empty() || after == [REFUSED],
        "after its hello the acceptor sends at most REFUSED to a failed proof: {after:02x?}"
    );
}

#[test]
fn a_failed_connection_reveals_nothing_to_test_a_guess_against() {
    let s = session(SECRET, "letmein");
    assert!(
        matches!(s.acceptor, Err(AuthError::BadMac)),
        "{:?}",
        s.acceptor
    );
    assert!(
        matches!(s.connector, Err(AuthError::Refused)),
        "{:?}",
        s.connector
    );
    // Before the connector's proof, the acceptor sent only its hello: the
    // blinded element B = y·G + w·N is uniformly distributed whatever the
    // secret w is, so it answers no question about w. After the failed
    // proof: one byte saying so, and nothing derived from the key.
    assert_hello_then_refused(&s.from_acceptor, "unix:/acceptor");
}

#[test]
fn a_real_listener_reveals_nothing_to_a_connector_without_the_secret() {
    let secret = monarch_core::secret::generate().unwrap();
    let rt = Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        secret,
    )
    .expect("listen on 127.0.0.1");
    let addr = rt.addr().to_string();
    let s = TcpStream::connect(addr.strip_prefix("tcp:").unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut rec = Recorder {
        s,
        sent: Vec::new(),
        got: Vec::new(),
    };
    let r = connect_handshake(&mut rec, SECRET.as_bytes(), "tcp:127.0.0.1:1");
    assert!(matches!(r, Err(AuthError::Refused)), "{r:?}");
    let mut rest = Vec::new();
    rec.s.read_to_end(&mut rest).expect("the listener hangs up");
    rec.got.extend(rest);
    assert_hello_then_refused(&rec.got, &addr);
    rt.check_running().expect("the listener still runs");
    rt.shutdown();
}

/// Ephemeral scalars a test chooses (a real side draws them from the
/// kernel and never shows them).
struct Fixed(u8);

impl RngCore for Fixed {
    fn next_u32(&mut self) -> u32 {
        rand_core::impls::next_u32_via_fill(self)
    }
    fn next_u64(&mut self) -> u64 {
        rand_core::impls::next_u64_via_fill(self)
    }
    fn fill_bytes(&mut self, out: &mut [u8]) {
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.0.wrapping_mul(31).wrapping_add(i as u8);
        }
    }
    fn try_fill_bytes(&mut self, out: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(out);
        Ok(())
    }
}

impl CryptoRng for Fixed {}

fn ids() -> (Identity, Identity) {
    (Identity::new(ROLE_CONNECTOR), Identity::new(ROLE_ACCEPTOR))
}

/// SPAKE2 side A (the connector) for `secret` with the scalar of `seed`.
fn side_a(secret: &str, seed: u8) -> (Spake2<Ed25519Group>, Vec<u8>) {
    let (c, a) = ids();
    Spake2::start_a_with_rng(&Password::new(secret.as_bytes()), &c, &a, Fixed(seed))
}

fn side_b(secret: &str, seed: u8) -> (Spake2<Ed25519Group>, Vec<u8>) {
    let (c, a) = ids();
    Spake2::start_b_with_rng(&Password::new(secret.as_bytes()), &c, &a, Fixed(seed))
}

/// The candidates of `DICTIONARY` for which `check` holds.
fn matching(check: impl Fn(&str) -> bool) -> Vec<&'static str> {
    DICTIONARY.iter().copied().filter(|w| check(w)).collect()
}

#[test]
fn a_recorded_session_singles_out_no_candidate() {
    let s = session(SECRET, SECRET);
    assert_eq!(s.acceptor.as_deref().unwrap(), "tcp:10.0.0.1:5");
    assert_eq!(s.connector.as_deref().unwrap(), "unix:/acceptor");
    let hc = hello_len(&s.from_connector);
    let (hello_c, tc) = s.from_connector.split_at(hc);
    let ha = hello_len(&s.from_acceptor);
    let (hello_a, rest) = s.from_acceptor.split_at(ha);
    assert_eq!(rest[0], ACCEPTED);
    let ta = &rest[1..];
    assert_eq!((tc.len(), ta.len()), (TAG, TAG));
    let msg_a = &hello_c[MAGIC.len()..MAGIC.len() + PAKE_MSG];
    let msg_b = &hello_a[MAGIC.len()..MAGIC.len() + PAKE_MSG];

    // The eavesdropper's test of candidate w: the protocol's key from w
    // and both observed messages needs one side's ephemeral scalar, which
    // it does not have; whatever scalar it puts in its place (here 16
    // guesses, as either side), no candidate reproduces the proofs.
    let reproduces = |w: &str| {
        (0..16u8).any(|z| {
            let ka = side_a(w, z).0.finish(msg_b).unwrap();
            let kb = side_b(w, z).0.finish(msg_a).unwrap();
            [ka, kb].iter().any(|k| {
                let (pc, pa) = proofs(k, hello_c, hello_a);
                pc == tc || pa == ta
            })
        })
    };
    assert_eq!(matching(reproduces), Vec::<&str>::new());

    // The same test with the scalar does single out the secret: a session
    // whose connector scalar is known (the test plays that connector).
    let (pake, msg_a) = side_a(SECRET, 7);
    let (mut a, mut c) = UnixStream::pair().unwrap();
    timeouts(&a);
    timeouts(&c);
    let t = std::thread::spawn(move || accept_handshake(&mut a, SECRET.as_bytes(), "unix:/x"));
    let mut hello_c = MAGIC.to_vec();
    hello_c.extend_from_slice(&msg_a);
    hello_c.extend_from_slice(&3u16.to_le_bytes());
    hello_c.extend_from_slice(b"tcp");
    c.write_all(&hello_c).unwrap();
    let mut hello_a = vec![0u8; MAGIC.len() + PAKE_MSG + 2 + "unix:/x".len()];
    c.read_exact(&mut hello_a).unwrap();
    let k = pake
        .finish(&hello_a[MAGIC.len()..MAGIC.len() + PAKE_MSG])
        .unwrap();
    c.write_all(&proofs(&k, &hello_c, &hello_a).0).unwrap();
    let mut status = [0u8; 1 + TAG];
    c.read_exact(&mut status).unwrap();
    assert_eq!(t.join().unwrap().unwrap(), "tcp");
    let msg_b = hello_a[MAGIC.len()..MAGIC.len() + PAKE_MSG].to_vec();
    let with_scalar = |w: &str| {
        let k = side_a(w, 7).0.finish(&msg_b).unwrap();
        proofs(&k, &hello_c, &hello_a).1[..] == status[1..]
    };
    assert_eq!(matching(with_scalar), [SECRET]);

    // And the same dictionary attack on an HMAC challenge-response
    // transcript (the acceptor's MAC over both nonces and its identity)
    // singles out the secret from the recorded bytes alone.
    let hmac = |key: &str, nc: &[u8], na: &[u8]| {
        let mut m = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
        m.update(b"acceptor");
        m.update(nc);
        m.update(na);
        m.update(b"unix:/acceptor");
        m.finalize().into_bytes()
    };
    let (nc, na) = ([1u8; 32], [2u8; 32]);
    let observed = hmac(SECRET, &nc, &na);
    assert_eq!(matching(|w| hmac(w, &nc, &na) == observed), [SECRET]);
}

#[test]
fn one_connection_tests_at_most_the_guess_it_committed_to() {
    // An attacker connects with guess g (its hello is A = x·G + g·M) and
    // learns B. Even granting it the acceptor's key (which the acceptor
    // never sends), the only candidate it can check is g: for any other
    // candidate w its own key for (x, w) differs from the acceptor's.
    for guess in ["letmein", SECRET] {
        let (_, msg_a) = side_a(guess, 3);
        let (acceptor, msg_b) = side_b(SECRET, 5);
        let acceptor_key = acceptor.finish(&msg_a).unwrap();
        let found = matching(|w| side_a(w, 3).0.finish(&msg_b).unwrap() == acceptor_key);
        let expected: Vec<&str> = if guess == SECRET {
            vec![SECRET]
        } else {
            vec![]
        };
        assert_eq!(found, expected, "guess {guess}");
    }
}
