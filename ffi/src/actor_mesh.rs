//! `monarch_actor_mesh`: an n-d array of actors, its views, and calling
//! its endpoints.

use std::ffi::c_char;

use monarch_core::{ActorMesh, CallMode, MeshView};

use crate::args::{arg_slice, arg_str, out_ptr};
use crate::bytes::{monarch_bytes, owned_buffer, parts};
use crate::future::monarch_future;
use crate::handles::{self, get, insert, Handle};
use crate::port::{monarch_port_receiver, port_ref};
use crate::proc_mesh::monarch_proc_mesh;
use crate::runtime::monarch_runtime;
use crate::status::{guard, monarch_status, Fail};
use crate::view::{derive_view, rename_args, shape_of, split_args};

/// Call mode: every actor of the mesh answers (gather a ValueMesh).
pub const MONARCH_CALL_ALL: u32 = 0;
/// Call mode: like ALL, but the mesh must contain exactly one actor.
pub const MONARCH_CALL_ONE: u32 = 1;
/// Call mode: one actor, chosen by the runtime, answers.
pub const MONARCH_CALL_CHOOSE: u32 = 2;
/// Call mode: every actor gets the message, nobody answers (no future).
pub const MONARCH_CALL_BROADCAST: u32 = 3;

/// An n-d array of actors (or a view of one).
///
/// Created by `monarch_actor_mesh_spawn`, `monarch_actor_mesh_from_ref` and
/// the view functions (`monarch_actor_mesh_slice_index`, ...), each a new
/// handle; freed by `monarch_actor_mesh_free`, which does not stop the
/// actors. May be used from any number of threads at once.
pub struct monarch_actor_mesh {
    _private: [u8; 0],
}

impl Handle for monarch_actor_mesh {
    type Rust = ActorMesh;
    const KIND: &'static str = "actor mesh";
}

/// Spawn one actor named `name` of type `type_name` on every proc of the
/// mesh, passing the argument parts to each constructor (the bytes are
/// copied before return). Writes the actor mesh to `*out_mesh` at once, and
/// to `*out_ready` a future whose ValueMesh holds each constructor's
/// outcome (an error point if it raised). Messages sent meanwhile are
/// delivered after construction.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_spawn(
    pm: *const monarch_proc_mesh,
    name: *const c_char,
    type_name: *const c_char,
    args: *const monarch_bytes,
    nargs: usize,
    out_mesh: *mut *mut monarch_actor_mesh,
    out_ready: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| {
        let m = get(pm)?;
        let out_mesh = out_ptr(out_mesh, "out_mesh")?;
        let out_ready = out_ptr(out_ready, "out_ready")?;
        let name = arg_str(name, "name")?;
        let type_name = arg_str(type_name, "type_name")?;
        let args = parts(args, nargs)?;
        let (am, ready) = m.spawn_actors(name, type_name, &args)?;
        *out_mesh = insert::<monarch_actor_mesh>(am);
        *out_ready = insert::<monarch_future>(ready);
        Ok(())
    })
}

/// Write the mesh's Shape flatbuffer; free it with `monarch_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_shape(
    am: *const monarch_actor_mesh,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| shape_of(am, out, out_len))
}

/// Like `monarch_proc_mesh_slice_index`, for actor meshes.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_slice_index(
    am: *const monarch_actor_mesh,
    label: *const c_char,
    index: usize,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| derive_view(am, out, |m| Ok(m.at(arg_str(label, "label")?, index)?)))
}

/// Like `monarch_proc_mesh_slice_range`, for actor meshes.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_slice_range(
    am: *const monarch_actor_mesh,
    label: *const c_char,
    start: i64,
    stop: i64,
    step: i64,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| {
        derive_view(am, out, |m| {
            Ok(m.select(arg_str(label, "label")?, Some(start), Some(stop), step)?)
        })
    })
}

/// Like `monarch_proc_mesh_flatten`, for actor meshes.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_flatten(
    am: *const monarch_actor_mesh,
    label: *const c_char,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| derive_view(am, out, |m| Ok(m.flatten(arg_str(label, "label")?)?)))
}

/// Like `monarch_proc_mesh_rename`, for actor meshes.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_rename(
    am: *const monarch_actor_mesh,
    from: *const *const c_char,
    to: *const *const c_char,
    n: usize,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| derive_view(am, out, |m| Ok(m.rename(&rename_args(from, to, n)?)?)))
}

/// Like `monarch_proc_mesh_split`, for actor meshes.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_split(
    am: *const monarch_actor_mesh,
    label: *const c_char,
    names: *const *const c_char,
    sizes: *const usize,
    n: usize,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| {
        derive_view(am, out, |m| {
            Ok(m.split(arg_str(label, "label")?, &split_args(names, sizes, n)?)?)
        })
    })
}

/// Call endpoint `method` of the actors of this mesh with the given parts
/// (borrowed for the call only). `mode` is one of the `MONARCH_CALL_*`
/// values. Writes a future of the gathered ValueMesh to `*out`, or NULL for
/// `MONARCH_CALL_BROADCAST` (`out` may then be NULL). An endpoint that
/// fails shows up as an error point in the ValueMesh, not as a status.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_call(
    am: *const monarch_actor_mesh,
    method: *const c_char,
    parts_in: *const monarch_bytes,
    nparts: usize,
    mode: u32,
    out: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| {
        let m = get(am)?;
        let mode = match mode {
            MONARCH_CALL_ALL => CallMode::All,
            MONARCH_CALL_ONE => CallMode::One,
            MONARCH_CALL_CHOOSE => CallMode::Choose,
            MONARCH_CALL_BROADCAST => CallMode::Broadcast,
            other => return Err(Fail::invalid(format!("unknown call mode {other}"))),
        };
        if mode != CallMode::Broadcast {
            out_ptr(out, "out")?;
        }
        let method = arg_str(method, "method")?;
        let p = parts(parts_in, nparts)?;
        let fut = m.call(method, &p, mode)?;
        if !out.is_null() {
            // SAFETY: checked non-null above.
            unsafe {
                *out = match fut {
                    Some(f) => insert::<monarch_future>(f),
                    None => std::ptr::null_mut(),
                }
            };
        }
        Ok(())
    })
}

/// Call endpoint `method` with replies sent to the port named by the
/// reference bytes (borrowed) instead of a future: `mode` is
/// `MONARCH_CALL_ALL` (every actor; point r of the mesh answers to slot r)
/// or `MONARCH_CALL_CHOOSE` (one actor chosen by the runtime).
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_send(
    am: *const monarch_actor_mesh,
    method: *const c_char,
    parts_in: *const monarch_bytes,
    nparts: usize,
    port_ref_ptr: *const u8,
    port_ref_len: usize,
    mode: u32,
) -> monarch_status {
    guard(|| {
        let m = get(am)?;
        let choose = match mode {
            MONARCH_CALL_ALL => false,
            MONARCH_CALL_CHOOSE => true,
            other => {
                return Err(Fail::invalid(format!(
                    "monarch_actor_mesh_send takes MONARCH_CALL_ALL or MONARCH_CALL_CHOOSE, not {other}"
                )))
            }
        };
        let method = arg_str(method, "method")?;
        let to = port_ref(port_ref_ptr, port_ref_len)?;
        let p = parts(parts_in, nparts)?;
        Ok(m.send_to_port(method, &p, &to, choose)?)
    })
}

/// Call endpoint `method` of every actor and stream the replies: writes a
/// port receiver whose `monarch_port_receiver_recv` futures yield one
/// reply each, in the order they arrive (one per actor; an actor whose
/// proc is lost yields an error). Free the receiver when done.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_stream(
    am: *const monarch_actor_mesh,
    method: *const c_char,
    parts_in: *const monarch_bytes,
    nparts: usize,
    out: *mut *mut monarch_port_receiver,
) -> monarch_status {
    guard(|| {
        let m = get(am)?;
        let out = out_ptr(out, "out")?;
        let method = arg_str(method, "method")?;
        let p = parts(parts_in, nparts)?;
        *out = insert::<monarch_port_receiver>(m.stream(method, &p)?);
        Ok(())
    })
}

/// Stop the actors of this mesh (their procs keep running). Writes a
/// future that completes when every actor has stopped.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_stop(
    am: *const monarch_actor_mesh,
    out: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| {
        let m = get(am)?;
        let out = out_ptr(out, "out")?;
        *out = insert::<monarch_future>(m.stop()?);
        Ok(())
    })
}

/// Serialize a reference to this mesh (an `ActorMeshRef` flatbuffer) that
/// can be sent to any proc of the job and turned back into a mesh there
/// with `monarch_actor_mesh_from_ref`. Free with `monarch_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_to_ref(
    am: *const monarch_actor_mesh,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let m = get(am)?;
        owned_buffer(m.to_ref(), out, out_len)
    })
}

/// Rebuild an actor mesh from the bytes of `monarch_actor_mesh_to_ref`
/// (borrowed for the call). Malformed bytes give MONARCH_ERR_INVALID_ARGUMENT.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_from_ref(
    rt: *const monarch_runtime,
    ptr: *const u8,
    len: usize,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let out = out_ptr(out, "out")?;
        let bytes = arg_slice(ptr, len, "ptr")?;
        *out = insert::<monarch_actor_mesh>(ActorMesh::from_ref(&r, bytes)?);
        Ok(())
    })
}

/// Free an actor mesh handle. Does not stop the actors. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_free(am: *mut monarch_actor_mesh) -> monarch_status {
    guard(|| handles::free(am))
}
