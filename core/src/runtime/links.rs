//! How this proc's connections come and go: connecting (one connection
//! per peer) and noticing one end (what a lost peer fails is in
//! `failures`; accepting inbound ones is `handshakes`).

use std::sync::Arc;

use super::Inner;
use crate::conn::Conn;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::{Bounded, Stream};

impl Inner {
    /// Connect to `addr`, authenticate both ways, register and start
    /// reading. The connection is known under `addr` and under the
    /// identity the peer proved (they differ when we reach a peer through
    /// another of its addresses, e.g. a controller over TCP).
    pub(super) fn connect(self: &Arc<Self>, addr: &str) -> Result<Arc<Conn>> {
        self.peers.one_at_a_time(addr, || {
            // Another thread may have connected while we waited.
            match self.peers.get(addr) {
                Some(c) => Ok(c),
                None => self.connect_now(addr),
            }
        })
    }

    pub(super) fn connect_now(self: &Arc<Self>, addr: &str) -> Result<Arc<Conn>> {
        let mut stream = Stream::connect_from(&self.id.addr, addr)?;
        let identity = crate::auth::connect_handshake(
            &mut Bounded::new(&mut stream, crate::limits::handshake_timeout()),
            self.id.token.as_bytes(),
            &self.id.addr,
        )
        .map_err(|e| {
            Error::new(
                ErrorKind::ProcFailed,
                format!("cannot authenticate with {addr}: {e}"),
            )
        })?;
        let _ = stream.set_read_timeout(None);
        let _ = stream.set_write_timeout(None);
        let conn = Arc::new(
            Conn::new(addr.to_string(), stream, Vec::new())
                .map_err(|e| Error::io("socket setup", e))?,
        );
        let identity = (identity != addr).then_some(identity);
        let registered = self.peers.register(addr, identity, &conn);
        self.conns_changed();
        self.read_held_data(conn);
        Ok(registered)
    }

    /// A connection ended (once per connection): forget it, fail what it owed.
    pub(super) fn conn_ended(&self, conn: &Arc<Conn>, reason: String) {
        if !conn.mark_closed() {
            return;
        }
        let peer_still_connected = self.peers.forget(conn);
        conn.shutdown();
        // A spare connection to a peer we still reach another way (both
        // sides connected at once) ending is not the peer's loss.
        if !self.lifecycle.is_stopped() && !peer_still_connected {
            self.peer_lost(&conn.peer, reason);
        }
    }
}
