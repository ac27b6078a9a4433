//! Introspection: a snapshot of the controller's job (its procs, the
//! actors they host with their counters, its meshes), for dashboards and
//! tools in any language.

use std::ffi::c_char;
use std::time::Duration;

use crate::args::{arg_str, out_ptr};
use crate::bytes::owned_buffer;
use crate::handles::get;
use crate::runtime::monarch_runtime;
use crate::status::{guard, monarch_status, Fail};

/// Write a snapshot of this process's job to `*out`/`*out_len` as a
/// `monarch.schema.Introspection` flatbuffer (`core/schema/monarch.fbs`):
/// this process first, then every proc it started, each with its address,
/// host name, pid, proc mesh and rank, state (`EntityState`: starting,
/// ready, failed, stopped) and failure report, and the actors it hosts
/// with their counters (messages answered, errors, queue depth, time in
/// handlers as a histogram, last error); then the meshes it spawned with
/// their state. Every ready proc is asked for its actors; the call waits
/// up to `timeout_ms` (>= 0) in all for their answers, and a proc that did
/// not answer in time is listed with `answered` false and no actors.
///
/// The buffer is allocated by libmonarch and owned by the caller: free it
/// with `monarch_buffer_free(*out, *out_len)`. Returns
/// `MONARCH_ERR_STOPPED` once the runtime was shut down.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_introspect(
    rt: *const monarch_runtime,
    timeout_ms: i64,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        out_ptr(out, "out")?;
        out_ptr(out_len, "out_len")?;
        let t = bounded(timeout_ms)?;
        let snapshot = r.introspect(t)?;
        owned_buffer(snapshot.encode(), out, out_len)
    })
}

/// Stop mesh `name` (as named in a `monarch_runtime_introspect`
/// snapshot) that this process spawned: a proc mesh's procs are asked to
/// stop and killed after 5 s; an actor mesh's actors are stopped (their
/// procs keep running). Returns once the procs of a proc mesh have exited.
/// `MONARCH_ERR_INVALID_ARGUMENT` when no mesh has that name. The string is
/// copied.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_stop_mesh(
    rt: *const monarch_runtime,
    name: *const c_char,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let name = arg_str(name, "name")?;
        r.stop_mesh(name)?;
        Ok(())
    })
}

fn bounded(ms: i64) -> Result<Duration, Fail> {
    if ms < 0 {
        return Err(Fail::invalid(format!(
            "timeout_ms is {ms}: introspection needs a bound >= 0"
        )));
    }
    Ok(Duration::from_millis(ms as u64))
}
