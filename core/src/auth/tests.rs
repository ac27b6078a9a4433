//! The handshake between real sockets: both ways, wrong secrets, TLS on
//! one end only, garbage, and the acceptor fed as a scheduler feeds it.

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
    // The acceptor checks the connector's proof first and refuses it.
    assert!(matches!(ra, Err(AuthError::BadMac)), "{ra:?}");
    assert!(matches!(rc, Err(AuthError::Refused)), "{rc:?}");
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

/// Drive an [`Acceptor`] as a non-blocking scheduler may: read at most
/// `chunk` bytes at a time, and never more than it asks for.
fn drive(a: &mut UnixStream, secret: &[u8], chunk: usize) -> Result<String, AuthError> {
    let mut acc = Acceptor::new();
    let mut input = Vec::new();
    loop {
        match acc.advance(secret, "unix:/acceptor", &input)? {
            Step::Need(total) => {
                assert!(total > input.len());
                let mut b = vec![0u8; (total - input.len()).min(chunk)];
                let n = a.read(&mut b).unwrap();
                if n == 0 {
                    return Err(AuthError::Io(io::ErrorKind::UnexpectedEof.into()));
                }
                input.extend_from_slice(&b[..n]);
            }
            Step::Reply { consumed, reply } => {
                input.drain(..consumed);
                a.write_all(&reply).unwrap();
            }
            Step::Done {
                consumed,
                reply,
                peer,
            } => {
                input.drain(..consumed);
                assert!(input.is_empty());
                a.write_all(&reply).unwrap();
                return Ok(peer);
            }
        }
    }
}

#[test]
fn an_acceptor_fed_one_byte_at_a_time_authenticates() {
    for chunk in [1, 7, 4096] {
        let (mut a, mut c) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || connect_handshake(&mut c, b"k", "tcp:1.2.3.4:5"));
        assert_eq!(drive(&mut a, b"k", chunk).unwrap(), "tcp:1.2.3.4:5");
        assert_eq!(t.join().unwrap().unwrap(), "unix:/acceptor");
    }
}

#[test]
fn a_hang_up_after_our_proof_is_a_lost_connection_not_a_refusal() {
    // An acceptor that dies after reading the proof: the connector must
    // not report a different job secret (which would send the user after
    // the wrong cause); it reports a lost connection.
    let (mut a, mut c) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || connect_handshake(&mut c, b"k", "tcp:1.2.3.4:5"));
    let mut acc = Acceptor::new();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match acc.advance(b"k", "unix:/acceptor", &got).unwrap() {
            Step::Need(_) => {
                let n = a.read(&mut buf).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
            Step::Reply { consumed, reply } => {
                assert_eq!(consumed, got.len());
                a.write_all(&reply).unwrap();
                // The proof arrives; the acceptor dies before answering.
                let mut proof = [0u8; TAG];
                a.read_exact(&mut proof).unwrap();
                break;
            }
            other => panic!("unexpected step {other:?}"),
        }
    }
    drop(a);
    let rc = t.join().unwrap();
    match rc {
        Err(AuthError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof),
        other => panic!("expected a lost connection, got {other:?}"),
    }
}

#[test]
fn an_acceptor_tells_tls_and_garbage_apart_early() {
    let mut acc = Acceptor::new();
    assert!(matches!(acc.advance(b"k", "a", &[]), Ok(Step::Need(_))));
    assert!(matches!(acc.advance(b"k", "a", &[0x16]), Ok(Step::Need(_))));
    assert!(matches!(
        acc.advance(b"k", "a", &[0x16, 0x03]),
        Err(AuthError::UnexpectedTls)
    ));
    // Over after an error.
    assert!(acc.advance(b"k", "a", MAGIC).is_err());
    let mut acc = Acceptor::new();
    assert!(matches!(
        acc.advance(b"k", "a", b"GET "),
        Err(AuthError::BadMagic)
    ));
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
