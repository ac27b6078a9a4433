//! `Heartbeat`: when each proc this process started last answered, and
//! which were declared hung.
//!
//! A process that started procs probes each of them every `interval` with
//! a `Heartbeat` frame (procs started by host agents are probed by their
//! agent, which reports the hung ones; the controller probes the agents,
//! so it sends O(hosts) probes, not O(procs)); a proc answers `HeartbeatAck` from whichever thread
//! reads its socket (the binding's thread waiting for events, or the I/O
//! thread while the binding is busy), so a proc whose actors are busy still
//! answers, and only a hung process (stopped, deadlocked in the kernel,
//! swapped to death) does not. A proc that has not answered for `timeout`
//! is declared failed: it is killed (SIGKILL; a remote one by its agent)
//! and its exit is reported with cause `HeartbeatLost`, handled like any
//! death. The rounds themselves (who is probed, what a hung proc sets off)
//! are in `failures`.
//!
//! `MONARCH_HEARTBEAT_TIMEOUT_MS` sets the timeout (default 10000; 0 turns
//! heartbeats off). The probe interval is a quarter of it, between 20 ms and
//! 1 s. An idle mesh of 8 procs costs 8 small frames and 8 wake-ups per
//! interval each way (see benches/supervision.py).

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

/// How often procs are probed, for a given timeout.
pub(super) fn interval(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

/// The outcome of checking some procs: those to probe again, and those
/// newly declared hung.
#[derive(Default)]
pub(super) struct Checked {
    pub(super) live: Vec<String>,
    pub(super) hung: Vec<String>,
}

/// Heartbeat bookkeeping of this process's started procs.
#[derive(Default)]
pub(super) struct Heartbeat {
    /// Whether the probing thread runs.
    started: AtomicBool,
    /// Whether answers are recorded without that thread (a host agent
    /// probing its procs, see `Runtime::check_heartbeats`).
    recording: AtomicBool,
    /// When each ready proc last answered (or became ready).
    seen: Mutex<HashMap<String, Instant>>,
    /// Procs declared hung.
    lost: Mutex<HashSet<String>>,
}

impl Heartbeat {
    /// True for the one caller that is to start the probing thread.
    pub(super) fn claim_start(&self) -> bool {
        !self.started.swap(true, Ordering::SeqCst)
    }

    /// The probing thread could not be started.
    pub(super) fn start_failed(&self) {
        self.started.store(false, Ordering::SeqCst);
    }

    /// Proc `peer` said Ready or answered a heartbeat.
    pub(super) fn seen(&self, peer: &str) {
        if self.started.load(Ordering::Relaxed) || self.recording.load(Ordering::Relaxed) {
            self.seen.lock().insert(peer.to_string(), Instant::now());
        }
    }

    /// Record answers from now on, without a probing thread.
    pub(super) fn record(&self) {
        self.recording.store(true, Ordering::Relaxed);
    }

    /// Whether proc `addr` was declared hung.
    pub(super) fn is_lost(&self, addr: &str) -> bool {
        self.lost.lock().contains(addr)
    }

    /// Forget proc `addr` (a new one answers there).
    pub(super) fn forget(&self, addr: &str) {
        self.seen.lock().remove(addr);
        self.lost.lock().remove(addr);
    }

    /// Forget the procs for which `keep` is false.
    pub(super) fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.seen.lock().retain(|addr, _| keep(addr));
    }

    /// Check `addrs` (procs that said Ready and are running): one not seen
    /// for `timeout` is declared hung (once), the others are live.
    pub(super) fn check(
        &self,
        addrs: impl IntoIterator<Item = String>,
        timeout: Duration,
    ) -> Checked {
        let now = Instant::now();
        let mut out = Checked::default();
        let mut seen = self.seen.lock();
        for addr in addrs {
            let last = *seen.entry(addr.clone()).or_insert(now);
            if now.duration_since(last) > timeout {
                if self.lost.lock().insert(addr.clone()) {
                    out.hung.push(addr);
                }
            } else {
                out.live.push(addr);
            }
        }
        out
    }
}
