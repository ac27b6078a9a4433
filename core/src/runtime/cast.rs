//! `Relays`: a forwarding proc's collections of its subtrees' replies to
//! casts (for a gather, the replies of a cast's subtree are collected here
//! and sent up together); `Tables`: the addresses of this proc's subtree
//! in each proc mesh it forwards for; and the cast fields of a forwarded
//! envelope (node lists, or the view). The routing itself is
//! `crate::multicast`; forwarding a received cast is in `dispatch`.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use crate::multicast::{Node, ViewIndex, FORWARD_ONLY};
use crate::value::PointValue;
use crate::wire::Envelope;

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

impl Relay {
    /// The procs owing replies to this relay.
    pub(super) fn owing(&self) -> impl Iterator<Item = &String> {
        self.owed.keys()
    }

    /// The failures to fill into this relay (local port `port`) when
    /// `peer` is lost: (port, slot, message) for each slot it owes.
    pub(super) fn owed_failures(
        &self,
        port: u64,
        peer: &str,
        why: &str,
    ) -> Vec<(u64, u64, String)> {
        self.owed
            .get(peer)
            .into_iter()
            .flatten()
            .map(|&(slot, own)| {
                let msg = if own {
                    why.to_string()
                } else {
                    format!("{why} (it was forwarding this cast to this point)")
                };
                (port, slot, msg)
            })
            .collect()
    }
}

/// What filling a slot of a relay came to.
pub(super) enum RelayFill {
    /// The port is not a relay of ours: the value, given back.
    NotRelay(PointValue),
    /// Taken (or dropped: the slot was filled already); nothing goes up yet.
    Taken,
    /// The last slot: the relay is closed, its values go up to `port` at
    /// `upstream`.
    Complete {
        upstream: String,
        port: u64,
        values: Vec<(u64, PointValue)>,
    },
}

/// The relays of this proc, by local port id.
#[derive(Default)]
pub(crate) struct Relays(Mutex<HashMap<u64, Arc<Relay>>>);

impl Relays {
    /// Relays in flight.
    pub(crate) fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Open relay `id` collecting `slots` (each listed once counts once)
    /// for port `port` at `upstream`; `owed`: per first hop below us, the
    /// slots it relays to us and whether each is the hop's own point.
    /// None when there is no slot to collect (it would never complete).
    pub(super) fn open(
        &self,
        id: u64,
        upstream: String,
        port: u64,
        owed: HashMap<String, Vec<(u64, bool)>>,
        slots: Vec<u64>,
    ) -> Option<Arc<Relay>> {
        let values: HashMap<u64, Option<PointValue>> =
            slots.into_iter().map(|s| (s, None)).collect();
        if values.is_empty() {
            return None;
        }
        let r = Arc::new(Relay {
            upstream,
            port,
            owed,
            st: Mutex::new(RelayState {
                remaining: values.len(),
                values,
            }),
        });
        self.0.lock().insert(id, r.clone());
        Some(r)
    }

    /// A reply for local port `port`.
    pub(super) fn fill(&self, port: u64, slot: u64, value: PointValue) -> RelayFill {
        let Some(r) = self.0.lock().get(&port).cloned() else {
            return RelayFill::NotRelay(value);
        };
        let done = {
            let mut st = r.st.lock();
            match st.values.get_mut(&slot) {
                Some(cell @ None) => *cell = Some(value),
                _ => return RelayFill::Taken,
            }
            st.remaining -= 1;
            st.remaining == 0
        };
        if !done {
            return RelayFill::Taken;
        }
        self.0.lock().remove(&port);
        let values =
            r.st.lock()
                .values
                .drain()
                .map(|(s, v)| (s, v.unwrap_or_else(|| PointValue::error("no reply"))))
                .collect();
        RelayFill::Complete {
            upstream: r.upstream.clone(),
            port: r.port,
            values,
        }
    }

    /// The failures to fill when `peer` is lost, over every relay in
    /// flight: (port, slot, message).
    pub(super) fn owed_failures(&self, peer: &str, why: &str) -> Vec<(u64, u64, String)> {
        let all: Vec<(u64, Arc<Relay>)> =
            self.0.lock().iter().map(|(k, r)| (*k, r.clone())).collect();
        all.iter()
            .flat_map(|(port, r)| r.owed_failures(*port, peer, why))
            .collect()
    }
}

/// Address tables of the proc meshes this proc forwards casts for, by
/// table id (`multicast::table_id`): base rank -> address, for the nodes
/// of this proc's subtree. Learned from the node lists of SpawnActor casts,
/// so that later casts to the mesh can carry the view alone.
#[derive(Default)]
pub(crate) struct Tables {
    by_id: Mutex<HashMap<u64, HashMap<usize, String>>>,
    /// The last view a cast carried, indexed (casts to one mesh repeat
    /// the same encoded shape, shared by the frame decoder).
    last_view: Mutex<Option<LastView>>,
}

impl Tables {
    /// The view encoded in `shape`, indexed; None if it does not decode
    /// or names a base rank twice.
    pub(super) fn view(&self, shape: &Arc<[u8]>) -> Option<Arc<ViewIndex>> {
        if let Some((bytes, v)) = &*self.last_view.lock() {
            if Arc::ptr_eq(bytes, shape) || **bytes == **shape {
                return Some(v.clone());
            }
        }
        let v = Arc::new(ViewIndex::new(&crate::wire::decode_shape(shape).ok()?).ok()?);
        *self.last_view.lock() = Some((shape.clone(), v.clone()));
        Some(v)
    }

    /// Keep the addresses of `ranks` (parallel to `addrs`) in table `id`.
    pub(super) fn learn(&self, id: u64, ranks: &[u64], addrs: &[String]) {
        if id == 0 || ranks.len() != addrs.len() {
            return;
        }
        let mut all = self.by_id.lock();
        let t = all.entry(id).or_default();
        for (&r, a) in ranks.iter().zip(addrs) {
            if !a.is_empty() && !t.contains_key(&(r as usize)) {
                t.insert(r as usize, a.clone());
            }
        }
    }

    /// The addresses of `ranks` in table `id`; None if the table or one
    /// of them is unknown here.
    pub(super) fn addrs(&self, id: u64, ranks: impl Iterator<Item = usize>) -> Option<Vec<String>> {
        let all = self.by_id.lock();
        let t = all.get(&id)?;
        ranks.map(|r| t.get(&r).cloned()).collect()
    }

    /// Number of tables known (for tests).
    pub(crate) fn len(&self) -> usize {
        self.by_id.lock().len()
    }
}

/// An encoded shape and its index.
type LastView = (Arc<[u8]>, Arc<ViewIndex>);

/// Fill `env`'s cast fields for sending the view it carries (`env.shape`)
/// to node `to`, a proc of a proc mesh of `n` procs: the receiver lists its
/// own subtree's part of the view.
pub(crate) fn set_view_fields(env: &mut Envelope, to: Node, n: usize, fanout: usize) {
    if to.slot != FORWARD_ONLY {
        env.message_rank = to.slot;
        env.reply_slot = to.slot;
    }
    env.cast_ranks.clear();
    env.cast_ranks.push(to.rank as u64);
    env.cast_addrs.clear();
    env.cast_slots.clear();
    env.cast_slots.push(to.slot);
    env.cast_fanout = fanout as u32;
    env.cast_n = n as u64;
}

/// Fill `env`'s cast fields for sending `nodes` (first: the receiver).
pub(crate) fn set_cast_fields(
    env: &mut Envelope,
    nodes: &[Node],
    addr_of: &dyn Fn(usize) -> String,
    fanout: usize,
) {
    let me = nodes[0];
    env.cast_n = 0;
    if me.slot != FORWARD_ONLY {
        env.message_rank = me.slot;
        env.reply_slot = me.slot;
    }
    if nodes.len() == 1 && me.slot != FORWARD_ONLY {
        // Just this point: nothing to forward. Its rank and slot stay, so
        // the receiver knows the frame is part of a cast (a forwarder may
        // send it on behalf of the cast's sender).
        env.cast_ranks.clear();
        env.cast_ranks.push(me.rank as u64);
        env.cast_addrs.clear();
        env.cast_slots.clear();
        env.cast_slots.push(me.slot);
        return;
    }
    env.cast_ranks = nodes.iter().map(|n| n.rank as u64).collect();
    env.cast_addrs = nodes.iter().map(|n| addr_of(n.rank)).collect();
    env.cast_slots = nodes.iter().map(|n| n.slot).collect();
    env.cast_fanout = fanout as u32;
}
