//! The data plane's TCP backend inside mutual TLS, between real processes:
//! this test binary re-executes itself as the buffer's owner (the
//! `owner_child` "test", when `RDMA_TLS_OWNER` is set), with or without a
//! TLS configuration in its environment. Striped reads and writes are
//! byte-exact over TLS; a TLS reader cannot use a plain owner (a clear
//! error, no hang).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, OnceLock};

use monarch_core::rdma::{self, Backend, Buffer};

const TOKEN: &str = "rdma-tls-test-token";

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 9)) as u8
}

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

/// The owner side, run in a child process: prints `desc <hex>`, answers
/// `sum <off> <len>`, exits at EOF.
#[test]
fn owner_child() {
    let Ok(size) = std::env::var("RDMA_TLS_OWNER") else {
        return;
    };
    let size: usize = size.parse().unwrap();
    rdma::init(TOKEN, "unix:tls-owner-child");
    let mut mem: Vec<u8> = (0..size).map(pattern).collect();
    let buf = rdma::register(None, mem.as_mut_ptr() as usize, size, true, 1).unwrap();
    let hex: String = buf
        .to_bytes()
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "desc {hex}").unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        if let ["sum", off, len] = line.split_whitespace().collect::<Vec<_>>().as_slice() {
            let (o, l): (usize, usize) = (off.parse().unwrap(), len.parse().unwrap());
            let s: u64 = mem[o..o + l].iter().map(|&b| b as u64).sum();
            writeln!(out, "sum {s}").unwrap();
            out.flush().unwrap();
        }
    }
    drop(buf);
    drop(mem);
    std::process::exit(0);
}

struct Owner {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<std::process::ChildStdout>,
    desc: Vec<u8>,
}

impl Owner {
    fn start(size: usize, tls: bool) -> Owner {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "owner_child", "--nocapture", "--test-threads=1"])
            .env("RDMA_TLS_OWNER", size.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
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
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let desc = loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "owner exited early");
            if let Some(h) = line.trim().split("desc ").nth(1) {
                break (0..h.len() / 2)
                    .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
                    .collect();
            }
        };
        Owner {
            child,
            stdin,
            out,
            desc,
        }
    }

    fn ask(&mut self, cmd: &str) -> String {
        let s = self.stdin.as_mut().unwrap();
        writeln!(s, "{cmd}").unwrap();
        s.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    fn tcp_handle(&self) -> Arc<Buffer> {
        let b = Buffer::from_bytes(None, &self.desc).unwrap();
        b.set_backend(Backend::Tcp);
        b
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.wait();
    }
}

#[test]
fn striped_reads_and_writes_over_tls_are_byte_exact() {
    setup();
    let size = 24 << 20;
    let mut owner = Owner::start(size, true);
    let buf = owner.tcp_handle();
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
        format!("sum {}", 9 * len as u64)
    );
    assert_eq!(buf.backend().unwrap(), Backend::Tcp);
}

#[test]
fn a_tls_reader_cannot_use_a_plain_owner() {
    setup();
    let owner = Owner::start(1 << 20, false);
    let buf = owner.tcp_handle();
    let mut dst = vec![0u8; 4096];
    let e = buf
        .read_into(0, dst.as_mut_ptr() as usize, 4096)
        .unwrap_err();
    assert!(e.message.contains("TLS"), "{e}");
}
