//! A proc's part in a multicast: pass a cast down to its subtree (the
//! routing itself is `crate::multicast`) and, for a gather, collect the
//! subtree's replies and send them up together.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Inner;
use crate::conn::Defer;
use crate::multicast::{route, Node, FORWARD_ONLY};
use crate::value::PointValue;
use crate::wire::{Envelope, Kind};

/// How long a forwarding proc waits before failing the points of a lost
/// child (see `relay_peer_lost`).
const RELAY_LOSS_GRACE: std::time::Duration = std::time::Duration::from_millis(1500);

/// Replies of one cast's subtree, collected by a forwarding proc and sent
/// up in one batch when all are in (or failed).
pub(crate) struct Relay {
    /// Where the batch goes (our parent in the tree, or the sender) and
    /// the port there.
    upstream: String,
    port: u64,
    /// Per child proc (first hop below us): the slots it relays to us,
    /// and whether each is the child's own point.
    owed: HashMap<String, Vec<(u64, bool)>>,
    st: Mutex<RelayState>,
}

struct RelayState {
    values: HashMap<u64, Option<PointValue>>,
    remaining: usize,
}

/// The relays of this proc, by local port id.
#[derive(Default)]
pub(crate) struct Relays(Mutex<HashMap<u64, Arc<Relay>>>);

impl Relays {
    fn get(&self, port: u64) -> Option<Arc<Relay>> {
        self.0.lock().get(&port).cloned()
    }

    /// Relays in flight.
    pub(crate) fn len(&self) -> usize {
        self.0.lock().len()
    }

    fn all(&self) -> Vec<(u64, Arc<Relay>)> {
        self.0.lock().iter().map(|(k, r)| (*k, r.clone())).collect()
    }
}

/// Fill `env`'s cast fields for sending `nodes` (first: the receiver).
pub(crate) fn set_cast_fields(
    env: &mut Envelope,
    nodes: &[Node],
    addr_of: &dyn Fn(usize) -> String,
    fanout: usize,
) {
    let me = nodes[0];
    if me.slot != FORWARD_ONLY {
        env.message_rank = me.slot;
        env.reply_slot = me.slot;
    }
    if nodes.len() == 1 && me.slot != FORWARD_ONLY {
        // Just this point: a plain message.
        env.cast_ranks.clear();
        env.cast_addrs.clear();
        env.cast_slots.clear();
        return;
    }
    env.cast_ranks = nodes.iter().map(|n| n.rank as u64).collect();
    env.cast_addrs = nodes.iter().map(|n| addr_of(n.rank)).collect();
    env.cast_slots = nodes.iter().map(|n| n.slot).collect();
    env.cast_fanout = fanout as u32;
}

impl Inner {
    /// Forward a cast received here to the first hops below us. Runs on the
    /// reading thread: frames are buffered (never blocking on a full
    /// socket) and flushed at once. A child that cannot be reached has its
    /// points answered with an error here.
    pub(super) fn forward_cast(self: &Arc<Self>, env: &mut Envelope, parts: &[Vec<u8>]) {
        let n = env.cast_ranks.len();
        if n <= 1 || env.cast_addrs.len() != n || env.cast_slots.len() != n {
            if n > 1 {
                tracing::warn!(sender = %env.sender, "malformed cast lists; not forwarded");
            }
            return;
        }
        let me = env.cast_ranks[0] as usize;
        let fanout = (env.cast_fanout as usize).max(2);
        let addrs: HashMap<usize, &str> = env
            .cast_ranks
            .iter()
            .zip(&env.cast_addrs)
            .map(|(&r, a)| (r as usize, a.as_str()))
            .collect();
        let lost = |r: usize| addrs.get(&r).is_some_and(|a| self.peers.is_lost(a));
        let members = env.cast_ranks[1..]
            .iter()
            .zip(&env.cast_slots[1..])
            .map(|(&r, &slot)| Node {
                rank: r as usize,
                slot,
            });
        let routes = route(Some(me), fanout, members, &lost, false);
        let part_refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        let addr_of = |r: usize| addrs.get(&r).map(|a| a.to_string()).unwrap_or_default();
        // For a gather, replies of our subtree come to a relay port of ours.
        let relay = (env.cast_relay && env.reply_port != 0)
            .then(|| {
                let mut owed: HashMap<String, Vec<(u64, bool)>> = HashMap::new();
                let mut slots: Vec<u64> = Vec::new();
                if env.cast_slots[0] != FORWARD_ONLY {
                    slots.push(env.cast_slots[0]);
                }
                for m in &routes.lost {
                    slots.push(m.slot);
                }
                for hop in &routes.hops {
                    let v = owed.entry(addr_of(hop[0].rank)).or_default();
                    for m in hop.iter().filter(|m| m.slot != FORWARD_ONLY) {
                        v.push((m.slot, m.rank == hop[0].rank));
                        slots.push(m.slot);
                    }
                }
                let values: HashMap<u64, Option<PointValue>> =
                    slots.into_iter().map(|s| (s, None)).collect();
                if values.is_empty() {
                    // Nothing will answer to it: it would never complete.
                    return None;
                }
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let r = Arc::new(Relay {
                    upstream: if env.reply_to.is_empty() {
                        env.sender.clone()
                    } else {
                        env.reply_to.clone()
                    },
                    port: env.reply_port,
                    owed,
                    st: Mutex::new(RelayState {
                        // Distinct slots: a slot listed twice is filled once.
                        remaining: values.len(),
                        values,
                    }),
                });
                self.cast_relays.0.lock().insert(id, r.clone());
                Some((id, r))
            })
            .flatten();
        let mut down = env.clone();
        if let Some((id, _)) = &relay {
            down.reply_to = self.addr.clone();
            down.reply_port = *id;
        }
        for m in &routes.lost {
            let why = format!(
                "proc {} was lost before this cast reached it",
                addr_of(m.rank)
            );
            self.cast_error(&down, m.slot, &why);
        }
        for hop in &routes.hops {
            let mut fwd = down.clone();
            set_cast_fields(&mut fwd, hop, &addr_of, fanout);
            let to = addr_of(hop[0].rank);
            if let Err(e) = self.send(&to, &fwd, &part_refs, Defer::Yes) {
                for m in hop.iter().filter(|m| m.slot != FORWARD_ONLY) {
                    let why = format!(
                        "cannot forward a cast to proc {to} (on the way to point {}): {}",
                        m.slot, e.message
                    );
                    self.cast_error(&down, m.slot, &why);
                }
            }
        }
        // Our own actor answers to the relay too.
        env.reply_to = down.reply_to;
        env.reply_port = down.reply_port;
        self.flush_deferred(None);
        // A child whose connection ended while we were setting up the
        // relay: its loss may have been handled before the relay existed
        // (it would then wait for that child forever).
        if let Some((id, r)) = relay {
            {
                let gone = self.peers.lost_among(r.owed.keys());
                for peer in gone {
                    let why = format!("lost connection to proc {peer}");
                    self.relay_fail_owed(&[(id, r.clone())], &peer, &why);
                }
            }
        }
    }

    /// A reply for relay port `port`; the value is given back when the
    /// port is not one of our relays.
    pub(super) fn relay_fill(
        self: &Arc<Self>,
        port: u64,
        slot: u64,
        value: PointValue,
    ) -> Option<PointValue> {
        let Some(r) = self.cast_relays.get(port) else {
            return Some(value);
        };
        let done = {
            let mut st = r.st.lock();
            match st.values.get_mut(&slot) {
                Some(cell @ None) => *cell = Some(value),
                _ => return None,
            }
            st.remaining -= 1;
            st.remaining == 0
        };
        if done {
            self.cast_relays.0.lock().remove(&port);
            let values: Vec<(u64, PointValue)> =
                r.st.lock()
                    .values
                    .drain()
                    .map(|(s, v)| (s, v.unwrap_or_else(|| PointValue::error("no reply"))))
                    .collect();
            // The subtree's replies go up together: buffered, then written
            // in one go.
            for (slot, v) in values {
                let mut reply = Envelope::new(Kind::Reply);
                reply.reply_port = r.port;
                reply.reply_slot = slot;
                let parts: Vec<&[u8]> = match &v {
                    PointValue::Ok(p) => p.iter().map(|p| p.as_slice()).collect(),
                    PointValue::Err { message, parts } => {
                        reply.is_error = true;
                        reply.error = message.clone();
                        parts.iter().map(|p| p.as_slice()).collect()
                    }
                };
                if let Err(e) = self.send(&r.upstream, &reply, &parts, Defer::Yes) {
                    tracing::warn!(upstream = %r.upstream, error = %e.message, "cannot relay cast replies");
                    break;
                }
            }
            self.flush_deferred(None);
        }
        None
    }

    /// `peer` was lost: the slots it was relaying to us fail.
    ///
    /// The failures are filled after a grace period: the cast's sender,
    /// when it started that proc, learns of the loss itself with a better
    /// message (the exit status) and fills those points first; the relay's
    /// errors then only matter to senders that could not know.
    pub(super) fn relay_peer_lost(self: &Arc<Self>, peer: &str, why: &str) {
        self.relay_fail_owed(&self.cast_relays.all(), peer, why);
    }

    /// Fail (after the grace period) the slots `peer` owes to `relays`.
    fn relay_fail_owed(self: &Arc<Self>, relays: &[(u64, Arc<Relay>)], peer: &str, why: &str) {
        let mut fails = Vec::new();
        for (port, r) in relays {
            let port = *port;
            for &(slot, own) in r.owed.get(peer).into_iter().flatten() {
                let msg = if own {
                    why.to_string()
                } else {
                    format!("{why} (it was forwarding this cast to this point)")
                };
                fails.push((port, slot, msg));
            }
        }
        if fails.is_empty() {
            return;
        }
        let me = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("monarch-relay-loss".into())
            .spawn(move || {
                std::thread::sleep(RELAY_LOSS_GRACE);
                let Some(me) = me.upgrade() else { return };
                for (port, slot, msg) in fails {
                    me.relay_fill(port, slot, PointValue::error(msg));
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start a relay-loss thread");
        }
    }

    /// Answer point `slot` of a cast with an error, on behalf of a proc we
    /// could not reach.
    fn cast_error(self: &Arc<Self>, env: &Envelope, slot: u64, why: &str) {
        if env.reply_port == 0 {
            tracing::warn!(slot, error = %why, "cast not delivered (nobody waits for it)");
            return;
        }
        let mut reply = Envelope::new(Kind::Reply);
        reply.reply_port = env.reply_port;
        reply.reply_slot = slot;
        reply.is_error = true;
        reply.error = why.to_string();
        let to = if env.reply_to.is_empty() {
            &env.sender
        } else {
            &env.reply_to
        };
        let _ = self.send(to, &reply, &[], Defer::Yes);
    }
}
