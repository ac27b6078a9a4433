//! `monarch_future`: a pending result, completed by waiting, polling or
//! watching the runtime's fd (the library never calls back).

use monarch_core::Future;

use crate::args::{out_ptr, timeout};
use crate::handles::{self, get, insert, Handle};
use crate::status::{guard, monarch_status, Fail, MONARCH_ERR_TIMEOUT};
use crate::value_mesh::{monarch_value_mesh, HeldValueMesh};

/// A pending result; complete it by waiting, polling or watching the fd.
///
/// Created by the functions that start an operation (calls, spawns,
/// stops, port receives, RDMA transfers); freed by `monarch_future_free`,
/// which does not cancel the operation. May be waited on and polled from
/// any thread; its result is taken once.
pub struct monarch_future {
    _private: [u8; 0],
}

impl Handle for monarch_future {
    type Rust = Future;
    const KIND: &'static str = "future";
}

/// Wait up to `timeout_ms` (-1: forever, 0: just check; any other negative value is
/// refused with `MONARCH_ERR_INVALID_ARGUMENT`) for the future to
/// complete. MONARCH_OK means it is complete (take its result with
/// `monarch_future_take`); MONARCH_ERR_TIMEOUT means not yet.
#[no_mangle]
pub unsafe extern "C" fn monarch_future_wait(
    fut: *const monarch_future,
    timeout_ms: i64,
) -> monarch_status {
    guard(|| {
        let f = get(fut)?;
        if f.wait(timeout(timeout_ms)?) {
            Ok(())
        } else {
            Err(Fail::new(
                MONARCH_ERR_TIMEOUT,
                format!("future not complete after {timeout_ms} ms"),
            ))
        }
    })
}

/// Write whether the future is complete, without waiting.
#[no_mangle]
pub unsafe extern "C" fn monarch_future_poll(
    fut: *const monarch_future,
    out_ready: *mut bool,
) -> monarch_status {
    guard(|| {
        let f = get(fut)?;
        *out_ptr(out_ready, "out_ready")? = f.is_ready();
        Ok(())
    })
}

/// Take the result of a complete future: writes its ValueMesh to `*out`,
/// or returns the status of the error that failed the whole operation.
/// A future's result can be taken once; it is MONARCH_ERR_INVALID_ARGUMENT
/// to take one that is not complete or was already taken.
#[no_mangle]
pub unsafe extern "C" fn monarch_future_take(
    fut: *const monarch_future,
    out: *mut *mut monarch_value_mesh,
) -> monarch_status {
    guard(|| {
        let f = get(fut)?;
        let out = out_ptr(out, "out")?;
        if !f.is_ready() {
            return Err(Fail::invalid("future is not complete yet"));
        }
        let mesh = f
            .take()
            .ok_or_else(|| Fail::invalid("future's result was already taken"))??;
        *out = insert::<monarch_value_mesh>(HeldValueMesh::new(mesh));
        Ok(())
    })
}

/// Free a future handle. The operation itself is not cancelled. NULL is a
/// no-op.
#[no_mangle]
pub unsafe extern "C" fn monarch_future_free(fut: *mut monarch_future) -> monarch_status {
    guard(|| handles::free(fut))
}
