//! Slow-loris against a real host agent (`monarch host` on 127.0.0.1):
//! over a thousand unauthenticated connections from two other sources
//! (127.0.0.2 and 127.0.0.3) trickle a byte at a time. The agent holds no
//! thread for them and no more descriptors than its caps allow, and a
//! controller attaches, spawns a proc through it and calls that proc
//! meanwhile.
//!
//! The agent runs with a 1 s handshake deadline, at most 100 pending
//! handshakes and 40 per source. Timeouts only turn a hang into a failure.

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::Duration;

use monarch_core::{HostMesh, MeshView};

/// Upper bound for any single wait; only there to turn a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

mod common;
use common::{call, ready_addr, terminate, wait, worker_argv, Controller};

#[path = "../../core/tests/loris/mod.rs"]
mod loris;
use loris::{fds_of, raise_fd_limit, threads_of, Loris, Target};

const SECRET: &str = "slow-loris-agent-test-secret-0123456789";

const MAX_PENDING: usize = 100;
const MAX_PER_SOURCE: usize = 40;

/// Attack connections from each of the two attacking sources.
const PER_ATTACKER: usize = 550;

fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        raise_fd_limit();
        // Set once, before any runtime of this test binary reads it.
        std::env::set_var("MONARCH_JOB_TOKEN", SECRET);
    });
}

/// A running `monarch host` with small handshake limits, killed on drop.
struct Agent {
    child: Child,
    addr: String,
}

impl Agent {
    fn start() -> Agent {
        let mut child = Command::new(env!("CARGO_BIN_EXE_monarch"))
            .args(["host", "--listen", "127.0.0.1:0"])
            .env("MONARCH_JOB_TOKEN", SECRET)
            .env("MONARCH_HANDSHAKE_TIMEOUT_MS", "1000")
            .env("MONARCH_MAX_PENDING_HANDSHAKES", MAX_PENDING.to_string())
            .env("MONARCH_MAX_PENDING_PER_SOURCE", MAX_PER_SOURCE.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start agent");
        let addr = ready_addr(&mut child);
        Agent { child, addr }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

#[test]
fn a_host_agent_survives_slow_loris_and_keeps_serving() {
    init();
    let agent = Agent::start();
    let pid = agent.child.id().to_string();
    let (threads_before, fds_before) = (threads_of(&pid), fds_of(&pid));
    let target = Target::parse(&agent.addr);
    let attackers: Vec<Loris> = [2, 3]
        .into_iter()
        .map(|last| {
            Loris::start(
                target.clone().from(Ipv4Addr::new(127, 0, 0, last)),
                PER_ATTACKER,
                Duration::from_millis(500),
            )
        })
        .collect();
    for a in &attackers {
        assert!(
            a.wait_rounds(3, HANG),
            "the attacker could not keep its connections open"
        );
    }
    let (threads, fds) = (threads_of(&pid), fds_of(&pid));
    eprintln!(
        "agent under attack: threads {threads_before} -> {threads}, descriptors {fds_before} -> {fds}, \
         closed {:?}",
        attackers.iter().map(Loris::closed).collect::<Vec<_>>()
    );
    assert!(
        threads <= threads_before + 4,
        "{} trickling connections raised the agent's threads from {threads_before} to {threads}",
        2 * PER_ATTACKER
    );
    assert!(
        fds <= fds_before + MAX_PENDING,
        "the agent holds {fds} descriptors ({fds_before} before the attack; at most \
         {MAX_PENDING} pending handshakes allowed)"
    );
    // Connections beyond the caps were closed at once, not at the deadline.
    for a in &attackers {
        assert!(
            a.closed() >= PER_ATTACKER - MAX_PER_SOURCE,
            "{}",
            a.closed()
        );
    }
    // A controller (from 127.0.0.1) attaches, spawns and calls meanwhile.
    let c = Controller::new();
    let hm = HostMesh::attach(&c.rt, std::slice::from_ref(&agent.addr))
        .expect("attach the agent under attack");
    let pm = hm
        .spawn_procs(&["gpus".to_string()], &[1], &worker_argv(), &[])
        .expect("spawn a proc through the agent under attack");
    assert_eq!(pm.shape().sizes(), [1, 1]);
    let (am, ready) = pm.spawn_actors("e", "echo", &[]).unwrap();
    wait(&ready);
    assert_eq!(call(&am, "rank", &[]).values.len(), 1);
    wait(&pm.stop());
    drop(attackers);
}
