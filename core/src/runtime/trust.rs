//! Who may send what: a frame from an authenticated peer may only affect
//! what that peer may address (the table is in docs/security.md). Every
//! peer holds the job secret, so authentication alone says nothing about
//! which of this proc's ports, actors and meshes a peer has a say in.
//!
//! - Reply ports are capabilities: their ids are unpredictable (a keyed
//!   SipHash of a counter), so a peer can only answer a port whose id it
//!   was sent (or handed by a proc that was).
//! - A supervision report about actor mesh K is taken only from a proc of
//!   K: a failure only for a mesh this proc spawned, an undeliverable
//!   notice only for a mesh this proc sent one-way messages to.
//! - A stop of an actor is taken only from the proc that spawned it, a
//!   stop of the whole proc only from its controller.
//! - The sender a frame names (where answers go) is the connection's own
//!   peer, except in a cast relayed by a forwarding proc; no peer speaks
//!   for this proc itself (a proc casting to its own mesh delivers its own
//!   points itself and the tree routes around it, see `multicast`).
//!
//! A refused frame is logged (at most `LOG_BURST` lines per `LOG_WINDOW`,
//! then a count) and dropped; it never ends a connection or the proc.

use parking_lot::Mutex;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Inner;
use crate::wire::Envelope;

/// How many refusals are logged per window before they are only counted.
const LOG_BURST: u32 = 10;
const LOG_WINDOW: Duration = Duration::from_secs(10);

/// The key port ids are drawn with, and the rate limit of the refusal log.
pub(super) struct Trust {
    port_key: RandomState,
    log: Mutex<LogWindow>,
}

struct LogWindow {
    start: Instant,
    logged: u32,
    suppressed: u64,
}

impl Default for Trust {
    fn default() -> Self {
        Trust {
            // std's RandomState: SipHash-1-3 with a 128-bit key from the OS.
            port_key: RandomState::new(),
            log: Mutex::new(LogWindow {
                start: Instant::now(),
                logged: 0,
                suppressed: 0,
            }),
        }
    }
}

impl Trust {
    /// An unpredictable, non-zero port id for counter value `n` (distinct
    /// counters give distinct ids except with probability ~2^-64).
    pub(super) fn port_id(&self, n: u64) -> u64 {
        let mut h = self.port_key.build_hasher();
        h.write_u64(n);
        h.finish().max(1)
    }

    /// Log that a frame from `peer` was refused (rate-limited).
    pub(super) fn refused(&self, peer: &str, what: &str, why: &str) {
        let mut w = self.log.lock();
        if w.start.elapsed() >= LOG_WINDOW {
            if w.suppressed > 0 {
                tracing::warn!(
                    count = w.suppressed,
                    "more frames refused in the last {:?} (not logged one by one)",
                    LOG_WINDOW
                );
            }
            *w = LogWindow {
                start: Instant::now(),
                logged: 0,
                suppressed: 0,
            };
        }
        if w.logged < LOG_BURST {
            w.logged += 1;
            tracing::warn!(%peer, frame = what, reason = why, "frame refused and dropped");
        } else {
            w.suppressed += 1;
        }
    }
}

impl Inner {
    /// A fresh reply port id (see `Trust::port_id`).
    pub(super) fn new_port_id(&self) -> u64 {
        self.trust
            .port_id(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Whether the connection `peer` came on is the one to proc `name`
    /// (the same name, or one connection known under both).
    pub(super) fn is_connection_of(&self, peer: &str, name: &str) -> bool {
        if peer == name {
            return true;
        }
        match (self.peers.get(peer), self.peers.get(name)) {
            (Some(a), Some(b)) => Arc::ptr_eq(&a, &b),
            _ => false,
        }
    }

    /// Check (and, when empty, fill in) the sender `env` names, which is
    /// where answers and failure reports for it go. Err: why it is refused.
    pub(super) fn check_sender(&self, peer: &str, env: &mut Envelope) -> Result<(), &'static str> {
        if env.sender.is_empty() {
            env.sender = peer.to_string();
            return Ok(());
        }
        if peer == self.id.addr {
            // Our own frame, dispatched in-process.
            return Ok(());
        }
        if env.sender == self.id.addr {
            return Err("a peer named this proc as the sender");
        }
        if env.is_relayed() || self.is_connection_of(peer, &env.sender) {
            return Ok(());
        }
        Err("the sender named is not the proc on this connection")
    }

    /// Whether `peer` may stop the whole proc: only its controller (the
    /// proc that started it) may, and this proc itself.
    pub(super) fn may_stop_proc(&self, peer: &str) -> bool {
        peer == self.id.addr
            || self
                .id
                .controller
                .as_deref()
                .is_some_and(|c| self.is_connection_of(peer, c))
    }

    /// Whether the frame of `sender` may stop actor `key` hosted here:
    /// only the proc that spawned it may (and this proc itself).
    pub(super) fn may_stop_actor(&self, sender: &str, key: &str) -> bool {
        if sender == self.id.addr {
            return true;
        }
        match self.supervision.spawner_of(key) {
            Some(s) => s == sender,
            // Not hosted here: the stop is answered "undeliverable".
            None => true,
        }
    }
}
