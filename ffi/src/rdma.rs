//! `monarch_rdma_buffer`: the data plane's registered buffers, read and
//! written one-sided by other procs (see docs/data-plane.md).

use std::ffi::{c_char, CString};
use std::sync::{Arc, OnceLock};

use monarch_rdma::{self as rdma, Backend, Buffer};

use crate::args::{arg_slice, out_ptr};
use crate::bytes::owned_buffer;
use crate::future::monarch_future;
use crate::handles::{self, get, insert, insert_arc, Handle};
use crate::runtime::monarch_runtime;
use crate::status::{guard, monarch_status, Fail};

/// A registered memory buffer (the owner's), or a handle on another
/// proc's buffer rebuilt from its descriptor bytes.
///
/// Created by `monarch_rdma_register` (the owner's handle) or
/// `monarch_rdma_buffer_from_bytes`; freed by `monarch_rdma_buffer_free`
/// (freeing the owner's handle unregisters the buffer). May be used from
/// any number of threads at once, including transfers in parallel.
pub struct monarch_rdma_buffer {
    _private: [u8; 0],
}

impl Handle for monarch_rdma_buffer {
    type Rust = Buffer;
    const KIND: &'static str = "rdma buffer";
}

/// `monarch_rdma_register` flag: peers may read the buffer but not write it.
pub const MONARCH_RDMA_READ_ONLY: u32 = 1;

fn backend_cstr(b: Backend) -> *const c_char {
    match b {
        Backend::SameHost => c"same_host".as_ptr(),
        Backend::Tcp => c"tcp".as_ptr(),
        Backend::Ibverbs => c"ibverbs".as_ptr(),
    }
}

/// Register `len` bytes at `ptr`, owned by the calling process, so other
/// procs can read and write them one-sided; writes the owner's buffer
/// handle to `*out`.
///
/// The memory stays the caller's: it must remain valid until the buffer is
/// dropped (`monarch_rdma_buffer_drop`) or its handle freed, which both
/// unregister it (waiting for transfers in progress to end). `flags` is 0
/// or `MONARCH_RDMA_READ_ONLY`. `readers` is how many remote drops release
/// the registration (0 or 1: the usual single reference; N: a payload
/// handed to N receivers, each dropping its handle once it has read).
/// `ptr` must be non-NULL, `len` non-zero, and `ptr + len` must not run
/// past the end of the address space (`MONARCH_ERR_INVALID_ARGUMENT`).
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_register(
    rt: *const monarch_runtime,
    ptr: *mut u8,
    len: usize,
    flags: u32,
    readers: u32,
    out: *mut *mut monarch_rdma_buffer,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let out = out_ptr(out, "out")?;
        if flags & !MONARCH_RDMA_READ_ONLY != 0 {
            return Err(Fail::invalid(format!("unknown flags {flags:#x}")));
        }
        let writable = flags & MONARCH_RDMA_READ_ONLY == 0;
        let b = rdma::register(
            Some(&r),
            ptr as usize,
            len,
            writable,
            readers.max(1) as usize,
        )?;
        *out = insert_arc::<monarch_rdma_buffer>(b);
        Ok(())
    })
}

/// Serialize the buffer's descriptor (owner proc, id, size, how to reach
/// it) into an owned byte buffer to put inside any message; free it with
/// `monarch_buffer_free`. Fails once the handle was dropped.
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_buffer_to_bytes(
    buf: *const monarch_rdma_buffer,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let b = get(buf)?;
        let v = b.to_bytes()?;
        owned_buffer(v, out, out_len)
    })
}

/// Rebuild a buffer handle from descriptor bytes made by
/// `monarch_rdma_buffer_to_bytes` (in any proc of the job); the bytes are
/// borrowed for the call. Malformed bytes: `MONARCH_ERR_INVALID_ARGUMENT`.
/// Free the handle with `monarch_rdma_buffer_free` (that does not release
/// the owner's buffer; `monarch_rdma_buffer_drop` does).
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_buffer_from_bytes(
    rt: *const monarch_runtime,
    bytes: *const u8,
    len: usize,
    out: *mut *mut monarch_rdma_buffer,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let out = out_ptr(out, "out")?;
        let bytes = arg_slice(bytes, len, "bytes")?;
        let b = Buffer::from_bytes(Some(&r), bytes)?;
        *out = insert_arc::<monarch_rdma_buffer>(b);
        Ok(())
    })
}

/// Write the buffer's size in bytes to `*out`.
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_buffer_size(
    buf: *const monarch_rdma_buffer,
    out: *mut u64,
) -> monarch_status {
    guard(|| {
        let b = get(buf)?;
        *out_ptr(out, "out")? = b.size();
        Ok(())
    })
}

/// Write the name of the backend transfers on this handle use
/// ("same_host", "tcp" or "ibverbs") to `*out`: a static string owned by
/// the library. Chosen for this pair of procs on first use (see
/// `MONARCH_RDMA_BACKEND` in docs/data-plane.md).
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_buffer_backend(
    buf: *const monarch_rdma_buffer,
    out: *mut *const c_char,
) -> monarch_status {
    guard(|| {
        let b = get(buf)?;
        let out = out_ptr(out, "out")?;
        *out = backend_cstr(b.backend()?);
        Ok(())
    })
}

fn transfer(
    buf: *const monarch_rdma_buffer,
    offset: u64,
    local: usize,
    len: usize,
    write: bool,
    out: *mut *mut monarch_future,
) -> Result<(), Fail> {
    let b: Arc<Buffer> = get(buf)?;
    let out = out_ptr(out, "out")?;
    if local == 0 && len > 0 {
        return Err(Fail::invalid("the local memory pointer is NULL"));
    }
    let rt = b
        .runtime()
        .cloned()
        .ok_or_else(|| Fail::invalid("this buffer handle has no runtime"))?;
    let fut = rdma::start_transfer(&rt, b, offset, local, len, write)?;
    *out = insert::<monarch_future>(fut);
    Ok(())
}

/// Start copying `len` bytes of the buffer, from byte `offset`, into
/// `dst`; writes a future to `*out`. The future completes with a one-point
/// value mesh whose single part is the name of the backend used, or fails
/// (`monarch_future_take`'s status): `MONARCH_ERR_INVALID_ARGUMENT` for a
/// range outside the buffer or a dropped/unregistered buffer,
/// `MONARCH_ERR_PROC_FAILED` when the owner is dead or dies meanwhile.
/// `dst` stays the caller's and must remain valid and untouched until the
/// future completes; freeing the future first does not stop the copy, so
/// wait for it (`monarch_future_wait`) before releasing `dst`. A range
/// outside the buffer is refused at once.
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_read_into(
    buf: *const monarch_rdma_buffer,
    offset: u64,
    dst: *mut u8,
    len: usize,
    out: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| transfer(buf, offset, dst as usize, len, false, out))
}

/// Start copying `len` bytes from `src` into the buffer at byte `offset`;
/// writes a future to `*out` (completes as for `monarch_rdma_read_into`).
/// `src` stays the caller's and must remain valid until the future
/// completes (as for `dst` above, wait for it before releasing `src`).
/// Refused for a read-only buffer.
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_write_from(
    buf: *const monarch_rdma_buffer,
    offset: u64,
    src: *const u8,
    len: usize,
    out: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| transfer(buf, offset, src as usize, len, true, out))
}

/// Release the buffer: the owner's handle unregisters it (waiting for
/// transfers in progress); any other handle asks the owner to drop one
/// reference (an unreachable owner or an already-released buffer is not an
/// error). Afterwards every use of this handle fails, and a second drop is
/// `MONARCH_ERR_INVALID_ARGUMENT`. The handle itself must still be freed.
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_buffer_drop(
    buf: *const monarch_rdma_buffer,
) -> monarch_status {
    guard(|| {
        let b = get(buf)?;
        b.drop_buffer()?;
        Ok(())
    })
}

/// Write to `*out` whether the buffer is still registered (owner's handle:
/// not dropped and not released by its remote drops) or, for another
/// handle, whether it was not dropped.
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_buffer_is_registered(
    buf: *const monarch_rdma_buffer,
    out: *mut bool,
) -> monarch_status {
    guard(|| {
        let b = get(buf)?;
        *out_ptr(out, "out")? = b.is_registered();
        Ok(())
    })
}

/// Free a buffer handle. Freeing the owner's handle unregisters the buffer
/// (as `monarch_rdma_buffer_drop`), so its memory may be released after;
/// freeing any other handle releases nothing at the owner. NULL is a
/// no-op.
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_buffer_free(buf: *mut monarch_rdma_buffer) -> monarch_status {
    guard(|| handles::free(buf))
}

/// Write the name of the backend a transfer with a proc on this host uses
/// by default ("same_host", "tcp" or "ibverbs"; `MONARCH_RDMA_BACKEND`
/// forces one), a static string. A bad `MONARCH_RDMA_BACKEND` is
/// `MONARCH_ERR_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_default_backend(out: *mut *const c_char) -> monarch_status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        *out = backend_cstr(rdma::default_backend()?);
        Ok(())
    })
}

/// Whether the ibverbs backend can be used, and in words why not (for
/// example: libibverbs.so.1 cannot be loaded, or no RDMA device). The
/// reason is a string owned by the library, valid for the process's life.
#[no_mangle]
pub unsafe extern "C" fn monarch_rdma_ibverbs_status(
    available: *mut bool,
    reason: *mut *const c_char,
) -> monarch_status {
    guard(|| {
        static REASON: OnceLock<CString> = OnceLock::new();
        let available = out_ptr(available, "available")?;
        let reason = out_ptr(reason, "reason")?;
        let p = rdma::ibverbs::probe();
        *available = p.available;
        *reason = REASON
            .get_or_init(|| CString::new(p.reason.replace('\0', "")).unwrap_or_default())
            .as_ptr();
        Ok(())
    })
}
