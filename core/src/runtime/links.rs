//! How this proc's connections come and go: accepting and authenticating
//! inbound ones, connecting (one connection per peer), and noticing one
//! end (what a lost peer fails is in `failures`).

use std::sync::Arc;
use std::time::Duration;

use super::Inner;
use crate::conn::Conn;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::{Listener, Stream};

/// How long a peer may take to complete the authentication handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Inner {
    pub(super) fn accept_loop(self: &Arc<Self>, listener: &Listener) {
        loop {
            match listener.accept() {
                Ok(stream) => {
                    if self.lifecycle.is_stopped() {
                        return;
                    }
                    let me = self.clone();
                    let _ = std::thread::Builder::new()
                        .name("monarch-conn".into())
                        .spawn(move || me.serve_inbound(stream));
                }
                Err(e) => {
                    if self.lifecycle.is_stopped() {
                        return;
                    }
                    if super::setup_errors::is_exhaustion(&e) {
                        self.setup_errors.accept_failed(&e);
                    }
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        tracing::warn!(error = %e, "accept failed");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
    }

    /// Authenticate an inbound connection, then read from it until it ends.
    pub(super) fn serve_inbound(self: Arc<Self>, mut stream: Stream) {
        let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
        let _ = stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
        let peer = match crate::auth::accept_handshake(
            &mut stream,
            self.id.token.as_bytes(),
            &self.id.addr,
        ) {
            Ok(peer) => peer,
            Err(e) => {
                tracing::warn!(from = %stream.peer_desc(), error = %e, "dropping unauthenticated connection");
                return;
            }
        };
        let _ = stream.set_read_timeout(None);
        let _ = stream.set_write_timeout(None);
        let conn = match Conn::new_or_give_back(peer.clone(), stream, Vec::new()) {
            Ok(c) => Arc::new(c),
            Err((e, stream)) => {
                // Recorded before the peer sees the connection close.
                self.setup_errors.peer_failed(&peer, &e);
                drop(stream);
                tracing::warn!(%peer, error = %e, "cannot set up connection");
                return;
            }
        };
        self.peers.register(&peer, None, &conn);
        self.conns_changed();
        self.drain_conn(&conn);
    }

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
        let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
        let _ = stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
        let identity =
            crate::auth::connect_handshake(&mut stream, self.id.token.as_bytes(), &self.id.addr)
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
