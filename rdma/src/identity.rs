//! This process as the data plane names it: the job token its data
//! connections authenticate with and the proc address that owns its
//! buffers (set by [`crate::init`]; the latest call wins, and each
//! handshake and registration reads the current values).

use parking_lot::RwLock;

static TOKEN: RwLock<String> = RwLock::new(String::new());
static OWNER: RwLock<String> = RwLock::new(String::new());

/// Set the job token and this proc's address.
pub(crate) fn set(token: &str, owner: &str) {
    *TOKEN.write() = token.to_string();
    *OWNER.write() = owner.to_string();
}

/// The job token.
pub(crate) fn token() -> String {
    TOKEN.read().clone()
}

/// This proc's address (the owner named in its buffers' descriptors).
pub(crate) fn owner() -> String {
    OWNER.read().clone()
}

/// This process's identity in data-plane handshakes.
pub(crate) fn my_id() -> String {
    format!("rdma:{}#{}", owner(), std::process::id())
}
