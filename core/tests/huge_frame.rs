//! An authenticated peer that declares a huge frame, over real TCP with the
//! real handshake: a frame over the runtime's limit
//! (`MONARCH_MAX_FRAME_PAYLOAD`, default 4 GiB) drops that peer at its
//! header, as a lost peer whose cause names the limit, and costs no memory;
//! a frame under it takes memory only as its bytes arrive. The runtime runs
//! on and serves a well-behaved peer meanwhile. The runtime is in this
//! process: its memory is this process's resident set.
//!
//! Timeouts only turn a hang into a failure.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use flatbuffers::FlatBufferBuilder;
use monarch_core::auth::connect_handshake;
use monarch_core::frame::write_frame;
use monarch_core::geometry::Shape;
use monarch_core::limits::{DEFAULT_MAX_FRAME_PAYLOAD, MAX_FRAME_PAYLOAD_VAR};
use monarch_core::wire::{ActorMeshRef, Envelope, Kind};
use monarch_core::{ActorMesh, CallMode, PointValue, Runtime};
use parking_lot::Mutex;

const SECRET: &str = "huge-frame-test-secret-0123456789abcdef";
const HANG: Duration = Duration::from_secs(60);
/// What the hostile peer streams after its header.
const STREAMED: usize = 256 << 20;
/// Growth of the resident set allowed while it does (well under STREAMED).
const RSS_SLACK: u64 = 64 << 20;

/// One test at a time: each measures this process's resident set.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn runtime() -> Runtime {
    assert!(
        std::env::var(MAX_FRAME_PAYLOAD_VAR).is_err(),
        "these tests assume the default frame limit"
    );
    Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        SECRET.to_string(),
    )
    .expect("listen on 127.0.0.1")
}

/// This process's resident set, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// A raw TCP peer of `rt` claiming the identity `me`, past the handshake.
fn authenticated_peer(rt: &Runtime, me: &str) -> TcpStream {
    let addr = rt.addr().strip_prefix("tcp:").expect("a TCP runtime");
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(HANG)).unwrap();
    s.set_write_timeout(Some(HANG)).unwrap();
    connect_handshake(&mut s, SECRET.as_bytes(), me).expect("handshake");
    s
}

/// Send a value to a port of `rt` from `s` and wait until `rt` has it (so
/// the connection is registered and read).
fn reach(rt: &Runtime, s: &mut TcpStream) {
    let port = rt.open_port(true);
    let mut env = Envelope::new(Kind::Reply);
    env.reply_port = port.id();
    env.part_sizes = vec![4];
    let header = env.encode(&mut FlatBufferBuilder::new()).to_vec();
    write_frame(s, &header, &[b"sync"]).expect("write a frame");
    let fut = port.recv();
    assert!(fut.wait(Some(HANG)), "the runtime did not read this peer");
}

/// Write a Message header declaring one part of `size` bytes, then stream
/// up to STREAMED bytes of it; returns how many were written before the
/// connection failed (STREAMED if it never did).
fn declare_and_stream(s: &mut TcpStream, size: u64) -> usize {
    let mut env = Envelope::new(Kind::Message);
    env.actor = "m.1".into();
    env.method = "m".into();
    env.part_sizes = vec![size];
    let header = env.encode(&mut FlatBufferBuilder::new()).to_vec();
    let mut head = (header.len() as u32).to_le_bytes().to_vec();
    head.extend(&header);
    s.write_all(&head).expect("write the header");
    let chunk = vec![7u8; 1 << 20];
    let mut sent = 0;
    while sent < STREAMED {
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    sent
}

/// An authenticated peer (a runtime of its own) sends to `rt` and its
/// message arrives.
fn well_behaved_peer_is_served(rt: &Runtime) {
    let peer = runtime();
    let port = rt.open_port(true);
    peer.port_send(&port.port_ref(), Ok(&[b"still here"]))
        .expect("an authenticated peer connects and sends");
    let fut = port.recv();
    assert!(fut.wait(Some(HANG)), "a well-behaved peer was not served");
    let vm = fut.take().expect("ready").expect("a value mesh");
    assert_eq!(vm.values[0].parts(), [b"still here".to_vec()]);
    peer.shutdown();
}

#[test]
fn a_frame_over_the_limit_drops_its_peer_with_the_cause_and_costs_no_memory() {
    let _one = ONE_AT_A_TIME.lock();
    let rt = runtime();
    const FORGER: &str = "tcp:127.0.0.1:1";
    let mut s = authenticated_peer(&rt, FORGER);
    reach(&rt, &mut s);
    // A call to an actor on the hostile peer: it owes the answer, so its
    // loss fails the call, with the cause.
    let shape = Shape::dense(vec!["x".into()], vec![1]).unwrap();
    let mesh_ref = ActorMeshRef {
        name: "m".into(),
        key: "m.1".into(),
        procs: vec![FORGER.into()],
        shape,
    };
    let mesh = ActorMesh::from_ref(&rt, &mesh_ref.encode()).expect("mesh");
    let call = mesh
        .call("m", &[], CallMode::One)
        .expect("sent on the peer's connection")
        .expect("a future");
    let before = rss();
    // Declared: the wire format's 64 GiB, 16 times the default limit.
    let sent = declare_and_stream(&mut s, 1 << 36);
    let grown = rss().saturating_sub(before);
    eprintln!("declared 64 GiB: {sent} bytes taken, resident set +{grown}");
    assert!(
        sent < STREAMED,
        "the runtime took all {sent} bytes of a 64 GiB frame"
    );
    assert!(
        grown < RSS_SLACK,
        "resident set grew by {grown} bytes ({sent} streamed)"
    );
    assert!(
        call.wait(Some(HANG)),
        "the peer's loss did not fail its call"
    );
    let err = match call.take().expect("ready") {
        Ok(vm) => match &vm.values[0] {
            PointValue::Err { message, .. } => message.clone(),
            PointValue::Ok(_) => panic!("the call to the dropped peer succeeded"),
        },
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(FORGER) && err.contains(MAX_FRAME_PAYLOAD_VAR),
        "the failure does not name the peer and the limit: {err}"
    );
    rt.check_running().expect("the runtime runs");
    well_behaved_peer_is_served(&rt);
    rt.shutdown();
}

#[test]
fn a_frame_under_the_limit_takes_memory_as_its_bytes_arrive() {
    let _one = ONE_AT_A_TIME.lock();
    let rt = runtime();
    let mut s = authenticated_peer(&rt, "tcp:127.0.0.1:2");
    reach(&rt, &mut s);
    let before = rss();
    // Declared: just under the limit; 16 MiB of it come, then nothing.
    let mut env = Envelope::new(Kind::Message);
    env.actor = "m.1".into();
    env.part_sizes = vec![DEFAULT_MAX_FRAME_PAYLOAD];
    let header = env.encode(&mut FlatBufferBuilder::new()).to_vec();
    s.write_all(&(header.len() as u32).to_le_bytes()).unwrap();
    s.write_all(&header).unwrap();
    const SENT: usize = 16 << 20;
    s.write_all(&vec![7u8; SENT]).unwrap();
    // Served meanwhile; by then the runtime has read what it could.
    well_behaved_peer_is_served(&rt);
    let grown = rss().saturating_sub(before);
    eprintln!("declared 4 GiB, sent {SENT}: resident set +{grown}");
    assert!(
        grown < SENT as u64 + RSS_SLACK,
        "resident set grew by {grown} bytes for {SENT} received of a declared 4 GiB"
    );
    rt.check_running().expect("the runtime runs");
    drop(s);
    rt.shutdown();
}
