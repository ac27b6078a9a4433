//! Why inbound connections could not be set up: accepting and setting up
//! a connection happen on the runtime's own threads, where an error (most
//! often "Too many open files") would reach only the log. It is kept here,
//! by the peer when known, and added to the error of the proc that
//! failed because of it (a child that exits or never says Ready).

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use super::HashMap;

/// How long an accept failure with no known peer explains a proc's loss.
const RECENT: Duration = Duration::from_secs(60);
/// At most this many peers' errors are kept (oldest dropped first).
const MAX_PEERS: usize = 1024;

#[derive(Default)]
pub(super) struct SetupErrors {
    /// Peer address -> why its connection could not be set up.
    by_peer: Mutex<HashMap<String, String>>,
    /// The last accept failure for lack of a resource, and when.
    last_accept: Mutex<Option<(Instant, String)>>,
}

/// Whether `e` says the process (or system) is out of a resource that
/// accepting a connection needs.
pub(super) fn is_exhaustion(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

impl SetupErrors {
    /// The connection of `peer` could not be set up.
    pub(super) fn peer_failed(&self, peer: &str, e: &std::io::Error) {
        let mut m = self.by_peer.lock();
        if m.len() >= MAX_PEERS {
            m.clear();
        }
        m.insert(
            peer.to_string(),
            format!("this process could not set up its connection: {e}"),
        );
    }

    /// Accepting a connection failed for lack of a resource.
    pub(super) fn accept_failed(&self, e: &std::io::Error) {
        *self.last_accept.lock() = Some((
            Instant::now(),
            format!("this process could not accept connections: {e}"),
        ));
    }

    /// What to add to the error of proc `addr` ("" when nothing is known):
    /// its own connection's failure, else a recent accept failure.
    pub(super) fn explain(&self, addr: &str) -> String {
        if let Some(why) = self.by_peer.lock().get(addr) {
            return format!(" ({why})");
        }
        match &*self.last_accept.lock() {
            Some((at, why)) if at.elapsed() < RECENT => format!(" ({why})"),
            _ => String::new(),
        }
    }
}
