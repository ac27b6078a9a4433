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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use monarch_core::{Error, ErrorKind, Result};
use parking_lot::{Condvar, Mutex};

use crate::random;

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
        let mut st = self.region.state.lock();
        st.leases -= 1;
        if st.leases == 0 {
            self.region.cv.notify_all();
        }
    }
}

/// Register `len` bytes at `ptr`; returns (id, key). `refs` is how many
/// remote drops release it (1 for an ordinary buffer). Fails when the range
/// wraps the address space or is longer than any object can be, and when
/// the system cannot give the key's random bytes.
pub(crate) fn register(ptr: usize, len: usize, writable: bool, refs: usize) -> Result<(u64, u64)> {
    register_keyed(random::OS, ptr, len, writable, refs)
}

/// [`register`] with the key's random bytes from `source` (never zero).
fn register_keyed(
    source: random::Source,
    ptr: usize,
    len: usize,
    writable: bool,
    refs: usize,
) -> Result<(u64, u64)> {
    if ptr.checked_add(len).is_none() || len > isize::MAX as usize {
        return Err(Error::invalid(format!(
            "an RDMA buffer of {len} bytes at {ptr:#x} runs past the end of the address space"
        )));
    }
    let key = u64::from_ne_bytes(random::bytes(source, "an RDMA buffer key")?) | 1;
    let t = table();
    let id = t.next.fetch_add(1, Ordering::Relaxed);
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
    t.map.lock().insert(id, r);
    Ok((id, key))
}

fn lookup(id: u64, key: u64) -> Result<Arc<Region>> {
    let r = table().map.lock().get(&id).cloned();
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
        let mut st = r.state.lock();
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
        let mut st = r.state.lock();
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
        let mut m = table().map.lock();
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
    let mut st = r.state.lock();
    st.dropped = true;
    while st.leases > 0 {
        r.cv.wait(&mut st);
    }
    Ok(())
}

/// Number of registered regions (for tests and diagnostics).
pub fn registered_count() -> usize {
    table().map.lock().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_without_randomness_is_an_error() {
        let mut mem = [0u8; 64];
        let e = register_keyed(
            random::tests::broken,
            mem.as_mut_ptr() as usize,
            mem.len(),
            true,
            1,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(e.message.contains("RDMA buffer key"), "{}", e.message);
    }

    #[test]
    fn a_range_past_the_end_of_the_address_space_is_refused() {
        for (ptr, len) in [
            (usize::MAX - 15, 64),
            (1, usize::MAX),
            (64, isize::MAX as usize + 1),
        ] {
            let e = register(ptr, len, true, 1).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{ptr:#x}+{len}");
        }
    }

    #[test]
    fn keys_are_random_and_never_zero() {
        let mut mem = [0u8; 64];
        let p = mem.as_mut_ptr() as usize;
        let (a, ka) = register(p, mem.len(), true, 1).unwrap();
        let (b, kb) = register(p, mem.len(), true, 1).unwrap();
        assert_ne!(ka, kb);
        assert!(ka != 0 && kb != 0);
        release(a, ka).unwrap();
        release(b, kb).unwrap();
    }
}
