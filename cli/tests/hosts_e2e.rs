//! Host agents on this machine (over TCP on 127.0.0.1): a controller
//! attaches real `monarch host` agents, spawns procs through them, calls
//! and slices, loses a host; and hostile clients against an agent.
//! (The 3-host network-namespace test is tests/hosts/netns_test.py.)
//!
//! Every test in this file uses the same job secret, set in the
//! environment before any runtime exists. Timeouts only turn a hang into
//! a failure.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use monarch_core::frame::write_frame;

/// Upper bound for any single wait; only there to turn a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

mod common;
use common::{call, ready_addr, terminate, wait, Controller};
use monarch_core::wire::{Envelope, Kind};
use monarch_core::{
    ActorMesh, CallMode, HostMesh, MeshView, PointValue, ProcMesh, Runtime, ValueMesh,
};

const SECRET: &str = "7db7350edf9857cbb27ff510752cc65146e6b3099db2e48bbb28b9e02903eedf";
fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: set once, before any thread of this test binary reads it.
        std::env::set_var("MONARCH_JOB_TOKEN", SECRET);
        // A cut link is noticed quickly (kernel TCP user timeout).
        std::env::set_var("MONARCH_TCP_TIMEOUT_MS", "3000");
        // Casts travel down a tree of procs: with fan-out 2, procs on one
        // agent forward to procs on the other (proc-to-proc TCP).
        std::env::set_var("MONARCH_CAST_FANOUT", "2");
        // Hung procs are declared failed after 2 s of missed heartbeats.
        std::env::set_var("MONARCH_HEARTBEAT_TIMEOUT_MS", "2000");
    });
}

/// A running `monarch host`, killed (SIGTERM, then SIGKILL) on drop.
struct Agent {
    child: Child,
    addr: String,
}

impl Agent {
    fn start(secret: &str) -> Agent {
        let mut child = Command::new(env!("CARGO_BIN_EXE_monarch"))
            .args(["host", "--listen", "127.0.0.1:0"])
            .env("MONARCH_JOB_TOKEN", secret)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start agent");
        let addr = ready_addr(&mut child);
        Agent { child, addr }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

fn ranks(vm: &ValueMesh) -> Vec<Result<i64, String>> {
    vm.values
        .iter()
        .map(|v| match v {
            PointValue::Ok(p) => Ok(i64::from_le_bytes(p[0].as_slice().try_into().unwrap())),
            PointValue::Err { message, .. } => Err(message.clone()),
        })
        .collect()
}

fn spawn_2x2(c: &Controller, agents: &[&Agent]) -> (HostMesh, ProcMesh, ActorMesh) {
    let addrs: Vec<String> = agents.iter().map(|a| a.addr.clone()).collect();
    let hm = HostMesh::attach(&c.rt, &addrs).expect("attach");
    assert_eq!(hm.shape().labels(), ["hosts"]);
    let argv = vec![env!("CARGO_BIN_EXE_monarch").to_string(), "worker".into()];
    let pm = hm
        .spawn_procs(&["gpus".to_string()], &[2], &argv, &[])
        .expect("spawn procs");
    assert_eq!(pm.shape().labels(), ["hosts", "gpus"]);
    assert_eq!(pm.shape().sizes(), [2, 2]);
    let (am, ready) = pm.spawn_actors("e", "echo", &[]).unwrap();
    for v in wait(&ready).values {
        assert!(!v.is_err(), "{v:?}");
    }
    (hm, pm, am)
}

#[test]
fn procs_on_two_agents_answer_slice_and_stop() {
    init();
    let a0 = Agent::start(SECRET);
    let a1 = Agent::start(SECRET);
    let c = Controller {
        rt: Runtime::new().unwrap(),
    };
    let (hm, pm, am) = spawn_2x2(&c, &[&a0, &a1]);
    assert_eq!(ranks(&call(&am, "rank", &[])), [Ok(0), Ok(1), Ok(2), Ok(3)]);
    let host1 = am.at("hosts", 1).unwrap();
    assert_eq!(ranks(&call(&host1, "rank", &[])), [Ok(0), Ok(1)]);
    let col = am.at("gpus", 1).unwrap();
    assert_eq!(call(&col, "rank", &[]).values.len(), 2);
    // A sliced host mesh spawns only on its hosts.
    let one = hm.at("hosts", 1).unwrap();
    assert_eq!(one.hosts(), [format!("tcp:{}", a1.addr)]);
    let argv = vec![env!("CARGO_BIN_EXE_monarch").to_string(), "worker".into()];
    let pm1 = one.spawn_procs(&["gpus".into()], &[3], &argv, &[]).unwrap();
    assert_eq!(pm1.shape().sizes(), [3]);
    let (am1, ready) = pm1.spawn_actors("e1", "echo", &[]).unwrap();
    wait(&ready);
    assert_eq!(call(&am1, "rank", &[]).values.len(), 3);
    // Stopping works through the agents.
    wait(&pm1.stop());
    wait(&pm.stop());
}

#[test]
fn losing_a_host_fails_exactly_its_ranks() {
    init();
    let a0 = Agent::start(SECRET);
    let mut a1 = Agent::start(SECRET);
    let c = Controller {
        rt: Runtime::new().unwrap(),
    };
    let (_hm, _pm, am) = spawn_2x2(&c, &[&a0, &a1]);
    assert_eq!(ranks(&call(&am, "rank", &[])), [Ok(0), Ok(1), Ok(2), Ok(3)]);
    // Host 1's agent dies hard; its procs die with it (parent-death signal).
    let _ = a1.child.kill();
    let _ = a1.child.wait();
    assert!(!a1.alive());
    let t = Instant::now();
    // Either the loss is noticed while the call is in flight (exactly
    // ranks 2 and 3 fail), or before it is sent (supervision refuses a
    // call to a view holding a failed proc, naming a proc of host 1).
    match am.call("rank", &[], CallMode::All) {
        Ok(f) => {
            let r = ranks(&wait(&f.unwrap()));
            assert_eq!(r[..2], [Ok(0), Ok(1)], "{r:?}");
            assert!(r[2].is_err() && r[3].is_err(), "{r:?}");
        }
        Err(e) => assert!(e.message.contains("host tcp:"), "{e}"),
    }
    assert!(t.elapsed() < HANG);
    // Later calls: host 0 keeps working, host 1 fails at once.
    assert_eq!(
        ranks(&call(&am.at("hosts", 0).unwrap(), "rank", &[])),
        [Ok(0), Ok(1)]
    );
    let e = match am.at("hosts", 1).unwrap().call("rank", &[], CallMode::All) {
        Err(e) => e,
        Ok(f) => panic!(
            "call to the lost host was accepted: {:?}",
            ranks(&wait(&f.unwrap()))
        ),
    };
    assert!(e.message.contains(&format!("host tcp:{}", a1.addr)), "{e}");
}

/// Read until the peer closes (Ok(bytes)) or the timeout passes (Err).
fn read_until_closed(s: &mut TcpStream) -> Result<Vec<u8>, String> {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(got),
            Err(e) => return Err(format!("{e} after {} bytes", got.len())),
        }
    }
}

fn frame(method: &str) -> Vec<u8> {
    let mut env = Envelope::new(Kind::Message);
    env.actor = monarch_core::runtime::AGENT_ACTOR.into();
    env.method = method.into();
    env.reply_port = 1;
    env.sender = "tcp:127.0.0.1:1".into();
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let h = env.encode(&mut fbb).to_vec();
    let mut out = Vec::new();
    write_frame(&mut out, &h, &[]).unwrap();
    out
}

/// A connector's stream that sends zeros in place of its proof (the
/// second message it writes).
struct GarbageProof {
    s: TcpStream,
    writes: usize,
}

impl Read for GarbageProof {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.s.read(b)
    }
}

impl Write for GarbageProof {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.writes += 1;
        if self.writes == 2 {
            self.s.write_all(&vec![0u8; b.len()])?;
        } else {
            self.s.write_all(b)?;
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn hostile_clients_are_refused_and_the_agent_keeps_serving() {
    init();
    let mut a = Agent::start(SECRET);
    // 1. No secret: a well-formed request frame straight away.
    let mut s = TcpStream::connect(&a.addr).unwrap();
    // (The agent may hang up before we finish writing: errors are fine.)
    let _ = s.write_all(&frame("kill"));
    let _ = s.write_all(&frame("prepare"));
    let got = read_until_closed(&mut s).expect("agent must hang up");
    assert!(
        got.is_empty(),
        "unauthenticated client got {} bytes",
        got.len()
    );
    // 2. Wrong secret: the agent's proof does not verify for us, and ours
    //    (made with the wrong key) is refused.
    let mut s = TcpStream::connect(&a.addr).unwrap();
    let r = monarch_core::auth::connect_handshake(&mut s, b"wrong secret", "tcp:127.0.0.1:2");
    assert!(r.is_err(), "handshake with a wrong secret succeeded");
    // A real hello, then garbage in place of the proof: the agent answers
    // REFUSED, nothing else, and hangs up; frames sent after it are
    // never answered.
    let s = TcpStream::connect(&a.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut g = GarbageProof { s, writes: 0 };
    let r = monarch_core::auth::connect_handshake(&mut g, SECRET.as_bytes(), "tcp:127.0.0.1:2");
    assert!(
        matches!(r, Err(monarch_core::auth::AuthError::Refused)),
        "{r:?}"
    );
    let mut s = g.s;
    let _ = s.write_all(&frame("prepare"));
    let got = read_until_closed(&mut s).expect("agent must hang up");
    assert!(
        got.is_empty(),
        "client with a garbage proof got {} more bytes",
        got.len()
    );
    // 3. Right secret, then garbage instead of frames.
    let mut s = TcpStream::connect(&a.addr).unwrap();
    monarch_core::auth::connect_handshake(&mut s, SECRET.as_bytes(), "tcp:127.0.0.1:3").unwrap();
    let _ = s.write_all(&u32::MAX.to_le_bytes());
    let _ = s.write_all(&[0xAB; 1000]);
    let got = read_until_closed(&mut s).expect("agent must hang up on garbage");
    assert!(got.is_empty());
    // 4. Right secret, a header that is not a flatbuffer.
    let mut s = TcpStream::connect(&a.addr).unwrap();
    monarch_core::auth::connect_handshake(&mut s, SECRET.as_bytes(), "tcp:127.0.0.1:4").unwrap();
    let _ = s.write_all(&16u32.to_le_bytes());
    let _ = s.write_all(&[0xFF; 16]);
    let got = read_until_closed(&mut s).expect("agent must hang up on garbage");
    assert!(got.is_empty());
    // The agent lives on and serves a proper controller.
    assert!(a.alive());
    let c = Controller {
        rt: Runtime::new().unwrap(),
    };
    let (_hm, _pm, am) = spawn_2x2(&c, &[&a, &a]);
    assert_eq!(ranks(&call(&am, "rank", &[])), [Ok(0), Ok(1), Ok(2), Ok(3)]);
    assert!(a.alive());
}

#[test]
fn a_controller_with_the_wrong_secret_cannot_attach() {
    init();
    let a = Agent::start("912bde144565e01cb02ef6e021e053e3d2c627c10fd118cf63e3f4451d1da2d3");
    let c = Controller {
        rt: Runtime::new().unwrap(),
    };
    let e = match HostMesh::attach(&c.rt, std::slice::from_ref(&a.addr)) {
        Ok(_) => panic!("attached to an agent of another job"),
        Err(e) => e,
    };
    assert!(e.message.contains("authenticate"), "{e}");
}

fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        if after.split(' ').nth(1).and_then(|x| x.parse::<u32>().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

#[test]
fn sigterm_stops_the_agent_and_its_procs() {
    init();
    let mut a = Agent::start(SECRET);
    let c = Controller {
        rt: Runtime::new().unwrap(),
    };
    let (_hm, _pm, am) = spawn_2x2(&c, &[&a, &a]);
    assert_eq!(call(&am, "rank", &[]).values.len(), 4);
    let procs = children_of(a.child.id());
    assert_eq!(procs.len(), 4, "agent children: {procs:?}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(a.child.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    let status = loop {
        if let Some(s) = a.child.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < HANG, "agent did not exit on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    for p in procs {
        assert!(
            !std::path::Path::new(&format!("/proc/{p}")).exists()
                || std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .map(|s| s.contains(") Z"))
                    .unwrap_or(true),
            "proc {p} outlived its agent"
        );
    }
    // The controller sees those ranks fail (per point, or the whole call
    // refused once supervision has recorded the failure).
    if let Ok(f) = am.call("rank", &[], CallMode::All) {
        let r = ranks(&wait(&f.unwrap()));
        assert!(r.iter().all(|v| v.is_err()), "{r:?}");
    }
}

/// Connected Unix sockets bound under the agent's socket directory
/// (accepted connections carry the listener's path in /proc/net/unix).
fn unix_conns_under(agent_pid: u32) -> usize {
    let want = format!("/{agent_pid}-");
    std::fs::read_to_string("/proc/net/unix")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // St 03 = connected; a path under the agent's directory.
            f.len() >= 8 && f[5] == "03" && f[7].contains(&want) && f[7].ends_with(".sock")
        })
        .count()
}

#[test]
fn procs_of_one_agent_talk_over_unix_sockets() {
    init();
    let a = Agent::start(SECRET);
    let c = Controller {
        rt: Runtime::new().unwrap(),
    };
    let hm = HostMesh::attach(&c.rt, std::slice::from_ref(&a.addr)).unwrap();
    let argv = vec![env!("CARGO_BIN_EXE_monarch").to_string(), "worker".into()];
    let pm = hm.spawn_procs(&["gpus".into()], &[4], &argv, &[]).unwrap();
    let (am, ready) = pm.spawn_actors("e", "echo", &[]).unwrap();
    wait(&ready);
    // Fan-out 2: rank 0 forwards casts (the spawn too) to ranks 2 and 3,
    // on the same host.
    assert_eq!(ranks(&call(&am, "rank", &[])), [Ok(0), Ok(1), Ok(2), Ok(3)]);
    assert!(
        unix_conns_under(a.child.id()) >= 2,
        "procs of one agent did not connect over Unix sockets"
    );
    wait(&pm.stop());
}

#[test]
fn hung_remote_procs_fail_by_heartbeat_and_their_agent_kills_them() {
    init();
    let a0 = Agent::start(SECRET);
    let a1 = Agent::start(SECRET);
    let c = Controller {
        rt: Runtime::new().unwrap(),
    };
    let (_hm, _pm, am) = spawn_2x2(&c, &[&a0, &a1]);
    assert_eq!(ranks(&call(&am, "rank", &[])), [Ok(0), Ok(1), Ok(2), Ok(3)]);
    // Freeze host 1's procs: their TCP connections stay up, only the
    // heartbeats tell.
    let frozen = children_of(a1.child.id());
    assert_eq!(frozen.len(), 2);
    for p in &frozen {
        // SAFETY: signalling a process our agent started.
        unsafe { libc::kill(*p as i32, libc::SIGSTOP) };
    }
    let t = Instant::now();
    let f = am.call("rank", &[], CallMode::All).unwrap().unwrap();
    let r = ranks(&wait(&f));
    assert_eq!(r[..2], [Ok(0), Ok(1)], "{r:?}");
    for v in &r[2..] {
        let e = v.as_ref().unwrap_err();
        assert!(e.contains("heartbeats"), "{e}");
    }
    assert!(t.elapsed() < HANG);
    // The agent killed them (SIGKILL works on stopped processes).
    let deadline = Instant::now() + HANG;
    while frozen.iter().any(|p| {
        std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| !s.contains(") Z"))
    }) {
        assert!(Instant::now() < deadline, "hung procs were not killed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn procs_of_a_hung_agent_fail_by_the_agents_heartbeat() {
    init();
    let a0 = Agent::start(SECRET);
    let mut a1 = Agent::start(SECRET);
    let c = Controller {
        rt: Runtime::new().unwrap(),
    };
    let (_hm, _pm, am) = spawn_2x2(&c, &[&a0, &a1]);
    assert_eq!(ranks(&call(&am, "rank", &[])), [Ok(0), Ok(1), Ok(2), Ok(3)]);
    // Freeze agent 1 (its procs keep running): the controller probes the
    // agents, not their procs, so only the agent's silence tells.
    // SAFETY: signalling a process we started.
    unsafe { libc::kill(a1.child.id() as i32, libc::SIGSTOP) };
    let deadline = Instant::now() + HANG;
    let e = loop {
        assert!(Instant::now() < deadline, "the hung agent went unnoticed");
        match am.call("rank", &[], CallMode::All) {
            Err(e) => break e.message,
            Ok(f) => {
                let r = ranks(&wait(&f.unwrap()));
                assert_eq!(r[..2], [Ok(0), Ok(1)], "{r:?}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    assert!(e.contains("host agent") && e.contains("heartbeats"), "{e}");
    // Host 0's procs still answer.
    let f = am.at("hosts", 0).unwrap().call("rank", &[], CallMode::All);
    assert_eq!(ranks(&wait(&f.unwrap().unwrap())), [Ok(0), Ok(1)]);
    // SAFETY: as above; the agent then stops on SIGTERM at drop.
    unsafe { libc::kill(a1.child.id() as i32, libc::SIGCONT) };
    assert!(a1.alive());
}
