//! Heartbeats: a process that started procs probes each of them every
//! `interval` with a `Heartbeat` frame; a proc answers `HeartbeatAck` from
//! whichever thread reads its socket (the binding's thread waiting for
//! events, or the I/O thread while the binding is busy), so a proc whose
//! actors are busy still answers, and only a hung process (stopped,
//! deadlocked in the kernel, swapped to death) does not. A proc that has not
//! answered for `timeout` is declared failed: it is killed (SIGKILL) and its
//! exit is reported with cause `HeartbeatLost`, handled like any death.
//!
//! `MONARCH_HEARTBEAT_TIMEOUT_MS` sets the timeout (default 10000; 0 turns
//! heartbeats off). The probe interval is a quarter of it, between 20 ms and
//! 1 s. An idle mesh of 8 procs costs 8 small frames and 8 wake-ups per
//! interval each way (see benches/supervision.py).

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::Inner;
use crate::wire::{Envelope, Kind};

/// The heartbeat timeout (None: heartbeats are off).
pub(super) fn timeout() -> Option<Duration> {
    static T: OnceLock<Option<Duration>> = OnceLock::new();
    *T.get_or_init(|| {
        let ms = std::env::var("MONARCH_HEARTBEAT_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(10_000);
        (ms > 0).then(|| Duration::from_millis(ms))
    })
}

fn interval(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

#[derive(Default)]
pub(super) struct Heartbeat {
    started: AtomicBool,
    /// When each ready child last answered (or became ready).
    pub(super) seen: Mutex<HashMap<String, Instant>>,
    /// Children declared hung (and killed).
    pub(super) lost: Mutex<HashSet<String>>,
}

impl Inner {
    /// Start probing this process's children (once; no-op when off).
    pub(super) fn start_heartbeat(self: &Arc<Self>) {
        let Some(t) = timeout() else { return };
        if self.hb.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(self);
        let r = std::thread::Builder::new()
            .name("monarch-heartbeat".into())
            .spawn(move || heartbeat_loop(weak, t));
        if let Err(e) = r {
            tracing::error!(error = %e, "cannot start the heartbeat thread");
            self.hb.started.store(false, Ordering::SeqCst);
        }
    }

    /// A child said Ready or answered a heartbeat.
    pub(super) fn heartbeat_seen(&self, peer: &str) {
        if self.hb.started.load(Ordering::Relaxed) {
            self.hb.seen.lock().insert(peer.to_string(), Instant::now());
        }
    }

    pub(super) fn heartbeat_lost(&self, addr: &str) -> bool {
        self.hb.lost.lock().contains(addr)
    }

    /// Answer a parent's heartbeat, never blocking the reading thread.
    pub(super) fn answer_heartbeat(&self, peer: &str) {
        let conn = self.peers.get(peer);
        let Some(conn) = conn else { return };
        let mut env = Envelope::new(Kind::HeartbeatAck);
        env.sender = self.addr.clone();
        self.buffer_small(&conn, &env);
    }

    pub(super) fn buffer_small(&self, conn: &crate::conn::Conn, env: &Envelope) {
        let mut fbb = flatbuffers::FlatBufferBuilder::with_capacity(128);
        let header = env.encode(&mut fbb);
        if conn.try_buffer(header, &[]).is_some() && !self.deferred.swap(true, Ordering::SeqCst) {
            self.io.kick.signal();
        }
    }

    /// One round: declare hung children failed, probe the others.
    fn heartbeat_round(&self, timeout: Duration) {
        let children: Vec<_> = self.children.all();
        let now = Instant::now();
        let mut live = Vec::new();
        {
            let mut seen = self.hb.seen.lock();
            seen.retain(|addr, _| {
                children
                    .iter()
                    .any(|c| &c.addr == addr && !c.exit.is_ready())
                    || self.remote_is_live(addr)
            });
            for c in &children {
                if c.exit.is_ready() || c.ready.peek().is_none_or(|r| r.is_err()) {
                    continue;
                }
                let last = *seen.entry(c.addr.clone()).or_insert(now);
                if now.duration_since(last) > timeout {
                    if self.hb.lost.lock().insert(c.addr.clone()) {
                        tracing::warn!(addr = %c.addr, ?timeout, "proc stopped answering heartbeats; killing it");
                        c.kill();
                    }
                } else {
                    live.push(c.addr.clone());
                }
            }
        }
        let mut env = Envelope::new(Kind::Heartbeat);
        env.sender = self.addr.clone();
        for addr in live {
            let conn = self.peers.get(&addr);
            if let Some(conn) = conn {
                self.buffer_small(&conn, &env);
            }
        }
    }
}

fn heartbeat_loop(rt: Weak<Inner>, timeout: Duration) {
    let every = interval(timeout);
    loop {
        std::thread::sleep(every);
        let Some(inner) = rt.upgrade() else { return };
        if inner.stopped.load(Ordering::SeqCst) {
            return;
        }
        inner.heartbeat_round(timeout);
        // Procs started by host agents (runtime/remote.rs).
        inner.remote_heartbeat_round(timeout);
    }
}
