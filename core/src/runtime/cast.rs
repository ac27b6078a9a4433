//! A proc's part in a multicast: pass a cast down to its subtree (the
//! routing itself is `crate::multicast`).

use std::collections::HashMap;
use std::sync::Arc;

use super::Inner;
use crate::conn::Defer;
use crate::multicast::{route, Node, FORWARD_ONLY};
use crate::wire::{Envelope, Kind};

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
    pub(super) fn forward_cast(self: &Arc<Self>, env: &Envelope, parts: &[Vec<u8>]) {
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
        let lost = |r: usize| {
            self.any_lost.load(std::sync::atomic::Ordering::Relaxed)
                && addrs.get(&r).is_some_and(|a| {
                    self.lost
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .contains(*a)
                })
        };
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
        for m in &routes.lost {
            let why = format!(
                "proc {} was lost before this cast reached it",
                addr_of(m.rank)
            );
            self.cast_error(env, m.slot, &why);
        }
        for hop in &routes.hops {
            let mut fwd = env.clone();
            set_cast_fields(&mut fwd, hop, &addr_of, fanout);
            let to = addr_of(hop[0].rank);
            if let Err(e) = self.send(&to, &fwd, &part_refs, Defer::Yes) {
                for m in hop.iter().filter(|m| m.slot != FORWARD_ONLY) {
                    let why = format!(
                        "cannot forward a cast to proc {to} (on the way to point {}): {}",
                        m.slot, e.message
                    );
                    self.cast_error(env, m.slot, &why);
                }
            }
        }
        self.flush_deferred(None);
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
