//! ibverbs backend: detection only, in this build.
//!
//! `libibverbs.so.1` is loaded at run time with `libloading` (the default
//! build neither links against nor needs it; `MONARCH_IBVERBS_LIB` names
//! another file to load). Every verbs call of the project is in this
//! module. What is implemented: loading the library, resolving
//! `ibv_get_device_list` / `ibv_get_device_name` / `ibv_free_device_list`,
//! and listing the RDMA devices.
//!
//! What is NOT implemented: memory registration (`ibv_reg_mr`), the
//! exchange of queue-pair information over the control plane, and RDMA
//! READ/WRITE work requests. So even when devices are present the backend
//! reports itself unavailable and transfers fall back to the same-host or
//! TCP backend. None of this has been exercised on RDMA hardware: the
//! machine this was written on has no RDMA device, no libibverbs, and its
//! kernel cannot load soft-RoCE; only the "library absent" path (and a
//! library without the expected symbols) was tested.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

/// What the probe found.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Whether RDMA transfers can use verbs (always false in this build).
    pub available: bool,
    /// RDMA device names found (empty when the library is absent).
    pub devices: Vec<String>,
    /// Why the backend is unavailable, in words.
    pub reason: String,
}

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;

/// Probe the library named `lib` (no caching; see [`probe`]).
pub fn probe_library(lib: &str) -> Probe {
    let unavailable = |reason: String| Probe {
        available: false,
        devices: Vec::new(),
        reason,
    };
    // SAFETY: loading a shared library runs its initializers; libibverbs'
    // only read its configuration. Nothing else is called before the
    // symbols below are resolved.
    let l = match unsafe { libloading::Library::new(lib) } {
        Ok(l) => l,
        Err(e) => return unavailable(format!("{lib} cannot be loaded: {e}")),
    };
    // SAFETY: the symbol types match the libibverbs prototypes.
    let syms = unsafe {
        (
            l.get::<GetDeviceList>(b"ibv_get_device_list\0"),
            l.get::<FreeDeviceList>(b"ibv_free_device_list\0"),
            l.get::<GetDeviceName>(b"ibv_get_device_name\0"),
        )
    };
    let (get, free, name) = match syms {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        _ => return unavailable(format!("{lib} lacks the ibverbs device-list symbols")),
    };
    let mut n: c_int = 0;
    // SAFETY: ibv_get_device_list writes the count and returns a
    // NULL-terminated array (or NULL) that we free below.
    let list = unsafe { get(&mut n) };
    if list.is_null() {
        return unavailable(format!("{lib} loaded, but listing RDMA devices failed"));
    }
    let mut devices = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: `list` has `n` valid entries.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: the name is a NUL-terminated string owned by the device.
        let p = unsafe { name(dev) };
        if !p.is_null() {
            // SAFETY: as above.
            devices.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
    }
    // SAFETY: freeing the list we got.
    unsafe { free(list) };
    let reason = if devices.is_empty() {
        format!("{lib} loaded, but there is no RDMA device")
    } else {
        format!(
            "RDMA devices {devices:?} found, but this build does not implement the verbs data path (memory registration, queue-pair exchange, RDMA READ/WRITE)"
        )
    };
    Probe {
        available: false,
        devices,
        reason,
    }
}

/// Probe once per process (`MONARCH_IBVERBS_LIB`, default `libibverbs.so.1`).
pub fn probe() -> &'static Probe {
    static P: OnceLock<Probe> = OnceLock::new();
    P.get_or_init(|| {
        let lib = std::env::var("MONARCH_IBVERBS_LIB").unwrap_or_else(|_| "libibverbs.so.1".into());
        let p = probe_library(&lib);
        tracing::debug!(reason = %p.reason, "ibverbs probe");
        p
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_library_is_reported_not_fatal() {
        let p = probe_library("libdoes-not-exist-monarch.so.1");
        assert!(!p.available);
        assert!(p.reason.contains("cannot be loaded"), "{}", p.reason);
    }

    #[test]
    fn library_without_verbs_symbols_is_rejected() {
        // libc is always loadable and has no ibv_* symbols.
        let p = probe_library("libc.so.6");
        assert!(!p.available);
        assert!(p.reason.contains("lacks"), "{}", p.reason);
    }
}
