//! This proc's reply ports: gather ports (one value per slot, completing
//! a call's future) and stream ports, and the receiving end of a stream
//! port.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{HashMap, Runtime};
use crate::error::{Error, ErrorKind};
use crate::future::Future;
use crate::geometry::Shape;
use crate::multicast::LazyRelays;
use crate::port::{PortRef, StreamPort};
use crate::value::{PointValue, ValueMesh};
use crate::wire::ActorMeshRef;

/// Which proc is expected to fill each slot of a gather (its loss fails
/// the slot).
pub(crate) enum GatherPeers {
    /// Slot i: `peers[i]`.
    List(Vec<String>),
    /// Slot i: the proc of the i-th point of the mesh view, looked up only
    /// when a proc is lost (a cast lists no point when it is sent).
    Mesh(Arc<ActorMeshRef>),
}

impl GatherPeers {
    fn len(&self) -> usize {
        match self {
            GatherPeers::List(v) => v.len(),
            GatherPeers::Mesh(r) => r.shape.len(),
        }
    }

    /// The slots `peer` is expected to fill.
    fn slots_of(&self, peer: &str) -> Vec<u64> {
        let owes = |(slot, p): (usize, &String)| (p == peer).then_some(slot as u64);
        match self {
            GatherPeers::List(v) => v.iter().enumerate().filter_map(owes).collect(),
            GatherPeers::Mesh(r) => r
                .shape
                .base_ranks()
                .map(|b| &r.procs[b])
                .enumerate()
                .filter_map(owes)
                .collect(),
        }
    }
}

impl From<Vec<String>> for GatherPeers {
    fn from(v: Vec<String>) -> GatherPeers {
        GatherPeers::List(v)
    }
}

/// A reply port that gathers one value per slot.
struct Gather {
    shape: Shape,
    peers: GatherPeers,
    /// Which slots' paths went through a (lost) multicast forwarder.
    relays: Option<Arc<LazyRelays>>,
    state: Mutex<GatherState>,
    done: Future,
}

struct GatherState {
    values: Vec<Option<PointValue>>,
    remaining: usize,
}

impl Gather {
    fn finish(&self) {
        let values: Vec<PointValue> = {
            let mut st = self.state.lock();
            st.values
                .iter_mut()
                .map(|v| v.take().unwrap_or_else(|| PointValue::error("no reply")))
                .collect()
        };
        self.done.complete(Ok(ValueMesh {
            shape: self.shape.clone(),
            values,
        }));
    }
}

/// A slot a lost proc still owed: `relayed` when the proc was to forward
/// the cast to that point rather than answer it itself.
pub(super) struct Owed {
    pub(super) port: u64,
    pub(super) slot: u64,
    pub(super) relayed: bool,
}

/// The open reply ports of this proc, by port id.
pub(super) struct ReplyPorts {
    gathers: Mutex<HashMap<u64, Arc<Gather>>>,
    /// Stream ports (see `port`): channels and `stream()` casts.
    streams: Mutex<HashMap<u64, Arc<StreamPort>>>,
    /// How many replies the gather last opened, or last given a reply,
    /// still misses (`usize::MAX`: no gather yet). A hint for waiters
    /// (see `Inner::last_replies_close`).
    missing: AtomicUsize,
}

impl Default for ReplyPorts {
    fn default() -> Self {
        ReplyPorts {
            gathers: Mutex::new(HashMap::default()),
            streams: Mutex::new(HashMap::default()),
            missing: AtomicUsize::new(usize::MAX),
        }
    }
}

impl ReplyPorts {
    /// Open gather port `port`; `peers[i]` is the proc expected to fill
    /// slot `i`. `done` completes when every slot is filled.
    pub(super) fn open_gather(
        &self,
        port: u64,
        shape: Shape,
        peers: GatherPeers,
        relays: Option<Arc<LazyRelays>>,
        done: Future,
    ) {
        let n = peers.len();
        let g = Arc::new(Gather {
            shape,
            peers,
            relays,
            state: Mutex::new(GatherState {
                values: (0..n).map(|_| None).collect(),
                remaining: n,
            }),
            done,
        });
        if n == 0 {
            g.finish();
        } else {
            self.gathers.lock().insert(port, g);
            self.missing.store(n, Ordering::Relaxed);
        }
    }

    /// Fill a slot of gather port `port`; gives the value back when no
    /// such gather is open.
    #[inline]
    pub(super) fn fill_gather(
        &self,
        port: u64,
        slot: u64,
        value: PointValue,
    ) -> Option<PointValue> {
        let g = self.gathers.lock().get(&port).cloned();
        let Some(g) = g else {
            return Some(value);
        };
        let finished = {
            let mut st = g.state.lock();
            let Some(cell) = st.values.get_mut(slot as usize) else {
                tracing::warn!(port, slot, "reply to a slot that does not exist");
                return None;
            };
            if cell.is_some() {
                return None;
            }
            *cell = Some(value);
            st.remaining -= 1;
            self.missing.store(st.remaining, Ordering::Relaxed);
            st.remaining == 0
        };
        if finished {
            self.gathers.lock().remove(&port);
            g.finish();
        }
        None
    }

    /// Deliver to stream port `port` (dropped when it is closed).
    pub(super) fn deliver_stream(&self, port: u64, slot: u64, value: PointValue) {
        let s = self.streams.lock().get(&port).cloned();
        match s {
            Some(s) => {
                if s.deliver(slot, value) {
                    self.streams.lock().remove(&port);
                }
            }
            None => tracing::debug!(port, "reply to a closed port dropped"),
        }
    }

    pub(super) fn register_stream(&self, id: u64, port: Arc<StreamPort>) {
        self.streams.lock().insert(id, port);
    }

    pub(super) fn close_stream(&self, id: u64) {
        self.streams.lock().remove(&id);
    }

    /// The slots of every open port that `peer` still owes.
    pub(super) fn owed_by(&self, peer: &str) -> Vec<Owed> {
        let gathers: Vec<(u64, Arc<Gather>)> = self
            .gathers
            .lock()
            .iter()
            .map(|(k, g)| (*k, g.clone()))
            .collect();
        let mut owed = Vec::new();
        for (port, g) in gathers {
            for slot in g.peers.slots_of(peer) {
                owed.push(Owed {
                    port,
                    slot,
                    relayed: false,
                });
            }
            // Points the lost proc was to forward a cast to.
            let relayed = g.relays.as_ref().map(|r| r.slots_through(peer));
            for slot in relayed.into_iter().flatten() {
                owed.push(Owed {
                    port,
                    slot,
                    relayed: true,
                });
            }
        }
        let streams: Vec<(u64, Arc<StreamPort>)> = self
            .streams
            .lock()
            .iter()
            .map(|(k, s)| (*k, s.clone()))
            .collect();
        for (port, s) in streams {
            for slot in s.owed_by(peer) {
                owed.push(Owed {
                    port,
                    slot,
                    relayed: false,
                });
            }
        }
        owed
    }

    /// Fail every open port (the runtime stopped).
    pub(super) fn close_all(&self, why: &str) {
        let gathers: Vec<Arc<Gather>> = self.gathers.lock().drain().map(|(_, g)| g).collect();
        for g in gathers {
            g.done
                .complete(Err(Error::new(ErrorKind::Stopped, why.to_string())));
        }
        let streams: Vec<Arc<StreamPort>> = self.streams.lock().drain().map(|(_, s)| s).collect();
        for s in streams {
            s.close(why);
        }
    }

    /// See `missing`.
    #[inline]
    pub(super) fn missing_hint(&self) -> usize {
        self.missing.load(Ordering::Relaxed)
    }
}

/// The receiving end of a stream port of this proc. The port is closed
/// (later values to it dropped, pending `recv` futures failed with
/// `Stopped`) when the receiver is dropped.
pub struct PortReceiver {
    rt: Runtime,
    id: u64,
    port: Arc<StreamPort>,
}

impl PortReceiver {
    /// A future of the next value: a ValueMesh with one point (the value or
    /// the error that was sent). Futures complete in the order `recv` was
    /// called, with values in the order they arrived.
    pub fn recv(&self) -> Future {
        self.port.recv(self.rt.new_future())
    }

    /// A reference that others use to send to this port (slot 0).
    pub fn port_ref(&self) -> PortRef {
        PortRef {
            addr: self.rt.addr().to_string(),
            port: self.id,
            slot: 0,
        }
    }

    /// The port's id in this proc.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Record which multicast forwarders each slot's message went through.
    pub(crate) fn set_relays(&self, relays: Option<Arc<crate::multicast::LazyRelays>>) {
        self.port.set_relays(relays);
    }
}

impl Drop for PortReceiver {
    fn drop(&mut self) {
        self.rt.close_stream(self.id);
        // Futures still waiting for a value would otherwise never complete.
        self.port.close("the port's receiver was freed");
    }
}

impl Runtime {
    /// Open a stream port; with `peers`, slot i is owed by proc `peers[i]`
    /// (its loss fills the slot with an error) and the port finishes when
    /// every slot has a value.
    pub(crate) fn open_stream(&self, once: bool, peers: Option<Vec<String>>) -> PortReceiver {
        let id = self.inner.new_port_id();
        let port = Arc::new(StreamPort::new(once, peers));
        if port.expects_nothing() {
            port.close("empty mesh");
        } else {
            self.register_stream(id, port.clone());
        }
        PortReceiver {
            rt: self.clone(),
            id,
            port,
        }
    }
}
