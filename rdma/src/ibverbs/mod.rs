//! ibverbs backend: RDMA READ/WRITE through libibverbs, loaded at run time.
//!
//! `libibverbs.so.1` (or the file named by `MONARCH_IBVERBS_LIB`) is loaded
//! with `libloading`: the default build neither links against nor needs it.
//! Every verbs call of the project is in this module (`sys` mirrors the C
//! ABI it uses; `qp` holds queue pairs, memory regions and the transfer
//! protocol).
//!
//! Detection ([`probe`]): the library loads, every symbol below resolves,
//! and a device (`MONARCH_IBVERBS_DEVICE`, default: the first one) opens
//! with port `MONARCH_IBVERBS_PORT` (default 1) in the ACTIVE state. Then
//! the process offers the backend in its buffer descriptors, and a pair of
//! peers uses it when both sides offer it. Otherwise the probe says why in
//! words and transfers use the same-host or TCP backend.
//!
//! Data path (see `qp`): over the owner's data-plane TCP connection (the
//! one the TCP backend uses; authenticated with the job token) the reader
//! creates an RC queue pair and exchanges `QpInfo` (qpn, psn, lid, gid,
//! mtu) with the owner, which creates its own QP for that connection; both
//! go RESET→INIT→RTR→RTS. Per transfer the reader asks the owner for a
//! lease on the range, gets back the region's `RemoteRegion` (address and
//! rkey: the owner registers the region with `ibv_reg_mr` on first use),
//! registers its local memory, posts RDMA READ or WRITE work requests (8
//! MiB each, up to 16 in flight), polls its completion queue, then releases
//! the lease.
//!
//! **Not exercised on RDMA hardware.** The machine this was written on has
//! no RDMA device, and its kernel cannot load soft-RoCE. What was tested:
//! the struct layouts against rdma-core 44's verbs.h, the library-absent
//! and no-device paths, the QP-info encoding, and the whole protocol
//! against a fake provider library built by the tests (which "executes"
//! RDMA READ/WRITE with `process_vm_readv`/`writev`).

mod qp;
mod sys;

use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

pub(crate) use qp::{serve_connect, serve_lease, transfer, Mr, Qp};

/// What the probe found.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Whether RDMA transfers can use verbs in this process.
    pub available: bool,
    /// RDMA device names found (empty when the library is absent).
    pub devices: Vec<String>,
    /// Why the backend is unavailable, in words (or which device it uses).
    pub reason: String,
}

/// The loaded library and the functions resolved from it. The function
/// pointers stay valid as long as `_lib` is loaded (this struct keeps it).
pub(crate) struct Lib {
    _lib: libloading::Library,
    pub(crate) get_device_list: sys::GetDeviceList,
    pub(crate) free_device_list: sys::FreeDeviceList,
    pub(crate) get_device_name: sys::GetDeviceName,
    pub(crate) open_device: sys::OpenDevice,
    pub(crate) close_device: sys::CloseDevice,
    pub(crate) alloc_pd: sys::AllocPd,
    pub(crate) dealloc_pd: sys::DeallocPd,
    /// `ibv_reg_mr` (a real symbol in every rdma-core; in newer headers
    /// also a macro that may call `ibv_reg_mr_iova2` instead).
    pub(crate) reg_mr: Option<sys::RegMr>,
    pub(crate) reg_mr_iova2: Option<sys::RegMrIova2>,
    pub(crate) dereg_mr: sys::DeregMr,
    pub(crate) create_cq: sys::CreateCq,
    pub(crate) destroy_cq: sys::DestroyCq,
    pub(crate) create_qp: sys::CreateQp,
    pub(crate) modify_qp: sys::ModifyQp,
    pub(crate) destroy_qp: sys::DestroyQp,
    pub(crate) query_port: sys::QueryPort,
    pub(crate) query_gid: sys::QueryGid,
}

impl Lib {
    /// Load `path` and resolve every verbs function the backend calls.
    pub fn load(path: &str) -> std::result::Result<Lib, String> {
        // SAFETY: loading a shared library runs its initializers;
        // libibverbs' only read its configuration.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("{path} cannot be loaded: {e}"))?;
        macro_rules! sym {
            ($name:literal, $t:ty) => {{
                // SAFETY: `$t` is the prototype of `$name` in verbs.h; the
                // pointer is only used while `lib` stays loaded.
                match unsafe { lib.get::<$t>(concat!($name, "\0").as_bytes()) } {
                    Ok(s) => Some(*s),
                    Err(_) => None,
                }
            }};
        }
        macro_rules! need {
            ($name:literal, $t:ty) => {
                sym!($name, $t)
                    .ok_or_else(|| format!("{path} lacks the ibverbs symbol {}", $name))?
            };
        }
        let get_device_list = sym!("ibv_get_device_list", sys::GetDeviceList);
        let free_device_list = sym!("ibv_free_device_list", sys::FreeDeviceList);
        let get_device_name = sym!("ibv_get_device_name", sys::GetDeviceName);
        let (Some(get_device_list), Some(free_device_list), Some(get_device_name)) =
            (get_device_list, free_device_list, get_device_name)
        else {
            return Err(format!("{path} lacks the ibverbs device-list symbols"));
        };
        let reg_mr = sym!("ibv_reg_mr", sys::RegMr);
        let reg_mr_iova2 = sym!("ibv_reg_mr_iova2", sys::RegMrIova2);
        if reg_mr.is_none() && reg_mr_iova2.is_none() {
            return Err(format!(
                "{path} lacks the ibverbs symbol ibv_reg_mr (and ibv_reg_mr_iova2)"
            ));
        }
        Ok(Lib {
            get_device_list,
            free_device_list,
            get_device_name,
            open_device: need!("ibv_open_device", sys::OpenDevice),
            close_device: need!("ibv_close_device", sys::CloseDevice),
            alloc_pd: need!("ibv_alloc_pd", sys::AllocPd),
            dealloc_pd: need!("ibv_dealloc_pd", sys::DeallocPd),
            reg_mr,
            reg_mr_iova2,
            dereg_mr: need!("ibv_dereg_mr", sys::DeregMr),
            create_cq: need!("ibv_create_cq", sys::CreateCq),
            destroy_cq: need!("ibv_destroy_cq", sys::DestroyCq),
            create_qp: need!("ibv_create_qp", sys::CreateQp),
            modify_qp: need!("ibv_modify_qp", sys::ModifyQp),
            destroy_qp: need!("ibv_destroy_qp", sys::DestroyQp),
            query_port: need!("ibv_query_port", sys::QueryPort),
            query_gid: need!("ibv_query_gid", sys::QueryGid),
            _lib: lib,
        })
    }
}

/// An opened device: its context, one protection domain, and the port the
/// backend uses.
pub(crate) struct Device {
    pub(crate) lib: std::sync::Arc<Lib>,
    pub(crate) ctx: *mut sys::ibv_context,
    pub(crate) pd: *mut sys::ibv_pd,
    pub name: String,
    pub port: u8,
    pub gid_index: u8,
    pub lid: u16,
    pub mtu: u32,
    pub link_layer: u8,
    pub gid: sys::ibv_gid,
}

// SAFETY: libibverbs contexts and protection domains may be used from any
// thread (rdma-core's verbs are thread-safe); the pointers are only
// released in Drop.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: pd and ctx came from this library and are released once.
        unsafe {
            (self.lib.dealloc_pd)(self.pd);
            (self.lib.close_device)(self.ctx);
        }
    }
}

fn env_u8(name: &str, default: u8) -> u8 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Open `dev` (an `ibv_device *` from the list) and check its port.
fn open(
    lib: std::sync::Arc<Lib>,
    dev: *mut c_void,
    name: &str,
) -> std::result::Result<Device, String> {
    let port = env_u8("MONARCH_IBVERBS_PORT", 1);
    let gid_index = env_u8("MONARCH_IBVERBS_GID_INDEX", 0);
    // SAFETY: `dev` is a live entry of the device list (not yet freed).
    let ctx = unsafe { (lib.open_device)(dev) };
    if ctx.is_null() {
        let e = std::io::Error::last_os_error();
        return Err(format!("cannot open RDMA device {name}: {e}"));
    }
    let mut pa = sys::ibv_port_attr::default();
    // SAFETY: ctx is open; the exported ibv_query_port fills the
    // `_compat_ibv_port_attr` prefix of `pa` (zeroed above).
    let rc = unsafe { (lib.query_port)(ctx, port, &mut pa) };
    let fail = |lib: std::sync::Arc<Lib>, why: String| {
        // SAFETY: closing the context opened above.
        unsafe { (lib.close_device)(ctx) };
        Err(why)
    };
    if rc != 0 {
        return fail(
            lib,
            format!("RDMA device {name}: querying port {port} failed ({rc})"),
        );
    }
    if pa.state != sys::IBV_PORT_ACTIVE {
        return fail(
            lib,
            format!(
                "RDMA device {name}: port {port} is not active (state {})",
                pa.state
            ),
        );
    }
    let mut gid = sys::ibv_gid::default();
    // SAFETY: ctx is open; gid is a valid 16-byte out parameter.
    let rc = unsafe { (lib.query_gid)(ctx, port, gid_index as c_int, &mut gid) };
    if rc != 0 {
        if pa.link_layer == sys::IBV_LINK_LAYER_ETHERNET {
            return fail(
                lib,
                format!("RDMA device {name}: no GID at index {gid_index} (RoCE needs one)"),
            );
        }
        gid = sys::ibv_gid::default();
    }
    // SAFETY: ctx is open.
    let pd = unsafe { (lib.alloc_pd)(ctx) };
    if pd.is_null() {
        return fail(lib, format!("RDMA device {name}: ibv_alloc_pd failed"));
    }
    Ok(Device {
        lib,
        ctx,
        pd,
        name: name.to_string(),
        port,
        gid_index,
        lid: pa.lid,
        mtu: pa.active_mtu,
        link_layer: pa.link_layer,
        gid,
    })
}

/// Probe the library at `path` (no caching; see [`probe`]): what it found
/// and, when usable, the opened device.
pub(crate) fn probe_device(path: &str) -> (Probe, Option<Device>) {
    let unavailable = |devices: Vec<String>, reason: String| {
        (
            Probe {
                available: false,
                devices,
                reason,
            },
            None,
        )
    };
    let lib = match Lib::load(path) {
        Ok(l) => l,
        Err(e) => return unavailable(Vec::new(), e),
    };
    let mut n: c_int = 0;
    // SAFETY: ibv_get_device_list writes the count and returns a
    // NULL-terminated array (or NULL) that we free below.
    let list = unsafe { (lib.get_device_list)(&mut n) };
    if list.is_null() {
        let e = std::io::Error::last_os_error();
        return unavailable(
            Vec::new(),
            format!("{path} loaded, but listing RDMA devices failed: {e}"),
        );
    }
    let mut devs = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: `list` has `n` valid entries.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: the name is a NUL-terminated string owned by the device.
        let p = unsafe { (lib.get_device_name)(dev) };
        let name = if p.is_null() {
            format!("device{i}")
        } else {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        devs.push((dev, name));
    }
    let names: Vec<String> = devs.iter().map(|(_, n)| n.clone()).collect();
    let wanted = std::env::var("MONARCH_IBVERBS_DEVICE")
        .ok()
        .filter(|s| !s.is_empty());
    let lib = std::sync::Arc::new(lib);
    let mut reasons = Vec::new();
    let mut found = None;
    for (dev, name) in &devs {
        if wanted.as_ref().is_some_and(|w| w != name) {
            continue;
        }
        match open(lib.clone(), *dev, name) {
            Ok(d) => {
                found = Some(d);
                break;
            }
            Err(why) => reasons.push(why),
        }
    }
    // SAFETY: freeing the list we got; opened contexts stay valid.
    unsafe { (lib.free_device_list)(list) };
    match found {
        Some(d) => (
            Probe {
                available: true,
                devices: names,
                reason: format!(
                    "using RDMA device {} port {} (not exercised on RDMA hardware by the project's tests)",
                    d.name, d.port
                ),
            },
            Some(d),
        ),
        None if names.is_empty() => {
            unavailable(names, format!("{path} loaded, but there is no RDMA device"))
        }
        None if reasons.is_empty() => unavailable(
            names.clone(),
            format!(
                "RDMA device {} not found (devices: {names:?})",
                wanted.unwrap_or_default()
            ),
        ),
        None => unavailable(names, reasons.join("; ")),
    }
}

/// Probe the library named `lib` (no caching; see [`probe`]).
pub fn probe_library(lib: &str) -> Probe {
    probe_device(lib).0
}

fn global() -> &'static (Probe, Option<Device>) {
    static P: OnceLock<(Probe, Option<Device>)> = OnceLock::new();
    P.get_or_init(|| {
        let lib = std::env::var("MONARCH_IBVERBS_LIB").unwrap_or_else(|_| "libibverbs.so.1".into());
        let p = probe_device(&lib);
        tracing::debug!(reason = %p.0.reason, "ibverbs probe");
        p
    })
}

/// Probe once per process (`MONARCH_IBVERBS_LIB`, default `libibverbs.so.1`).
pub fn probe() -> &'static Probe {
    &global().0
}

/// The device transfers use, when the probe found one.
pub(crate) fn device() -> Option<&'static Device> {
    global().1.as_ref()
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
