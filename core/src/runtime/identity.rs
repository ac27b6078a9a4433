//! `Identity`: who this proc is to others (its address, the job secret it
//! authenticates peers with, its controller when it was started by one)
//! and the private directory holding its children's sockets.

use parking_lot::Mutex;
use std::path::PathBuf;

use crate::error::Result;
use crate::process::SocketDir;

pub(super) struct Identity {
    /// This proc's address.
    pub(super) addr: String,
    /// The job secret.
    pub(super) token: String,
    /// The controller's address, for a proc started by one.
    pub(super) controller: Option<String>,
    /// The socket directory (made when the first child is spawned, if the
    /// runtime did not start with one).
    dir: Mutex<Option<SocketDir>>,
}

impl Identity {
    pub(super) fn new(
        addr: String,
        token: String,
        controller: Option<String>,
        dir: Option<SocketDir>,
    ) -> Identity {
        Identity {
            addr,
            token,
            controller,
            dir: Mutex::new(dir),
        }
    }

    /// The socket directory, made now if there is none yet.
    pub(super) fn socket_dir(&self) -> Result<PathBuf> {
        let mut d = self.dir.lock();
        if d.is_none() {
            *d = Some(SocketDir::create(&super::random_hex()?[..8])?);
        }
        Ok(d.as_ref().map(|d| d.path.clone()).unwrap_or_default())
    }

    /// Remove the socket directory (at shutdown).
    pub(super) fn remove_socket_dir(&self) {
        self.dir.lock().take();
    }
}
