//! `monarch_proc_mesh`: an n-d array of procs, started here or on a host
//! mesh, and its views.

use std::ffi::c_char;

use monarch_core::{MeshView, ProcMesh};

use crate::args::{arg_slice, arg_str, dims, env_array, out_ptr, string_array};
use crate::bytes::owned_buffer;
use crate::future::monarch_future;
use crate::handles::{self, get, insert, Handle};
use crate::runtime::monarch_runtime;
use crate::status::{guard, monarch_status};
use crate::view::{derive_view, rename_args, shape_of, split_args};

/// An n-d array of procs (or a view of one).
///
/// Created by `monarch_proc_mesh_spawn`, `monarch_runtime_this_proc`,
/// `monarch_proc_mesh_from_ref`,
/// `monarch_host_mesh_spawn_procs` and the view functions
/// (`monarch_proc_mesh_slice_index`, ...), each a new handle; freed by
/// `monarch_proc_mesh_free`, which does not stop the procs. May be used
/// from any number of threads at once.
pub struct monarch_proc_mesh {
    _private: [u8; 0],
}

impl Handle for monarch_proc_mesh {
    type Rust = ProcMesh;
    const KIND: &'static str = "proc mesh";
}

/// Start a proc mesh of the given shape (`ndim` dimensions named
/// `labels[i]` of size `sizes[i]`): one OS process per point, each running
/// the bootstrap command `argv[0..argc]`. Each inherits this process's
/// environment plus `env[0..nenv]` ("NAME=value" strings; may be NULL when
/// `nenv` is 0) plus the bootstrap variables. Returns at once; the procs
/// report ready in the background and anything sent to them waits for
/// that. Procs die with this process.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_spawn(
    rt: *const monarch_runtime,
    labels: *const *const c_char,
    sizes: *const usize,
    ndim: usize,
    argv: *const *const c_char,
    argc: usize,
    env: *const *const c_char,
    nenv: usize,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let out = out_ptr(out, "out")?;
        let shape = dims(labels, sizes, ndim)?;
        let argv = string_array(argv, argc, "argv")?;
        let env = env_array(env, nenv, "env")?;
        let pm = ProcMesh::spawn(&r, shape, &argv, &env)?;
        *out = insert::<monarch_proc_mesh>(pm);
        Ok(())
    })
}

/// Write a proc mesh with no dimensions holding just this process's own
/// proc. Actors spawned on it run in this process; serve them with
/// `monarch_runtime_next_event`.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_this_proc(
    rt: *const monarch_runtime,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let out = out_ptr(out, "out")?;
        *out = insert::<monarch_proc_mesh>(ProcMesh::this_proc(&r));
        Ok(())
    })
}

/// Write the mesh's Shape (a `monarch.schema.Shape` flatbuffer) to
/// `*out`/`*out_len`; free it with `monarch_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_shape(
    pm: *const monarch_proc_mesh,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| shape_of(pm, out, out_len))
}

/// Write a new handle for the slice that fixes dimension `label` at
/// `index` (the dimension is removed). The slice shares the procs.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_slice_index(
    pm: *const monarch_proc_mesh,
    label: *const c_char,
    index: usize,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| derive_view(pm, out, |m| Ok(m.at(arg_str(label, "label")?, index)?)))
}

/// Write a new handle for the slice that keeps dimension `label` narrowed
/// to `start..stop` by `step` (> 0). Negative bounds count from the end;
/// bounds are clamped; `MONARCH_SLICE_END` as `stop` means the end.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_slice_range(
    pm: *const monarch_proc_mesh,
    label: *const c_char,
    start: i64,
    stop: i64,
    step: i64,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| {
        derive_view(pm, out, |m| {
            Ok(m.select(arg_str(label, "label")?, Some(start), Some(stop), step)?)
        })
    })
}

/// Write a new handle for the view with every dimension merged into one
/// dimension `label`, in row-major order (rank r stays rank r). Possible
/// for any view whose points are evenly spaced among the mesh's procs
/// (a dense mesh, one index of it, a range of its outermost dimension, a
/// strided single dimension); otherwise MONARCH_ERR_INVALID_ARGUMENT.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_flatten(
    pm: *const monarch_proc_mesh,
    label: *const c_char,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| derive_view(pm, out, |m| Ok(m.flatten(arg_str(label, "label")?)?)))
}

/// Write a new handle for the view with dimension `from[i]` renamed to
/// `to[i]` for each i < n, all at once (so two dimensions can swap names).
/// Dimensions not named keep their names; the result must not have a name
/// twice.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_rename(
    pm: *const monarch_proc_mesh,
    from: *const *const c_char,
    to: *const *const c_char,
    n: usize,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| derive_view(pm, out, |m| Ok(m.rename(&rename_args(from, to, n)?)?)))
}

/// Write a new handle for the view with dimension `label` replaced, in
/// place, by `n` (>= 1) dimensions named `names[i]` of size `sizes[i]`,
/// outermost first. One size may be `MONARCH_SPLIT_INFER`: it is the
/// dimension's size divided by the others. The sizes must multiply to the
/// dimension's size; the new names must not clash with the other
/// dimensions (reusing `label` is fine). Ranks are unchanged.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_split(
    pm: *const monarch_proc_mesh,
    label: *const c_char,
    names: *const *const c_char,
    sizes: *const usize,
    n: usize,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| {
        derive_view(pm, out, |m| {
            Ok(m.split(arg_str(label, "label")?, &split_args(names, sizes, n)?)?)
        })
    })
}

/// Stop the procs of this mesh (or slice): each is asked to stop and is
/// killed if it has not exited after a grace period. Writes a future that
/// completes when all have exited.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_stop(
    pm: *const monarch_proc_mesh,
    out: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| {
        let m = get(pm)?;
        let out = out_ptr(out, "out")?;
        *out = insert::<monarch_future>(m.stop());
        Ok(())
    })
}

/// Serialize a reference to this mesh (view) that can be sent to any proc
/// of the job and turned back into a proc mesh there with
/// `monarch_proc_mesh_from_ref` (an `ActorMeshRef` flatbuffer with the
/// empty actor key). Free with `monarch_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_to_ref(
    pm: *const monarch_proc_mesh,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let m = get(pm)?;
        owned_buffer(m.to_ref(), out, out_len)
    })
}

/// Rebuild a proc mesh from the bytes of `monarch_proc_mesh_to_ref`
/// (borrowed for the call). Actors may be spawned on it; stopping it fails
/// with MONARCH_ERR_INVALID_ARGUMENT (only the process that spawned the
/// procs stops them). Malformed bytes, or an actor mesh's reference, give
/// MONARCH_ERR_INVALID_ARGUMENT.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_from_ref(
    rt: *const monarch_runtime,
    ptr: *const u8,
    len: usize,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let out = out_ptr(out, "out")?;
        let bytes = arg_slice(ptr, len, "ptr")?;
        *out = insert::<monarch_proc_mesh>(ProcMesh::from_ref(&r, bytes)?);
        Ok(())
    })
}

/// Free a proc mesh handle. Does not stop the procs. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_free(pm: *mut monarch_proc_mesh) -> monarch_status {
    guard(|| handles::free(pm))
}
