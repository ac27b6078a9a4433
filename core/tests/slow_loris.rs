//! Slow-loris against a runtime's listeners, with real sockets: over a
//! thousand unauthenticated connections that trickle a byte at a time
//! neither cost a thread each nor keep an authenticated peer out, and a
//! handshake that trickles on is cut at its deadline (for the whole
//! handshake, not per read).
//!
//! The settings are set once, before any runtime of this binary starts:
//! a 1 s handshake deadline, and caps above the attack's size (the caps
//! themselves are tested against a host agent, `cli/tests/slow_loris.rs`).
//! The TCP attacker connects from 127.0.0.2, the peers from 127.0.0.1.
//! Timeouts only turn a hang into a failure.

use std::net::Ipv4Addr;
use std::sync::Once;
use std::time::Duration;

use monarch_core::Runtime;
use parking_lot::Mutex;

mod loris;
use loris::{raise_fd_limit, threads_of, Loris, Target};

/// Upper bound for any single wait; only there to turn a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

const SECRET: &str = "slow-loris-test-secret-0123456789abcdef";

/// Attack connections per test.
const ATTACKERS: usize = 1100;

/// Where the TCP attacker connects from.
const ATTACKER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// Threads a runtime may add under attack (beyond its own, counted before).
const THREAD_SLACK: usize = 16;

/// The thread counts of one test are not disturbed by another's runtime.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        raise_fd_limit();
        // Set once, before any runtime of this test binary reads them.
        std::env::set_var("MONARCH_JOB_TOKEN", SECRET);
        std::env::set_var("MONARCH_HANDSHAKE_TIMEOUT_MS", "1000");
        std::env::set_var("MONARCH_MAX_PENDING_HANDSHAKES", "4000");
        std::env::set_var("MONARCH_MAX_PENDING_PER_SOURCE", "4000");
    });
}

fn tcp_runtime() -> Runtime {
    Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        SECRET.to_string(),
    )
    .expect("listen on 127.0.0.1")
}

/// An authenticated peer (a runtime of its own) connects to `rt` and its
/// message arrives.
fn peer_gets_through(rt: &Runtime) {
    let peer = tcp_runtime();
    let port = rt.open_port(true);
    peer.port_send(&port.port_ref(), Ok(&[b"still here"]))
        .expect("an authenticated peer connects and sends");
    let fut = port.recv();
    assert!(
        fut.wait(Some(HANG)),
        "an authenticated peer's message did not arrive under attack"
    );
    let vm = fut.take().expect("ready").expect("a value mesh");
    assert_eq!(vm.values[0].parts(), [b"still here".to_vec()]);
    peer.shutdown();
}

/// Attack `rt`'s listener at `target`; check threads, a peer, and closing.
fn survive_attack(rt: &Runtime, target: Target) {
    let before = threads_of("self");
    let attack = Loris::start(target, ATTACKERS, Duration::from_millis(500));
    assert!(
        attack.wait_rounds(3, HANG),
        "the attacker could not hold its connections open"
    );
    let during = threads_of("self");
    eprintln!("under attack: threads {before} -> {during}");
    // The attacker is one thread; the runtime may add none per connection.
    assert!(
        during <= before + 1 + THREAD_SLACK,
        "{ATTACKERS} trickling connections raised the threads from {before} to {during}"
    );
    peer_gets_through(rt);
    // Every attack connection is closed (deadline or caps) though each
    // keeps sending a byte per tick, well within any per-read timeout.
    assert!(
        attack.wait_closed(ATTACKERS, HANG),
        "only {} of {ATTACKERS} trickling connections were closed",
        attack.closed()
    );
    drop(attack);
    rt.check_running().expect("the runtime survived");
}

#[test]
fn a_runtime_tcp_listener_survives_slow_loris() {
    let _one = ONE_AT_A_TIME.lock();
    init();
    let rt = tcp_runtime();
    survive_attack(&rt, Target::parse(rt.addr()).from(ATTACKER_IP));
    rt.shutdown();
}

#[test]
fn a_controller_unix_listener_survives_slow_loris() {
    let _one = ONE_AT_A_TIME.lock();
    init();
    let rt = Runtime::new().expect("controller runtime");
    assert!(rt.addr().starts_with("unix:"), "{}", rt.addr());
    survive_attack(&rt, Target::parse(rt.addr()));
    rt.shutdown();
}

#[test]
fn a_handshake_that_trickles_on_is_cut_at_its_deadline() {
    let _one = ONE_AT_A_TIME.lock();
    init();
    let rt = tcp_runtime();
    // A byte every 100 ms: far within a per-read timeout, yet the whole
    // handshake (1 s here) runs out.
    let attack = Loris::start(Target::parse(rt.addr()), 1, Duration::from_millis(100));
    assert!(
        attack.wait_closed(1, Duration::from_secs(20)),
        "a handshake sending a byte every 100 ms was still open after 20 s"
    );
    drop(attack);
    rt.shutdown();
}
