//! The receiving end of this proc's stream ports, and sending to any
//! port by reference.

use std::sync::Arc;

use super::Runtime;
use crate::error::Result;
use crate::future::{Answer, Future};
use crate::port::{PortRef, StreamPort};
use crate::wire::{Envelope, Kind};

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
    /// Open a stream port of this proc; `once`: it takes one value only.
    pub fn open_port(&self, once: bool) -> PortReceiver {
        self.open_stream(once, None)
    }

    /// Open a stream port; with `peers`, slot i is owed by proc `peers[i]`
    /// (its loss fills the slot with an error) and the port finishes when
    /// every slot has a value.
    pub(crate) fn open_stream(&self, once: bool, peers: Option<Vec<String>>) -> PortReceiver {
        let id = self.next_id();
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

    /// Send one value (or error) to the port named by `to`. A port of this
    /// proc is filled in place; otherwise a Reply frame goes to its proc.
    pub fn port_send(&self, to: &PortRef, result: Answer<'_>) -> Result<()> {
        self.check_running()?;
        let mut env = Envelope::new(Kind::Reply);
        env.reply_port = to.port;
        env.reply_slot = to.slot;
        let parts = match result {
            Ok(parts) => parts,
            Err((msg, parts)) => {
                env.is_error = true;
                env.error = msg.to_string();
                parts
            }
        };
        self.send(&to.addr, &env, parts)
    }
}
