//! How this proc's connections come and go: accepting and authenticating
//! inbound ones, connecting (one connection per peer), and what a lost
//! connection or an exited child fails.

use std::sync::Arc;
use std::time::Duration;

use super::{Event, Inner};
use crate::conn::Conn;
use crate::error::{Error, ErrorKind, Result};
use crate::process::{Child, ExitInfo};
use crate::transport::{Listener, Stream};
use crate::value::PointValue;
use std::sync::atomic::Ordering;

/// How long a peer may take to complete the authentication handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Inner {
    pub(super) fn accept_loop(self: &Arc<Self>, listener: &Listener) {
        loop {
            match listener.accept() {
                Ok(stream) => {
                    if self.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    let me = self.clone();
                    let _ = std::thread::Builder::new()
                        .name("monarch-conn".into())
                        .spawn(move || me.serve_inbound(stream));
                }
                Err(e) => {
                    if self.stopped.load(Ordering::SeqCst) {
                        return;
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
            self.token.as_bytes(),
            &self.addr,
        ) {
            Ok(peer) => peer,
            Err(e) => {
                tracing::warn!(from = %stream.peer_desc(), error = %e, "dropping unauthenticated connection");
                return;
            }
        };
        let _ = stream.set_read_timeout(None);
        let _ = stream.set_write_timeout(None);
        let conn = match Conn::new(peer.clone(), stream, Vec::new()) {
            Ok(c) => Arc::new(c),
            Err(e) => {
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
        let mut stream = Stream::connect_from(&self.addr, addr)?;
        let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
        let _ = stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
        let identity =
            crate::auth::connect_handshake(&mut stream, self.token.as_bytes(), &self.addr)
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
        if !self.stopped.load(Ordering::SeqCst) && !peer_still_connected {
            self.peer_lost(&conn.peer, reason);
        }
    }

    /// The connection to `peer` ended: fail every reply slot it still owed.
    pub(super) fn peer_lost(&self, peer: &str, reason: String) {
        self.remote_peer_lost(peer, &reason);
        if let Some(p) = self.remote.get(peer) {
            // Prefer how the proc ended, as its agent reports it.
            if p.exit.wait(Some(Duration::from_millis(500))) {
                self.fail_peer_slots(peer, &p.exit.peek().unwrap_or_default());
            }
        }
        let child = self.children.get(peer);
        let why = match child {
            // Prefer the exit status to "connection closed" when we can get it.
            Some(c) if c.exit.wait(Some(Duration::from_millis(500))) => {
                if let Some(exit) = c.exit.peek() {
                    self.proc_failed(&c, &exit);
                }
                format!(
                    "proc {peer} {}",
                    c.exit.peek().map(|e| e.to_string()).unwrap_or_default()
                )
            }
            _ => format!("lost connection to proc {peer}: {reason}"),
        };
        self.fail_peer_slots(peer, &why);
        if self.controller.as_deref() == Some(peer) {
            // Our controller is gone: stop, and make sure we really exit.
            tracing::warn!("controller connection lost; stopping this proc");
            self.push_event(Event::stop_proc());
            let _ = std::thread::Builder::new()
                .name("monarch-watchdog".into())
                .spawn(|| {
                    std::thread::sleep(Duration::from_secs(5));
                    // SAFETY: terminating the process is the point.
                    unsafe { libc::_exit(1) };
                });
        }
    }

    pub(super) fn fail_peer_slots(&self, peer: &str, why: &str) {
        let owed = self.ports.owed_by(peer);
        // Routes avoid lost procs; a proc being stopped (its mesh is going
        // away) is not recorded, so the set holds only failed procs of
        // meshes not yet stopped (`Peers::forget_lost`) instead of growing
        // forever.
        if !self.is_stopping(peer) {
            self.peers.mark_lost(peer);
        }
        if let Some(me) = self.me.upgrade() {
            me.relay_peer_lost(peer, why);
        }
        for o in owed {
            let value = if o.relayed {
                // A point the lost proc was to forward a cast to.
                PointValue::error(format!("{why} (it was forwarding this cast to this point)"))
            } else {
                PointValue::error(why)
            };
            self.fill(o.port, o.slot, value);
        }
    }

    pub(super) fn child_exited(&self, child: &Child, exit: &ExitInfo) {
        tracing::debug!(addr = %child.addr, %exit, "proc exited");
        child.ready.complete(Err(Error::new(
            ErrorKind::ProcFailed,
            format!("proc {} {exit} before it was ready", child.addr),
        )));
        self.children.take_ready(&child.addr);
        // Recorded first, so a call made once this one failed fails at once.
        self.proc_failed(child, exit);
        self.fail_peer_slots(&child.addr, &format!("proc {} {exit}", child.addr));
    }
}
