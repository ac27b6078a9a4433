//! `monarch_progress`: the progress of this process's long operations
//! (procs starting, a SLURM allocation in the queue, large RDMA transfers,
//! tensor fetches) as events a host pulls, and operations a host reports
//! itself. The same updates draw the status line on the controller's
//! terminal (docs/tracing.md, "Progress").

use std::ffi::c_char;
use std::sync::Arc;

use monarch_core::progress::{self, Operation, ProgressKind};

use crate::args::{arg_str, out_ptr, timeout};
use crate::bytes::owned_buffer;
use crate::handles::{self, get, insert, Handle};
use crate::status::{guard, monarch_status, Fail};

/// A long operation the host reports the progress of (e.g. a tensor
/// fetch), created by `monarch_progress_begin` and finished by
/// `monarch_progress_free`. May be used from any thread.
pub struct monarch_progress {
    _private: [u8; 0],
}

impl Handle for monarch_progress {
    type Rust = Arc<Operation>;
    const KIND: &'static str = "progress";
}

/// Start (`enable` true) or stop keeping this process's progress events
/// for `monarch_progress_next`. Events are kept only while enabled (at
/// most 4,096 not taken: the oldest go); disabling drops those not taken.
#[no_mangle]
pub extern "C" fn monarch_progress_watch(enable: bool) -> monarch_status {
    guard(|| {
        progress::watch(enable);
        Ok(())
    })
}

/// Take the next progress event, waiting up to `timeout_ms` (-1: forever):
/// a `ProgressEvent` flatbuffer (core/schema/monarch.fbs) in a buffer the
/// caller owns (free it with `monarch_buffer_free`). Each operation sends
/// one event when it starts, one per change, and a last one with
/// `finished` set. Returns `MONARCH_ERR_TIMEOUT` when none came. Call
/// `monarch_progress_watch(true)` first. Safe to call from a thread of its
/// own.
#[no_mangle]
pub unsafe extern "C" fn monarch_progress_next(
    timeout_ms: i64,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        out_ptr(out, "out")?;
        out_ptr(out_len, "out_len")?;
        let wait = timeout(timeout_ms)?;
        match progress::next(wait) {
            Some(u) => owned_buffer(u.encode(), out, out_len),
            None => Err(Fail::new(
                crate::status::MONARCH_ERR_TIMEOUT,
                "no progress event",
            )),
        }
    })
}

/// Report a long operation of the host: `kind` is a `ProgressKind` of the
/// schema (1 procs ready, 2 SLURM allocation, 3 RDMA transfer, 4 tensor
/// fetch), `label` what it is (copied), `total` its size (bytes for 3 and
/// 4; 0 if unknown). Its progress is shown and sent like the runtime's
/// own. Free the handle with `monarch_progress_free` when it is over.
#[no_mangle]
pub unsafe extern "C" fn monarch_progress_begin(
    kind: u32,
    label: *const c_char,
    total: u64,
    out: *mut *mut monarch_progress,
) -> monarch_status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        let label = arg_str(label, "label")?;
        let kind = ProgressKind::from_u32(kind)
            .ok_or_else(|| Fail::invalid(format!("unknown progress kind {kind}")))?;
        *out = insert::<monarch_progress>(progress::start(kind, label, total));
        Ok(())
    })
}

/// Set how much of the operation is done (and, when `total` is not 0, its
/// size).
#[no_mangle]
pub unsafe extern "C" fn monarch_progress_set(
    op: *const monarch_progress,
    done: u64,
    total: u64,
) -> monarch_status {
    guard(|| {
        let op = get(op)?;
        if total != 0 {
            op.set_total(total);
        }
        op.set_done(done);
        Ok(())
    })
}

/// The operation is over: send its last event and free the handle. NULL
/// is a no-op.
#[no_mangle]
pub unsafe extern "C" fn monarch_progress_free(op: *mut monarch_progress) -> monarch_status {
    guard(|| {
        if let Some(op) = handles::remove(op)? {
            op.finish();
        }
        Ok(())
    })
}
