//! Mutual TLS on TCP links, with real `monarch host` agents on 127.0.0.1
//! and real worker procs: a TLS controller (this test process) runs calls
//! and casts through TLS agents; plain-TCP clients, clients with a
//! certificate from another CA, and TLS clients with the wrong job secret
//! are refused (and logged) while the agent serves on; a TLS controller
//! cannot attach a plain agent; TLS handshakes trickled a byte at a time
//! hold no thread of the agent and are cut at the handshake deadline.
//!
//! A test CA and certificates are generated at test time (rcgen). This
//! process is the controller: its TLS configuration is in its environment,
//! set once before any runtime exists.

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use monarch_core::auth::{connect_handshake, AuthError};

/// Upper bound for any single wait; only there to turn a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

mod common;
use common::{call, ints, ready_addr, terminate, wait, Controller};

#[path = "../../core/tests/loris/mod.rs"]
mod loris;
use monarch_core::tls::TlsConfig;
use monarch_core::transport::Stream;
use monarch_core::{ActorMesh, CallMode, HostMesh, MeshView, PointValue};

const SECRET: &str = "379a62943c94695ed7cdb337d712552eda41d10ec5f990e6d1be0ea4aa20e06c";
/// PEM files: one CA with leaves for the controller and agents, and a
/// second CA with a leaf ("intruder").
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn leaf(&self, name: &str) -> [PathBuf; 3] {
        let d = &self.dir;
        let ca = if name == "intruder" { "ca2" } else { "ca" };
        [
            d.join(format!("{name}.pem")),
            d.join(format!("{name}.key")),
            d.join(format!("{ca}.pem")),
        ]
    }
}

fn make_ca(name: &str) -> (rcgen::Certificate, rcgen::Issuer<'static, rcgen::KeyPair>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    (cert, rcgen::Issuer::new(params, key))
}

fn write_leaf(dir: &Path, name: &str, issuer: &rcgen::Issuer<'static, rcgen::KeyPair>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![format!("{name}.monarch.test")]).unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

fn pki() -> &'static Pki {
    static P: OnceLock<Pki> = OnceLock::new();
    P.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("tls_e2e-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca, issuer) = make_ca("monarch test CA");
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        for name in ["controller", "agent0", "agent1"] {
            write_leaf(&dir, name, &issuer);
        }
        let (ca2, issuer2) = make_ca("some other CA");
        std::fs::write(dir.join("ca2.pem"), ca2.pem()).unwrap();
        write_leaf(&dir, "intruder", &issuer2);
        let p = Pki { dir };
        let [cert, key, ca] = p.leaf("controller");
        // Set once, before any runtime of this test binary exists.
        std::env::set_var("MONARCH_JOB_TOKEN", SECRET);
        std::env::set_var("MONARCH_TLS_CERT", cert);
        std::env::set_var("MONARCH_TLS_KEY", key);
        std::env::set_var("MONARCH_TLS_CA", ca);
        // Casts travel down a tree: with fan-out 2, procs on one agent
        // forward to procs on the other (proc-to-proc TCP, inside TLS).
        std::env::set_var("MONARCH_CAST_FANOUT", "2");
        p
    })
}

/// A running `monarch host` (TLS with `leaf`'s certificate, or plain),
/// its stderr in a file; killed (SIGTERM, then SIGKILL) on drop.
struct Agent {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Agent {
    fn start(leaf: Option<&str>) -> Agent {
        Agent::start_with(leaf, &[])
    }

    /// As [`Agent::start`], with `env` added to the agent's environment.
    fn start_with(leaf: Option<&str>, env: &[(&str, &str)]) -> Agent {
        let p = pki();
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let log = p.dir.join(format!(
            "agent-{}.log",
            N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_monarch"));
        cmd.args(["host", "--listen", "127.0.0.1:0"])
            .env("MONARCH_JOB_TOKEN", SECRET)
            .env("MONARCH_LOG", "warn")
            // Only the flags configure the agent's TLS.
            .env_remove("MONARCH_TLS_CERT")
            .env_remove("MONARCH_TLS_KEY")
            .env_remove("MONARCH_TLS_CA")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(name) = leaf {
            let [cert, key, ca] = p.leaf(name);
            cmd.arg("--tls-cert")
                .arg(cert)
                .arg("--tls-key")
                .arg(key)
                .arg("--tls-ca")
                .arg(ca);
        }
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().expect("start agent");
        let addr = ready_addr(&mut child);
        Agent { child, addr, log }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Wait until the agent's log has a line containing all of `words`.
    fn logged(&self, words: &[&str]) -> String {
        let t = Instant::now();
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Some(l) = log.lines().find(|l| words.iter().all(|w| l.contains(w))) {
                return l.to_string();
            }
            assert!(
                t.elapsed() < HANG,
                "agent never logged {words:?}; its log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// A controller configured for TLS (the PKI exists before it starts).
fn tls_controller() -> Controller {
    pki();
    Controller::new()
}

/// Attach `agents`, spawn 2 echo procs on each, check they answer.
fn spawn_on(c: &Controller, agents: &[&Agent]) -> (monarch_core::ProcMesh, ActorMesh) {
    let addrs: Vec<String> = agents.iter().map(|a| a.addr.clone()).collect();
    let hm = HostMesh::attach(&c.rt, &addrs).expect("attach");
    let argv = vec![env!("CARGO_BIN_EXE_monarch").to_string(), "worker".into()];
    let pm = hm
        .spawn_procs(&["gpus".to_string()], &[2], &argv, &[])
        .expect("spawn procs");
    let (am, ready) = pm.spawn_actors("e", "echo", &[]).unwrap();
    for v in wait(&ready).values {
        assert!(!v.is_err(), "{v:?}");
    }
    (pm, am)
}

/// A raw client: TCP to `addr`, inside TLS with `leaf`'s certificate when
/// given, then the job-secret handshake with `secret`.
fn raw_client(addr: &str, leaf: Option<&str>, secret: &str) -> Result<String, AuthError> {
    let tcp = TcpStream::connect(addr).unwrap();
    let tls = leaf.map(|name| {
        let [cert, key, ca] = pki().leaf(name);
        TlsConfig::from_files(&cert, &key, &ca).unwrap()
    });
    let mut s = Stream::tcp(tcp, tls.as_ref(), false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    connect_handshake(&mut s, secret.as_bytes(), "tcp:127.0.0.1:1")
}

/// The agent still serves a TLS controller.
fn serves_on(c: &Controller, a: &Agent) {
    let (pm, am) = spawn_on(c, &[a]);
    assert_eq!(ints(&call(&am, "rank", &[])), [0, 1]);
    wait(&pm.stop());
}

#[test]
fn tls_controller_runs_calls_and_casts_through_tls_agents() {
    let a0 = Agent::start(Some("agent0"));
    let a1 = Agent::start(Some("agent1"));
    let c = tls_controller();
    let (pm, am) = spawn_on(&c, &[&a0, &a1]);
    assert_eq!(ints(&call(&am, "rank", &[])), [0, 1, 2, 3]);
    assert_eq!(
        ints(&call(&am.at("hosts", 1).unwrap(), "rank", &[])),
        [0, 1]
    );
    // A larger payload both ways (several TLS records per frame).
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let vm = wait(&am.call("echo", &[&big], CallMode::All).unwrap().unwrap());
    for v in &vm.values {
        match v {
            PointValue::Ok(p) => assert!(p[0] == big),
            PointValue::Err { message, .. } => panic!("{message}"),
        }
    }
    // Procs inherited their agent's TLS configuration, and their TCP
    // listeners refuse a plain client.
    for pid in ints(&call(&am, "pid", &[])) {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let env = String::from_utf8_lossy(&env);
        let var = |k: &str| {
            env.split('\0')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                .map(str::to_string)
        };
        let cert = var("MONARCH_TLS_CERT").expect("proc has MONARCH_TLS_CERT");
        assert!(
            cert.ends_with("agent0.pem") || cert.ends_with("agent1.pem"),
            "{cert}"
        );
        let addr = var("MONARCH_PROC_ADDR").expect("proc address");
        let addr = addr.strip_prefix("tcp:").unwrap();
        let e = raw_client(addr, None, SECRET).unwrap_err();
        assert!(matches!(e, AuthError::PeerWantsTls), "proc {addr}: {e}");
    }
    // Still fine after all that.
    assert_eq!(ints(&call(&am, "rank", &[])), [0, 1, 2, 3]);
    wait(&pm.stop());
}

#[test]
fn a_plain_tcp_client_is_refused_and_the_agent_serves_on() {
    let mut a = Agent::start(Some("agent0"));
    // The right secret, but no TLS.
    let e = raw_client(&a.addr, None, SECRET).unwrap_err();
    assert!(matches!(e, AuthError::PeerWantsTls), "{e}");
    let line = a.logged(&["dropping unauthenticated connection", "does not speak TLS"]);
    assert!(line.contains("127.0.0.1"), "{line}");
    // Raw bytes that are not a handshake at all: nothing comes back.
    let mut s = TcpStream::connect(&a.addr).unwrap();
    std::io::Write::write_all(&mut s, b"GET / HTTP/1.1\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    // At most a TLS alert record (content type 21), never a frame.
    assert!(got.is_empty() || got[0] == 21, "{got:?}");
    assert!(a.alive());
    serves_on(&tls_controller(), &a);
}

#[test]
fn trickled_tls_handshakes_hold_no_thread_and_are_cut_at_the_deadline() {
    use loris::{threads_of, Loris, Target};
    let c = tls_controller();
    let a = Agent::start_with(Some("agent0"), &[("MONARCH_HANDSHAKE_TIMEOUT_MS", "1000")]);
    let pid = a.child.id().to_string();
    let before = threads_of(&pid);
    // From another source than the controller (127.0.0.1).
    let target = Target::parse(&a.addr).from(std::net::Ipv4Addr::new(127, 0, 0, 2));
    let n = 300;
    let attack = Loris::start_script(target, n, Duration::from_millis(300), Loris::tls_script());
    assert!(
        attack.wait_rounds(2, HANG),
        "the attacker could not connect"
    );
    let during = threads_of(&pid);
    assert!(
        during <= before + 4,
        "{n} trickled TLS handshakes raised the agent's threads from {before} to {during}"
    );
    // Closed at the deadline though a byte arrives every 300 ms.
    assert!(
        attack.wait_closed(n, HANG),
        "only {} of {n} trickled TLS handshakes were closed",
        attack.closed()
    );
    serves_on(&c, &a);
    drop(attack);
}

#[test]
fn a_certificate_from_another_ca_is_refused() {
    let mut a = Agent::start(Some("agent0"));
    // The intruder trusts its own CA, so it refuses the agent too; both
    // ends fail the TLS handshake before any job-secret byte is sent.
    let e = raw_client(&a.addr, Some("intruder"), SECRET).unwrap_err();
    assert!(matches!(&e, AuthError::Tls(_)), "{e}");
    a.logged(&["dropping unauthenticated connection", "TLS"]);
    // An intruder that trusts our CA (so it accepts the agent) is still
    // refused by the agent for its own certificate.
    let [cert, key, _] = pki().leaf("intruder");
    let ca = pki().leaf("agent0")[2].clone();
    let cfg = TlsConfig::from_files(&cert, &key, &ca).unwrap();
    let mut s = Stream::tcp(TcpStream::connect(&a.addr).unwrap(), Some(&cfg), false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let e = connect_handshake(&mut s, SECRET.as_bytes(), "tcp:127.0.0.1:1").unwrap_err();
    assert!(
        matches!(&e, AuthError::Tls(m) if m.contains("refused")),
        "{e}"
    );
    a.logged(&["dropping unauthenticated connection", "UnknownIssuer"]);
    assert!(a.alive());
    serves_on(&tls_controller(), &a);
}

#[test]
fn tls_with_the_wrong_job_secret_is_refused() {
    let mut a = Agent::start(Some("agent0"));
    // A valid certificate of the job's CA, but the wrong secret.
    let e = raw_client(&a.addr, Some("agent1"), "not the job secret").unwrap_err();
    assert!(matches!(e, AuthError::Refused), "{e}");
    a.logged(&[
        "dropping unauthenticated connection",
        "peer failed the challenge",
    ]);
    assert!(a.alive());
    serves_on(&tls_controller(), &a);
}

#[test]
fn a_tls_controller_cannot_attach_a_plain_agent() {
    let mut a = Agent::start(None);
    let c = tls_controller();
    let e = match HostMesh::attach(&c.rt, std::slice::from_ref(&a.addr)) {
        Ok(_) => panic!("a TLS controller attached a plain agent"),
        Err(e) => e,
    };
    assert!(e.message.contains("TLS"), "{e}");
    a.logged(&[
        "dropping unauthenticated connection",
        "TLS is not configured here",
    ]);
    assert!(a.alive());
}

#[test]
fn bad_tls_flags_stop_the_agent_with_a_message() {
    let o = Command::new(env!("CARGO_BIN_EXE_monarch"))
        .args(["host", "--listen", "127.0.0.1:0", "--tls-cert", "/x.pem"])
        .env("MONARCH_JOB_TOKEN", SECRET)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("go together"));
    let o = Command::new(env!("CARGO_BIN_EXE_monarch"))
        .args(["host", "--listen", "127.0.0.1:0"])
        .args([
            "--tls-cert",
            "/nonexistent/c.pem",
            "--tls-key",
            "/x",
            "--tls-ca",
            "/y",
        ])
        .env("MONARCH_JOB_TOKEN", SECRET)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent/c.pem"), "{err}");
}

/// A stream whose writes are held back until the next read: the last
/// message of a handshake run over it is left in `out`.
struct Held<'a> {
    s: &'a mut Stream,
    out: Vec<u8>,
}

impl Read for Held<'_> {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        use std::io::Write;
        if !self.out.is_empty() {
            self.s.write_all(&self.out)?;
            self.s.flush()?;
            self.out.clear();
        }
        self.s.read(b)
    }
}

impl std::io::Write for Held<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.out.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes of a peer's that arrive together with the handshake's last
/// message (one TLS read takes both) are read at once, not when more
/// bytes come: here they are malformed, so the connecting controller must
/// drop the connection and its request fail for that reason. Unread, they
/// would sit in the TLS session until the request's deadline.
#[test]
fn bytes_arriving_with_the_handshake_are_read_at_once() {
    use std::io::Write;
    let c = tls_controller();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let rt = c.rt.clone();
    let attach = std::thread::spawn(move || HostMesh::attach(&rt, &[addr]).map(|_| ()));
    let (tcp, _) = listener.accept().unwrap();
    let [cert, key, ca] = pki().leaf("agent0");
    let cfg = TlsConfig::from_files(&cert, &key, &ca).unwrap();
    let mut s = Stream::tcp(tcp, Some(&cfg), true).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    let mut held = Held {
        s: &mut s,
        out: Vec::new(),
    };
    monarch_core::auth::accept_handshake(&mut held, SECRET.as_bytes(), "tcp:127.0.0.1:1")
        .expect("the controller authenticates");
    // The last handshake message and a malformed frame in one write.
    let mut out = held.out;
    out.extend_from_slice(&[0xff; 64]);
    s.write_all(&out).unwrap();
    s.flush().unwrap();
    let sent = Instant::now();
    let e = attach
        .join()
        .unwrap()
        .expect_err("attached a peer that sent garbage");
    // The controller dropped the connection for the malformed frame; the
    // request fails for that, or on sending into the dropped connection.
    assert!(
        e.message.contains("frame header") || e.message.contains("cannot send"),
        "{e}"
    );
    // Unread, the bytes are found only by the waiter's last look when the
    // request's deadline (MONARCH_AGENT_TIMEOUT_S, 60 s) passes; read at
    // once, within milliseconds. Half the deadline tells the two apart.
    assert!(
        sent.elapsed() < Duration::from_secs(30),
        "the bytes were read only when the request gave up, after {:?}",
        sent.elapsed()
    );
}
