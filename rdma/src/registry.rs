//! The owner side: which memory regions this process has registered.
//!
//! A region is found by id and checked against the random key of its
//! registration, so a descriptor of a dropped buffer can never reach memory
//! that a later registration reuses. Every access from a peer holds a
//! *lease* on the region while it runs (the TCP backend: while the owner's
//! server thread copies; the same-host backend: from the peer's lease
//! request until it says it is done or its connection closes). Dropping a
//! region refuses new leases at once and then waits until the leases held
//! end, so memory is never handed back to its owner's allocator while a
//! peer may still write into it.

use monarch_core::sync::LockExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use monarch_core::{Error, ErrorKind, Result};

pub(crate) struct Region {
    pub ptr: usize,
    pub len: usize,
    pub key: u64,
    pub writable: bool,
    /// The region's ibverbs registration, made on the first verbs lease
    /// (deregistered when the region is released and its leases ended).
    pub verbs_mr: OnceLock<std::result::Result<crate::ibverbs::Mr, String>>,
    state: Mutex<State>,
    cv: Condvar,
}

struct State {
    leases: usize,
    dropped: bool,
    /// Remote drops still needed before the region is released (a buffer
    /// handed to N readers is released after N of them said so).
    refs: usize,
}

struct Table {
    map: Mutex<HashMap<u64, Arc<Region>>>,
    next: AtomicU64,
}

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| Table {
        map: Mutex::new(HashMap::new()),
        next: AtomicU64::new(1),
    })
}

/// A held lease; ends when dropped.
pub(crate) struct Lease {
    pub region: Arc<Region>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut st = self.region.state.locked();
        st.leases -= 1;
        if st.leases == 0 {
            self.region.cv.notify_all();
        }
    }
}

fn random_u64() -> u64 {
    let mut v = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom(v.as_mut_ptr() as *mut _, 8, 0) };
    if n != 8 {
        // Never weaker than unique: time and a counter.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        return t ^ table().next.load(Ordering::Relaxed).rotate_left(32);
    }
    u64::from_ne_bytes(v) | 1
}

/// Register `len` bytes at `ptr`; returns (id, key). `refs` is how many
/// remote drops release it (1 for an ordinary buffer).
pub(crate) fn register(ptr: usize, len: usize, writable: bool, refs: usize) -> (u64, u64) {
    let t = table();
    let id = t.next.fetch_add(1, Ordering::Relaxed);
    let key = random_u64();
    let r = Arc::new(Region {
        ptr,
        len,
        key,
        writable,
        verbs_mr: OnceLock::new(),
        state: Mutex::new(State {
            leases: 0,
            dropped: false,
            refs: refs.max(1),
        }),
        cv: Condvar::new(),
    });
    t.map.locked().insert(id, r);
    (id, key)
}

fn lookup(id: u64, key: u64) -> Result<Arc<Region>> {
    let r = table().map.locked().get(&id).cloned();
    match r {
        Some(r) if r.key == key => Ok(r),
        _ => Err(Error::invalid(format!(
            "RDMA buffer {id} is not registered in proc {} (it was dropped, or its owner restarted)",
            std::process::id()
        ))),
    }
}

/// Validate an access to `[offset, offset+len)` and lease the region.
pub(crate) fn lease(id: u64, key: u64, offset: u64, len: u64, write: bool) -> Result<Lease> {
    let r = lookup(id, key)?;
    if write && !r.writable {
        return Err(Error::invalid(format!(
            "RDMA buffer {id} is read-only (registered from read-only memory)"
        )));
    }
    let in_bounds = matches!(offset.checked_add(len), Some(e) if e <= r.len as u64);
    if !in_bounds {
        return Err(Error::invalid(format!(
            "range {offset}..{} is outside RDMA buffer {id} of size {}",
            offset.saturating_add(len),
            r.len
        )));
    }
    {
        let mut st = r.state.locked();
        if st.dropped {
            return Err(Error::invalid(format!("RDMA buffer {id} was dropped")));
        }
        st.leases += 1;
    }
    Ok(Lease { region: r })
}

/// Whether `id` is still registered with `key`.
pub(crate) fn is_registered(id: u64, key: u64) -> bool {
    lookup(id, key).is_ok()
}

/// Drop one reference (a remote drop); the region is released when none is
/// left. Returns whether it was released.
pub(crate) fn unref(id: u64, key: u64) -> Result<bool> {
    let r = lookup(id, key)?;
    let last = {
        let mut st = r.state.locked();
        st.refs = st.refs.saturating_sub(1);
        st.refs == 0
    };
    if last {
        release(id, key)?;
    }
    Ok(last)
}

/// Unregister at once (the owner's own drop): refuse new leases, then wait
/// until the held ones end. Idempotent; unknown ids are an error.
pub(crate) fn release(id: u64, key: u64) -> Result<()> {
    let r = {
        let mut m = table().map.locked();
        match m.get(&id) {
            Some(r) if r.key == key => m.remove(&id),
            _ => None,
        }
    };
    let Some(r) = r else {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("RDMA buffer {id} was already dropped"),
        ));
    };
    let mut st = r.state.locked();
    st.dropped = true;
    while st.leases > 0 {
        st = r.cv.wait(st).unwrap_or_else(|p| p.into_inner());
    }
    Ok(())
}

/// Number of registered regions (for tests and diagnostics).
pub fn registered_count() -> usize {
    table().map.locked().len()
}
