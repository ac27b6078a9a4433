//! `monarch_host_mesh`: host agents on other machines (`monarch host`),
//! attached, sliced, and asked to start procs.

use std::ffi::c_char;

use monarch_core::{HostMesh, MeshView};

use crate::args::{arg_str, dims, env_array, out_ptr, string_array};
use crate::handles::{self, get, insert, Handle};
use crate::proc_mesh::monarch_proc_mesh;
use crate::runtime::monarch_runtime;
use crate::status::{guard, monarch_status};
use crate::view::{derive_view, shape_of};

/// An n-d array of hosts, each running a host agent (dimension `hosts`).
///
/// Created by `monarch_host_mesh_attach`, `monarch_slurm_job_host_mesh`
/// and the view functions (`monarch_host_mesh_slice_index`, ...), each a
/// new handle; freed by `monarch_host_mesh_free`, which leaves the agents
/// and their procs running. May be used from any number of threads at
/// once.
pub struct monarch_host_mesh {
    _private: [u8; 0],
}

impl Handle for monarch_host_mesh {
    type Rust = HostMesh;
    const KIND: &'static str = "host mesh";
}

/// Attach the running host agents at `addrs[0..n]` ("IP:PORT" as printed
/// by `monarch host` after MONARCH_HOST_READY, or "tcp:IP:PORT"): connect
/// to each, authenticate both ways with the job secret (this process's
/// MONARCH_JOB_TOKEN, which must be set before the runtime was created and
/// equal the agents' secret), and check it answers. Writes a host mesh of
/// one dimension `hosts` (size n) to `*out`. Blocks until every agent has
/// answered (or MONARCH_AGENT_TIMEOUT_S, default 60 s, passed).
#[no_mangle]
pub unsafe extern "C" fn monarch_host_mesh_attach(
    rt: *const monarch_runtime,
    addrs: *const *const c_char,
    n: usize,
    out: *mut *mut monarch_host_mesh,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let out = out_ptr(out, "out")?;
        let addrs = string_array(addrs, n, "addrs")?;
        *out = insert::<monarch_host_mesh>(HostMesh::attach(&r, &addrs)?);
        Ok(())
    })
}

/// Start procs on every host of the mesh (or slice): per host, a block of
/// `ndim` dimensions named `labels[i]` of size `sizes[i]`, each proc
/// running `argv[0..argc]` with `env[0..nenv]` ("NAME=value"; may be NULL
/// when `nenv` is 0) added to the agent's environment plus the bootstrap
/// variables. Writes a proc mesh whose dimensions are the host mesh's
/// followed by `labels` (e.g. {hosts: 3, gpus: 2}). Returns once every
/// agent has started its procs; messages to a proc wait until it is ready.
/// The argv must be valid on the agents' hosts.
#[no_mangle]
pub unsafe extern "C" fn monarch_host_mesh_spawn_procs(
    hm: *const monarch_host_mesh,
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
        let m = get(hm)?;
        let out = out_ptr(out, "out")?;
        let per_host = dims(labels, sizes, ndim)?;
        let argv = string_array(argv, argc, "argv")?;
        let env = env_array(env, nenv, "env")?;
        let pm = m.spawn_procs(per_host.labels(), per_host.sizes(), &argv, &env)?;
        *out = insert::<monarch_proc_mesh>(pm);
        Ok(())
    })
}

/// Write the host mesh's Shape (a `monarch.schema.Shape` flatbuffer) to
/// `*out`/`*out_len`; free it with `monarch_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn monarch_host_mesh_shape(
    hm: *const monarch_host_mesh,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| shape_of(hm, out, out_len))
}

/// Write a new handle for the slice that fixes dimension `label` at
/// `index` (the dimension is removed). The slice shares the agents.
#[no_mangle]
pub unsafe extern "C" fn monarch_host_mesh_slice_index(
    hm: *const monarch_host_mesh,
    label: *const c_char,
    index: usize,
    out: *mut *mut monarch_host_mesh,
) -> monarch_status {
    guard(|| derive_view(hm, out, |m| Ok(m.at(arg_str(label, "label")?, index)?)))
}

/// Write a new handle for the slice that keeps dimension `label` narrowed
/// to `start..stop` by `step` (> 0), as `monarch_proc_mesh_slice_range`.
#[no_mangle]
pub unsafe extern "C" fn monarch_host_mesh_slice_range(
    hm: *const monarch_host_mesh,
    label: *const c_char,
    start: i64,
    stop: i64,
    step: i64,
    out: *mut *mut monarch_host_mesh,
) -> monarch_status {
    guard(|| {
        derive_view(hm, out, |m| {
            Ok(m.select(arg_str(label, "label")?, Some(start), Some(stop), step)?)
        })
    })
}

/// Free a host mesh handle. The agents and procs started through it keep
/// running (stop procs with `monarch_proc_mesh_stop`). NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn monarch_host_mesh_free(hm: *mut monarch_host_mesh) -> monarch_status {
    guard(|| handles::free(hm))
}
