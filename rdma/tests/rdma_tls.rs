//! The data plane's TCP backend inside mutual TLS, between real processes:
//! this test binary re-executes itself as the buffer's owner (the
//! `owner_child` "test", when `RDMA_TLS_OWNER` is set), with or without a
//! TLS configuration in its environment. Striped reads and writes are
//! byte-exact over TLS; a TLS reader cannot use a plain owner (a clear
//! error, no hang).

use std::path::PathBuf;
use std::sync::OnceLock;

use monarch_rdma::{self as rdma, Backend};

mod common;
use common::{pattern, serve_owner_if_asked, Owner};

const TOKEN: &str = "rdma-tls-test-token";

/// A CA and two leaves in PEM files; returns [(cert, key, ca)] paths.
fn pki() -> &'static [[PathBuf; 3]; 2] {
    static P: OnceLock<[[PathBuf; 3]; 2]> = OnceLock::new();
    P.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("rdma_tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf = |name: &str| {
            let key = rcgen::KeyPair::generate().unwrap();
            let params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
            let cert = params.signed_by(&key, &issuer).unwrap();
            std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
            [
                dir.join(format!("{name}.pem")),
                dir.join(format!("{name}.key")),
                dir.join("ca.pem"),
            ]
        };
        [leaf("reader"), leaf("owner")]
    })
}

/// This process (the reader) uses TLS: set once, before any connection.
fn setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let [cert, key, ca] = &pki()[0];
        std::env::set_var("MONARCH_TLS_CERT", cert);
        std::env::set_var("MONARCH_TLS_KEY", key);
        std::env::set_var("MONARCH_TLS_CA", ca);
        rdma::init(TOKEN, "unix:tls-test-reader");
    });
}

/// The owner side (see `common`), when this binary runs as the owner.
#[test]
fn owner_child() {
    serve_owner_if_asked(OWNER_VAR, TOKEN, "unix:tls-owner-child");
}

const OWNER_VAR: &str = "RDMA_TLS_OWNER";

/// An owner with (`tls`) or without a TLS configuration of its own.
fn start_owner(size: usize, tls: bool) -> Owner {
    Owner::start(OWNER_VAR, size, |cmd| {
        if tls {
            let [cert, key, ca] = &pki()[1];
            cmd.env("MONARCH_TLS_CERT", cert)
                .env("MONARCH_TLS_KEY", key)
                .env("MONARCH_TLS_CA", ca);
        } else {
            for v in ["MONARCH_TLS_CERT", "MONARCH_TLS_KEY", "MONARCH_TLS_CA"] {
                cmd.env_remove(v);
            }
        }
    })
}

#[test]
fn striped_reads_and_writes_over_tls_are_byte_exact() {
    setup();
    let size = 24 << 20;
    let mut owner = start_owner(size, true);
    let buf = owner.handle_via(Backend::Tcp);
    for (off, len) in [(0, 1), (4093, 70_000), (0, size), (12345, 9 << 20)] {
        let mut dst = vec![0xEEu8; len];
        buf.read_into(off as u64, dst.as_mut_ptr() as usize, len)
            .unwrap();
        for (i, &b) in dst.iter().enumerate() {
            assert_eq!(b, pattern(off + i), "byte {i} of read at {off}+{len}");
        }
    }
    let (off, len) = (1000, 10 << 20);
    let src = vec![9u8; len];
    buf.write_from(off as u64, src.as_ptr() as usize, len)
        .unwrap();
    assert_eq!(
        owner.ask(&format!("sum {off} {len}")),
        format!("sum {} 9", 9 * len as u64)
    );
    assert_eq!(buf.backend().unwrap(), Backend::Tcp);
}

#[test]
fn a_tls_reader_cannot_use_a_plain_owner() {
    setup();
    let owner = start_owner(1 << 20, false);
    let buf = owner.handle_via(Backend::Tcp);
    let mut dst = vec![0u8; 4096];
    let e = buf
        .read_into(0, dst.as_mut_ptr() as usize, 4096)
        .unwrap_err();
    assert!(e.message.contains("TLS"), "{e}");
}
