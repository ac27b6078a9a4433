//! Ports: places replies can be sent to, other than a call's gather port.
//!
//! A [`PortRef`] names a port of some proc (`addr`, port id, slot) and can
//! travel in messages; whoever holds it may send one value (or an error) to
//! it with `Runtime::port_send` — a `Reply` frame, the same frame an
//! endpoint's answer is. A [`StreamPort`] is the receiving state of a
//! *streaming* port opened by this proc (its handle is the runtime's
//! `PortReceiver`): values are queued in arrival order and taken one at a
//! time, each as a future (already complete when a value is queued). A
//! port opened `once` closes after its first value.
//!
//! A stream port opened for a cast ([`crate::ActorMesh::stream`]) also knows
//! which proc owes each slot, so a proc that dies fills what it still owed
//! with an error, like a gather port does; a port opened by a user
//! (`Channel.open()`) does not (anyone may hold its reference).

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::future::Future;
use crate::geometry::Shape;
use crate::value::{PointValue, ValueMesh};

/// Where a value can be sent: port `port` of the proc at `addr`, filling
/// `slot` (a gather port's slot; a stream port ignores it for ordering).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortRef {
    /// Address of the proc that owns the port.
    pub addr: String,
    /// The port's id in that proc.
    pub port: u64,
    /// The slot of the port this reference fills.
    pub slot: u64,
}

const MAGIC: &[u8; 4] = b"MPR1";

impl PortRef {
    /// Opaque bytes for bindings to carry around (e.g. pickled).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(20 + self.addr.len());
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&self.port.to_le_bytes());
        v.extend_from_slice(&self.slot.to_le_bytes());
        v.extend_from_slice(self.addr.as_bytes());
        v
    }

    /// Decode a reference made by [`PortRef::encode`].
    pub fn decode(b: &[u8]) -> Result<PortRef> {
        let bad = || Error::invalid("malformed port reference");
        if b.len() < 20 || &b[..4] != MAGIC {
            return Err(bad());
        }
        let port = u64::from_le_bytes(b[4..12].try_into().map_err(|_| bad())?);
        let slot = u64::from_le_bytes(b[12..20].try_into().map_err(|_| bad())?);
        let addr = std::str::from_utf8(&b[20..])
            .map_err(|_| bad())?
            .to_string();
        if addr.is_empty() || port == 0 {
            return Err(bad());
        }
        Ok(PortRef { addr, port, slot })
    }
}

/// The receiving state of a stream port (registered in the runtime).
pub(crate) struct StreamPort {
    once: bool,
    /// For cast ports: the proc that owes each slot.
    peers: Option<Vec<String>>,
    /// Which slots' paths went through a (lost) multicast forwarder.
    relays: Mutex<Option<Arc<crate::multicast::LazyRelays>>>,
    st: Mutex<StreamState>,
}

struct StreamState {
    queue: VecDeque<PointValue>,
    waiters: VecDeque<Future>,
    filled: Vec<bool>,
    /// No more values will come (once-port used, all slots filled, or
    /// the runtime stopped): waiters past the queue fail.
    closed: Option<String>,
}

fn single(value: PointValue) -> ValueMesh {
    ValueMesh {
        shape: Shape::dense(Vec::new(), Vec::new()).expect("empty shape is valid"),
        values: vec![value],
    }
}

impl StreamPort {
    /// A cast port with no slot to fill (an empty mesh).
    pub(crate) fn expects_nothing(&self) -> bool {
        self.peers.as_ref().is_some_and(|p| p.is_empty())
    }

    /// Record which multicast forwarders each slot's message went through.
    pub(crate) fn set_relays(&self, relays: Option<Arc<crate::multicast::LazyRelays>>) {
        *self.relays.lock() = relays;
    }

    pub(crate) fn new(once: bool, peers: Option<Vec<String>>) -> StreamPort {
        let n = peers.as_ref().map_or(0, |p| p.len());
        StreamPort {
            once,
            peers,
            relays: Mutex::new(None),
            st: Mutex::new(StreamState {
                queue: VecDeque::new(),
                waiters: VecDeque::new(),
                filled: vec![false; n],
                closed: None,
            }),
        }
    }

    /// Deliver a value for `slot`; returns true when the port is finished
    /// (no more values can come) and may be unregistered.
    pub(crate) fn deliver(&self, slot: u64, value: PointValue) -> bool {
        let mut st = self.st.lock();
        if st.closed.is_some() {
            return true;
        }
        if self.peers.is_some() {
            match st.filled.get_mut(slot as usize) {
                Some(f) if !*f => *f = true,
                Some(_) => return false,
                None => {
                    tracing::warn!(slot, "value for a slot the stream port does not have");
                    return false;
                }
            }
        }
        match st.waiters.pop_front() {
            Some(w) => {
                w.complete(Ok(single(value)));
            }
            None => st.queue.push_back(value),
        }
        let done = self.once || (self.peers.is_some() && st.filled.iter().all(|f| *f));
        if done {
            st.closed = Some(if self.once {
                "this once-port already received its value".into()
            } else {
                "every point of the stream has answered".into()
            });
            for w in st.waiters.drain(..) {
                w.complete(Err(Error::invalid("port closed: no more values")));
            }
        }
        done
    }

    /// Slots still owed by `peer` (cast ports only).
    pub(crate) fn owed_by(&self, peer: &str) -> Vec<u64> {
        let Some(peers) = &self.peers else {
            return Vec::new();
        };
        let relays = self.relays.lock().clone();
        let relayed: Vec<u64> = relays.map(|r| r.slots_through(peer)).unwrap_or_default();
        let st = self.st.lock();
        peers
            .iter()
            .enumerate()
            .filter(|(i, p)| *p == peer && !st.filled[*i])
            .map(|(i, _)| i as u64)
            .chain(
                relayed
                    .into_iter()
                    .filter(|&s| st.filled.get(s as usize) == Some(&false)),
            )
            .collect()
    }

    /// Fail every waiter (the runtime stopped).
    pub(crate) fn close(&self, why: &str) {
        let mut st = self.st.lock();
        st.closed = Some(why.to_string());
        for w in st.waiters.drain(..) {
            w.complete(Err(Error::new(ErrorKind::Stopped, why.to_string())));
        }
    }

    /// Complete `fut` with the next value, now when one is queued, else
    /// when it arrives.
    pub(crate) fn recv(&self, fut: Future) -> Future {
        let mut st = self.st.lock();
        if let Some(v) = st.queue.pop_front() {
            fut.complete(Ok(single(v)));
        } else if let Some(why) = &st.closed {
            fut.complete(Err(Error::invalid(format!("port closed: {why}"))));
        } else {
            st.waiters.push_back(fut.clone());
        }
        fut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_ref_round_trip_and_garbage() {
        let r = PortRef {
            addr: "unix:/tmp/x.sock".into(),
            port: 42,
            slot: 7,
        };
        assert_eq!(PortRef::decode(&r.encode()).unwrap(), r);
        assert!(PortRef::decode(b"nope").is_err());
        assert!(PortRef::decode(&r.encode()[..19]).is_err());
    }

    #[test]
    fn stream_port_queues_and_closes() {
        let p = StreamPort::new(false, Some(vec!["a".into(), "b".into()]));
        assert!(!p.deliver(1, PointValue::Ok(vec![b"x".to_vec()])));
        assert!(!p.deliver(1, PointValue::Ok(vec![b"dup".to_vec()])));
        assert_eq!(p.owed_by("a"), vec![0]);
        assert!(p.owed_by("b").is_empty());
        assert!(p.deliver(0, PointValue::error("boom")));
        let st = p.st.lock();
        assert_eq!(st.queue.len(), 2);
        assert!(st.closed.is_some());
    }
}
