//! The data-plane server under connections that never finish their
//! handshake: each pending handshake holds a thread, so they are capped and
//! cut at the handshake deadline, and real transfers work again after.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use monarch_rdma::{self as rdma, Backend};

mod common;
use common::{pattern, serve_owner_if_asked, Owner};

const TOKEN: &str = "rdma-slow-loris-test-token";
const OWNER_VAR: &str = "RDMA_SLOW_LORIS_OWNER";
/// The owner's cap on pending handshakes and their deadline.
const MAX_PENDING: usize = 40;
const DEADLINE_MS: u64 = 1_000;

#[test]
fn owner_child() {
    serve_owner_if_asked(OWNER_VAR, TOKEN, "unix:slow-loris-owner");
}

fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn trickling_connections_hold_at_most_the_cap_and_are_cut_at_the_deadline() {
    rdma::init(TOKEN, "unix:slow-loris-reader");
    let mut owner = Owner::start(OWNER_VAR, 1 << 16, |cmd| {
        cmd.env("MONARCH_MAX_PENDING_HANDSHAKES", MAX_PENDING.to_string())
            .env("MONARCH_HANDSHAKE_TIMEOUT_MS", DEADLINE_MS.to_string());
    });
    let buf = owner.handle_via(Backend::Tcp);
    // A first transfer starts the owner's server threads.
    let mut dst = vec![0u8; 4096];
    buf.read_into(0, dst.as_mut_ptr() as usize, dst.len())
        .unwrap();
    let pid = owner.child.id();
    let before = threads_of(pid);
    let addr = buf.descriptor().tcp_addr.clone();

    // 300 connections that send one byte of a handshake and then trickle.
    let mut held = Vec::new();
    for _ in 0..300 {
        if let Ok(mut c) = TcpStream::connect(&addr) {
            let _ = c.write_all(b"M");
            held.push(c);
        }
    }
    let mut most = 0;
    let until = Instant::now() + Duration::from_millis(DEADLINE_MS / 2);
    while Instant::now() < until {
        for c in &mut held {
            let _ = c.write_all(b"O");
        }
        most = most.max(threads_of(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        most <= before + MAX_PENDING + 2,
        "the owner went from {before} to {most} threads with a cap of {MAX_PENDING}"
    );

    // Past the deadline every trickling connection is closed, its thread
    // gone, and a real transfer is served.
    let deadline = Instant::now() + Duration::from_secs(30);
    while threads_of(pid) > before && Instant::now() < deadline {
        for c in &mut held {
            let _ = c.write_all(b"N");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        threads_of(pid) <= before,
        "threads of pending handshakes outlived the deadline"
    );
    dst.fill(0);
    buf.read_into(0, dst.as_mut_ptr() as usize, dst.len())
        .unwrap();
    for (i, &b) in dst.iter().enumerate() {
        assert_eq!(b, pattern(i), "byte {i}");
    }
    drop(held);
    owner.kill();
}
