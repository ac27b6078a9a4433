//! monarch-rdma: the data plane of libmonarch. Registered memory buffers
//! read and written one-sided by other procs, on a backend chosen per pair
//! of peers.
//!
//! This crate owns the registered buffers, their descriptors, the owner's
//! data-plane server and data connections, and the three backends. It uses
//! monarch-core (the runtime, errors and futures, the job's authentication
//! handshake and TLS configuration); core does not depend on it. The C ABI
//! (`monarch_rdma_*` in monarch-ffi) is built on this crate's public items.
//!
//! - `identity`: this process's job token and proc address
//! - `registry`: the owner's registered regions, leases, drop
//! - `descriptor`: what a buffer handle becomes inside a message
//! - `server`: the owner's data-plane server (Unix + TCP listeners)
//! - `conn`: data connections, handshake, requests, the client pool
//! - `same_host`: `process_vm_readv`/`writev` between procs of one host
//! - `tcp`: striped transfers on dedicated TCP data connections
//! - [`ibverbs`]: libibverbs loaded at run time: detection, queue pairs,
//!   RDMA READ/WRITE
//! - `pacing`: bulk copies in pieces, at a lower thread priority
//! - `random`: registration keys and other unguessable values
//!
//! A [`Buffer`] is either the owner's registration (made by [`register`])
//! or a handle rebuilt from a descriptor ([`Buffer::from_bytes`]); both
//! read and write the same way. Selection per transfer: the backend forced
//! by `MONARCH_RDMA_BACKEND` (`same_host`, `tcp`, `ibverbs`, or `auto`,
//! the default) when it can reach the owner; otherwise ibverbs when
//! both sides found an active RDMA device (see [`ibverbs`]), then
//! same-host when the owner runs on this host (same boot id and pid/net
//! namespaces) and the kernel permits `process_vm_*`, then TCP.

#![deny(missing_docs)]

mod conn;
mod descriptor;
pub mod ibverbs;
mod identity;
mod pacing;
mod random;
mod registry;
mod same_host;
mod server;
mod tcp;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use monarch_core::progress::{self, ProgressKind};
use monarch_core::{Error, ErrorKind, Future, PointValue, Result, Runtime, Shape, ValueMesh};
use parking_lot::Mutex;

pub use descriptor::Descriptor;
pub use registry::registered_count;
pub use same_host::{host_identity, is_unsupported, read_now, write_now};

/// A data-plane backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `process_vm_readv`/`writev` between procs of one host.
    SameHost = 1,
    /// Striped copies over dedicated TCP data connections.
    Tcp = 2,
    /// RDMA READ/WRITE through libibverbs.
    Ibverbs = 3,
}

impl Backend {
    /// The name used by `MONARCH_RDMA_BACKEND` and reported by transfers.
    pub fn name(self) -> &'static str {
        match self {
            Backend::SameHost => "same_host",
            Backend::Tcp => "tcp",
            Backend::Ibverbs => "ibverbs",
        }
    }
    fn from_u8(v: u8) -> Option<Backend> {
        match v {
            1 => Some(Backend::SameHost),
            2 => Some(Backend::Tcp),
            3 => Some(Backend::Ibverbs),
            _ => None,
        }
    }
}

/// The backend forced by `MONARCH_RDMA_BACKEND`, if any (read at each
/// selection, so tests can switch it).
pub fn forced_backend() -> Result<Option<Backend>> {
    match std::env::var("MONARCH_RDMA_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("auto") => Ok(None),
        Ok("same_host") => Ok(Some(Backend::SameHost)),
        Ok("tcp") => Ok(Some(Backend::Tcp)),
        Ok("ibverbs") => Ok(Some(Backend::Ibverbs)),
        Ok(other) => Err(Error::invalid(format!(
            "MONARCH_RDMA_BACKEND={other} is not one of auto, same_host, tcp, ibverbs"
        ))),
    }
}

/// Set once `process_vm_*` was refused by the kernel: same-host pairs use
/// TCP from then on.
static SAME_HOST_REFUSED: AtomicBool = AtomicBool::new(false);

/// Owners (by data-plane TCP address) with which an ibverbs transfer
/// failed for a reason other than a refusal: they use TCP from then on.
static VERBS_REFUSED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Tell the data plane this process's job token and proc address (done
/// for you by every function taking a `Runtime`; the latest call wins).
pub fn init(token: &str, owner: &str) {
    identity::set(token, owner);
}

fn init_from(rt: &Runtime) {
    if identity::token() != rt.job_token() {
        init(rt.job_token(), rt.addr());
    }
}

/// Reads at least this large advise huge pages for their destination.
const HUGE_ADVICE_MIN: usize = 4 << 20;

/// Ask for transparent huge pages over the 2 MiB-aligned interior of a
/// read's destination. A fresh destination (just allocated, not touched)
/// then costs a few page faults per 64 MiB instead of 16,384, which on a VM
/// is most of the time of the copy; memory already touched is unaffected.
/// Advice only: errors (no THP, not anonymous memory) are ignored.
/// Transfers from this size on report their progress (when observed).
const PROGRESS_MIN: usize = 32 << 20;
/// The smallest piece a transfer that reports progress is cut into.
const PROGRESS_PIECE: usize = 8 << 20;

fn advise_huge_pages(ptr: usize, len: usize) {
    const HUGE: usize = 2 << 20;
    let start = ptr.div_ceil(HUGE) * HUGE;
    let end = (ptr + len) / HUGE * HUGE;
    if end > start {
        // SAFETY: madvise(MADV_HUGEPAGE) changes no contents and no
        // mapping, only how the kernel backs the range.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

/// A registered buffer, or a handle on someone else's.
pub struct Buffer {
    desc: Descriptor,
    /// Registered by this process (this handle is the owner's).
    local: bool,
    dropped: AtomicBool,
    /// The backend chosen for this pair (0: not yet chosen).
    backend: AtomicU8,
    rt: Option<Runtime>,
}

/// Register `len` bytes at `ptr`, owned by the calling process. The memory
/// must stay valid until the buffer is dropped. `writable` false refuses
/// writes from peers; `readers` is how many remote drops release it (1 for
/// an ordinary buffer; N for a payload handed to N receivers).
pub fn register(
    rt: Option<&Runtime>,
    ptr: usize,
    len: usize,
    writable: bool,
    readers: usize,
) -> Result<Arc<Buffer>> {
    if let Some(rt) = rt {
        init_from(rt);
    }
    if ptr == 0 || len == 0 {
        return Err(Error::invalid(
            "an RDMA buffer needs a non-NULL pointer and a non-zero length",
        ));
    }
    let srv = server::running()?;
    same_host::allow_access();
    let (id, key) = registry::register(ptr, len, writable, readers)?;
    let mut backends = descriptor::OFFER_SAME_HOST | descriptor::OFFER_TCP;
    if ibverbs::probe().available {
        backends |= descriptor::OFFER_IBVERBS;
    }
    let desc = Descriptor {
        owner: identity::owner(),
        id,
        key,
        size: len as u64,
        writable,
        backends,
        host: same_host::host_identity(),
        pid: std::process::id(),
        addr: ptr as u64,
        unix_path: srv.unix.clone(),
        tcp_addr: srv.tcp.clone(),
    };
    Ok(Arc::new(Buffer {
        desc,
        local: true,
        dropped: AtomicBool::new(false),
        backend: AtomicU8::new(0),
        rt: rt.cloned(),
    }))
}

fn done_value(backend: Backend) -> ValueMesh {
    ValueMesh {
        shape: Shape::new(&[]).unwrap_or_else(|_| unreachable!("a 0-d shape is valid")),
        values: vec![PointValue::Ok(vec![backend.name().as_bytes().to_vec()])],
    }
}

impl Buffer {
    /// A handle on the buffer described by `bytes` (from [`Buffer::to_bytes`]).
    pub fn from_bytes(rt: Option<&Runtime>, bytes: &[u8]) -> Result<Arc<Buffer>> {
        if let Some(rt) = rt {
            init_from(rt);
        }
        let desc = Descriptor::decode(bytes)?;
        Ok(Arc::new(Buffer {
            desc,
            local: false,
            dropped: AtomicBool::new(false),
            backend: AtomicU8::new(0),
            rt: rt.cloned(),
        }))
    }

    /// The descriptor bytes a message carries to other procs (an error
    /// once the handle was dropped).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.check_live()?;
        Ok(self.desc.encode())
    }

    /// What this handle knows of the buffer and its owner.
    pub fn descriptor(&self) -> &Descriptor {
        &self.desc
    }

    /// The buffer's size in bytes.
    pub fn size(&self) -> u64 {
        self.desc.size
    }

    /// Whether this handle is the owner's registration.
    pub fn is_owner(&self) -> bool {
        self.local
    }

    /// For the owner's handle: whether the buffer is still registered (a
    /// buffer registered for N readers is released after N remote drops).
    /// For other handles: whether this handle was not dropped.
    pub fn is_registered(&self) -> bool {
        if self.dropped.load(Ordering::SeqCst) {
            return false;
        }
        !self.local || registry::is_registered(self.desc.id, self.desc.key)
    }

    fn check_live(&self) -> Result<()> {
        if self.dropped.load(Ordering::SeqCst) {
            return Err(Error::invalid(format!(
                "RDMA buffer {} of proc {} was dropped; it cannot be used any more",
                self.desc.id, self.desc.owner
            )));
        }
        Ok(())
    }

    fn same_host(&self) -> bool {
        self.desc.host == same_host::host_identity()
    }

    /// The backend transfers on this handle use (chosen on first use).
    pub fn backend(&self) -> Result<Backend> {
        if let Some(b) = Backend::from_u8(self.backend.load(Ordering::Relaxed)) {
            return Ok(b);
        }
        let b = self.choose()?;
        self.backend.store(b as u8, Ordering::Relaxed);
        Ok(b)
    }

    /// Use backend `b` for this handle's transfers from now on (tests, or
    /// a binding that knows better). A backend that cannot reach the
    /// owner fails its transfers.
    pub fn set_backend(&self, b: Backend) {
        self.backend.store(b as u8, Ordering::Relaxed);
    }

    fn choose(&self) -> Result<Backend> {
        Ok(self.choose_with(forced_backend()?))
    }

    /// The backend selection for this pair with `forced` as the forced one.
    pub fn choose_with(&self, forced: Option<Backend>) -> Backend {
        let same_ok = self.same_host()
            && self.desc.backends & descriptor::OFFER_SAME_HOST != 0
            && !SAME_HOST_REFUSED.load(Ordering::Relaxed);
        let verbs_ok = self.desc.backends & descriptor::OFFER_IBVERBS != 0
            && ibverbs::probe().available
            && !VERBS_REFUSED.lock().contains(&self.desc.tcp_addr);
        let auto = || {
            if verbs_ok {
                Backend::Ibverbs
            } else if same_ok {
                Backend::SameHost
            } else {
                Backend::Tcp
            }
        };
        match forced {
            Some(Backend::Tcp) => Backend::Tcp,
            Some(Backend::SameHost) if same_ok => Backend::SameHost,
            Some(Backend::Ibverbs) if verbs_ok => Backend::Ibverbs,
            Some(f) => {
                let b = auto();
                tracing::info!(
                    forced = f.name(),
                    using = b.name(),
                    why = %if f == Backend::Ibverbs { ibverbs::probe().reason.clone() } else { "owner is on another host".into() },
                    "forced RDMA backend cannot reach the owner; falling back"
                );
                b
            }
            None => auto(),
        }
    }

    fn check_range(&self, offset: u64, len: usize) -> Result<()> {
        let ok = matches!(offset.checked_add(len as u64), Some(e) if e <= self.desc.size);
        if !ok {
            return Err(Error::invalid(format!(
                "range {offset}..{} is outside the RDMA buffer of size {}",
                offset.saturating_add(len as u64),
                self.desc.size
            )));
        }
        Ok(())
    }

    /// Copy `len` bytes of the buffer from `offset` into `dst` (blocking).
    /// `dst` must be writable for `len` bytes for the whole call.
    pub fn read_into(&self, offset: u64, dst: usize, len: usize) -> Result<Backend> {
        self.transfer(offset, dst, len, false)
    }

    /// Copy `len` bytes from `src` into the buffer at `offset` (blocking).
    pub fn write_from(&self, offset: u64, src: usize, len: usize) -> Result<Backend> {
        if !self.desc.writable {
            return Err(Error::invalid(format!(
                "RDMA buffer {} of proc {} is read-only",
                self.desc.id, self.desc.owner
            )));
        }
        self.transfer(offset, src, len, true)
    }

    /// Copy between the buffer and local memory: in pieces that report
    /// progress when the transfer is large and someone follows progress
    /// (a terminal, a watching host), else in one go.
    fn transfer(&self, offset: u64, local: usize, len: usize, write: bool) -> Result<Backend> {
        let span = tracing::info_span!(
            "rdma",
            op = if write { "write" } else { "read" },
            owner = %self.desc.owner,
            buffer = self.desc.id,
            bytes = len,
            backend = tracing::field::Empty,
        );
        let _in = span.enter();
        self.check_live()?;
        self.check_range(offset, len)?;
        if len < PROGRESS_MIN || !progress::observed() {
            let b = self.transfer_piece(offset, local, len, write)?;
            span.record("backend", b.name());
            return Ok(b);
        }
        let label = if write { "RDMA write" } else { "RDMA read" };
        let op = progress::start(ProgressKind::RdmaTransfer, label, len as u64);
        let piece = (len / 16).max(PROGRESS_PIECE);
        let mut at = 0;
        let mut backend = None;
        while at < len {
            let n = piece.min(len - at);
            backend = Some(self.transfer_piece(offset + at as u64, local + at, n, write)?);
            at += n;
            op.set_done(at as u64);
        }
        op.finish();
        let b = backend.expect("len > 0");
        span.record("backend", b.name());
        Ok(b)
    }

    fn transfer_piece(
        &self,
        offset: u64,
        local: usize,
        len: usize,
        write: bool,
    ) -> Result<Backend> {
        self.check_live()?;
        self.check_range(offset, len)?;
        if len == 0 {
            return self.backend();
        }
        if local == 0 {
            return Err(Error::invalid("the local memory pointer is NULL"));
        }
        if !write && len >= HUGE_ADVICE_MIN {
            advise_huge_pages(local, len);
        }
        let b = self.backend()?;
        match b {
            Backend::SameHost => match self.same_host_transfer(offset, local, len, write) {
                Err(e) if e.kind == ErrorKind::Io && SAME_HOST_REFUSED.load(Ordering::Relaxed) => {
                    tracing::info!(error = %e, "process_vm_* refused by the kernel; using TCP");
                    self.backend.store(Backend::Tcp as u8, Ordering::Relaxed);
                    self.tcp_transfer(offset, local, len, write)
                }
                r => r.map(|_| Backend::SameHost),
            },
            Backend::Ibverbs => match self.verbs_transfer(offset, local, len, write) {
                Err(e) if e.kind == ErrorKind::Io => {
                    tracing::info!(error = %e, owner = %self.desc.owner, "ibverbs transfer failed; using TCP with this owner");
                    VERBS_REFUSED.lock().insert(self.desc.tcp_addr.clone());
                    self.backend.store(Backend::Tcp as u8, Ordering::Relaxed);
                    self.tcp_transfer(offset, local, len, write)
                }
                r => r,
            },
            Backend::Tcp => self.tcp_transfer(offset, local, len, write),
        }
    }

    fn verbs_transfer(
        &self,
        offset: u64,
        local: usize,
        len: usize,
        write: bool,
    ) -> Result<Backend> {
        let target = tcp::target(&self.desc, self.same_host());
        ibverbs::transfer(
            &self.desc,
            &identity::token(),
            &target,
            offset,
            local,
            len,
            write,
        )?;
        Ok(Backend::Ibverbs)
    }

    fn tcp_transfer(&self, offset: u64, local: usize, len: usize, write: bool) -> Result<Backend> {
        tcp::transfer(
            &self.desc,
            &identity::token(),
            self.same_host(),
            offset,
            local,
            len,
            write,
        )?;
        Ok(Backend::Tcp)
    }

    fn same_host_transfer(&self, offset: u64, local: usize, len: usize, write: bool) -> Result<()> {
        let d = &self.desc;
        let remote = d.addr + offset;
        if d.pid == std::process::id() {
            // Our own buffer: the registry grants the lease directly.
            let _lease = registry::lease(d.id, d.key, offset, len as u64, write)?;
            // The lease checked the range against the live registration;
            // `local` is valid for `len` bytes (the caller's contract).
            let chunk = pacing::bulk_chunk();
            let _copier = pacing::Copier::new(len);
            let mut at = 0;
            while at < len {
                let n = chunk.min(len - at);
                // SAFETY: as above, for a piece of the range.
                unsafe {
                    if write {
                        std::ptr::copy(
                            (local + at) as *const u8,
                            (remote as usize + at) as *mut u8,
                            n,
                        )
                    } else {
                        std::ptr::copy(
                            (remote as usize + at) as *const u8,
                            (local + at) as *mut u8,
                            n,
                        )
                    }
                }
                at += n;
                if at < len {
                    pacing::between_chunks();
                }
            }
            return Ok(());
        }
        let target = &d.unix_path;
        let what = if write { "write" } else { "read" };
        let mut s = conn::get(target, &identity::token(), &d.owner)?;
        let lease = conn::Request {
            op: if write {
                conn::OP_LEASE_WRITE
            } else {
                conn::OP_LEASE_READ
            },
            id: d.id,
            key: d.key,
            offset,
            len: len as u64,
        };
        if let Err(e) = conn::request(&mut s, &lease, &d.owner, what) {
            if e.kind == ErrorKind::InvalidArgument {
                conn::put(target, s);
            } else {
                conn::forget(target);
            }
            return Err(e);
        }
        let copied = if write {
            same_host::write(d.pid, remote, local as *const u8, len)
        } else {
            same_host::read(d.pid, remote, local as *mut u8, len)
        };
        let release = conn::Request {
            op: conn::OP_RELEASE,
            ..lease
        };
        // The owner's acknowledgement proves it lived through the copy.
        if let Err(e) = conn::request(&mut s, &release, &d.owner, what) {
            conn::forget(target);
            return Err(e);
        }
        conn::put(target, s);
        match copied {
            Ok(()) => Ok(()),
            Err(e) if same_host::is_unsupported(&e) => {
                SAME_HOST_REFUSED.store(true, Ordering::Relaxed);
                Err(Error::io("process_vm copy", e))
            }
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(Error::new(
                ErrorKind::ProcFailed,
                format!("proc {} (pid {}) exited during the {what}", d.owner, d.pid),
            )),
            Err(e) => Err(Error::new(
                ErrorKind::Io,
                format!(
                    "{what} of RDMA buffer {} of proc {} failed: {e}",
                    d.id, d.owner
                ),
            )),
        }
    }

    /// Release the buffer. The owner's handle unregisters it (waiting for
    /// transfers in progress to end); another handle asks the owner to drop
    /// one reference (an owner that is gone, or a buffer already released,
    /// has nothing left to release: that is not an error).
    /// Using any handle after its drop is an error; dropping twice is too.
    pub fn drop_buffer(&self) -> Result<()> {
        if self.dropped.swap(true, Ordering::SeqCst) {
            return Err(Error::invalid(format!(
                "RDMA buffer {} of proc {} was already dropped",
                self.desc.id, self.desc.owner
            )));
        }
        let d = &self.desc;
        if self.local {
            // Released already by remote drops: nothing left to do.
            let _ = registry::release(d.id, d.key);
            return Ok(());
        }
        if d.pid == std::process::id() && self.same_host() {
            return registry::unref(d.id, d.key).map(|_| ());
        }
        let target = if self.same_host() {
            d.unix_path.clone()
        } else {
            tcp::target(d, false)
        };
        let mut s = match conn::get(&target, &identity::token(), &d.owner) {
            Ok(s) => s,
            Err(e) if e.kind == ErrorKind::ProcFailed => return Ok(()),
            Err(e) => return Err(e),
        };
        let req = conn::Request {
            op: conn::OP_DROP,
            id: d.id,
            key: d.key,
            offset: 0,
            len: 0,
        };
        match conn::request(&mut s, &req, &d.owner, "drop") {
            Ok(()) => {
                conn::put(&target, s);
                Ok(())
            }
            Err(e) if e.kind == ErrorKind::ProcFailed => {
                conn::forget(&target);
                Ok(())
            }
            Err(e) => {
                // Already released (by its owner or other handles): there
                // is nothing left to release.
                tracing::debug!(error = %e, "remote drop of a released buffer");
                conn::put(&target, s);
                Ok(())
            }
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // The owner's registration never outlives its handle: the memory
        // it points at may be freed right after.
        if self.local && !self.dropped.swap(true, Ordering::SeqCst) {
            let _ = registry::release(self.desc.id, self.desc.key);
        }
    }
}

/// Start a transfer on a background thread; the future completes with a
/// one-point value whose single part is the backend's name, or with the
/// error. `local` must stay valid until the future completes.
pub fn start_transfer(
    rt: &Runtime,
    buf: Arc<Buffer>,
    offset: u64,
    local: usize,
    len: usize,
    write: bool,
) -> Result<Future> {
    rt.check_running()?;
    buf.check_live()?;
    buf.check_range(offset, len)?;
    if write && !buf.desc.writable {
        return Err(Error::invalid(format!(
            "RDMA buffer {} of proc {} is read-only",
            buf.desc.id, buf.desc.owner
        )));
    }
    let fut = rt.new_future();
    let f = fut.clone();
    std::thread::Builder::new()
        .name("monarch-rdma-xfer".into())
        .spawn(move || {
            let r = buf.transfer(offset, local, len, write);
            f.complete(r.map(done_value));
        })
        .map_err(|e| Error::io("cannot start a transfer thread", e))?;
    Ok(fut)
}

impl Buffer {
    /// The runtime a buffer was made with, if any.
    pub fn runtime(&self) -> Option<&Runtime> {
        self.rt.as_ref()
    }
}

/// The backend a transfer with a proc on this host would use by default
/// (after `MONARCH_RDMA_BACKEND` and the ibverbs probe).
pub fn default_backend() -> Result<Backend> {
    let verbs = ibverbs::probe().available;
    Ok(match forced_backend()? {
        Some(Backend::Tcp) => Backend::Tcp,
        Some(Backend::Ibverbs) if verbs => Backend::Ibverbs,
        _ if verbs => Backend::Ibverbs,
        _ if SAME_HOST_REFUSED.load(Ordering::Relaxed) => Backend::Tcp,
        _ => Backend::SameHost,
    })
}
