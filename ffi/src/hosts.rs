//! C ABI of host meshes: agents on other machines (`monarch host`).

use std::ffi::c_char;

use monarch_core::{HostMesh, MeshView};

use crate::handles::{insert, remove, Object};
use crate::status::*;
use crate::{derive_view, monarch_proc_mesh, monarch_runtime, shape_from_args, MeshHandle};

/// An n-d array of hosts, each running a host agent (dimension `hosts`).
pub struct monarch_host_mesh {
    _private: [u8; 0],
}

impl MeshHandle for HostMesh {
    const KIND: &'static str = "host mesh";
    fn from_object(o: Object) -> Result<Self, Object> {
        match o {
            Object::HostMesh(m) => Ok(m),
            o => Err(o),
        }
    }
    fn into_object(self) -> Object {
        Object::HostMesh(self)
    }
}

fn strings(p: *const *const c_char, n: usize, what: &str) -> Result<Vec<String>, Fail> {
    arg_slice(p, n, what)?
        .iter()
        .enumerate()
        .map(|(i, a)| arg_str(*a, &format!("{what}[{i}]")).map(str::to_string))
        .collect()
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
    rt: *mut monarch_runtime,
    addrs: *const *const c_char,
    n: usize,
    out: *mut *mut monarch_host_mesh,
) -> monarch_status {
    guard(|| {
        let r = crate::typed!(rt, Runtime, "runtime");
        let out = out_ptr(out, "out")?;
        let addrs = strings(addrs, n, "addrs")?;
        let hm = HostMesh::attach(&r, &addrs)?;
        *out = insert(Object::HostMesh(hm)) as *mut monarch_host_mesh;
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
    hm: *mut monarch_host_mesh,
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
        let m = crate::typed!(hm, HostMesh, "host mesh");
        let out = out_ptr(out, "out")?;
        let per_host = shape_from_args(labels, sizes, ndim)?;
        let argv = strings(argv, argc, "argv")?;
        let env = strings(env, nenv, "env")?
            .into_iter()
            .enumerate()
            .map(|(i, e)| match e.split_once('=') {
                Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
                _ => Err(Fail::invalid(format!("env[{i}] {e:?} is not NAME=value"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pm = m.spawn_procs(per_host.labels(), per_host.sizes(), &argv, &env)?;
        *out = insert(Object::ProcMesh(pm)) as *mut monarch_proc_mesh;
        Ok(())
    })
}

/// Write the host mesh's Shape (a `monarch.schema.Shape` flatbuffer) to
/// `*out`/`*out_len`; free it with `monarch_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn monarch_host_mesh_shape(
    hm: *mut monarch_host_mesh,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let m = crate::typed!(hm, HostMesh, "host mesh");
        crate::owned_buffer(monarch_core::wire::encode_shape(m.shape()), out, out_len)
    })
}

/// Write a new handle for the slice that fixes dimension `label` at
/// `index` (the dimension is removed). The slice shares the agents.
#[no_mangle]
pub unsafe extern "C" fn monarch_host_mesh_slice_index(
    hm: *mut monarch_host_mesh,
    label: *const c_char,
    index: usize,
    out: *mut *mut monarch_host_mesh,
) -> monarch_status {
    guard(|| derive_view::<HostMesh, _>(hm, out, |m| Ok(m.at(arg_str(label, "label")?, index)?)))
}

/// Write a new handle for the slice that keeps dimension `label` narrowed
/// to `start..stop` by `step` (> 0), as `monarch_proc_mesh_slice_range`.
#[no_mangle]
pub unsafe extern "C" fn monarch_host_mesh_slice_range(
    hm: *mut monarch_host_mesh,
    label: *const c_char,
    start: i64,
    stop: i64,
    step: i64,
    out: *mut *mut monarch_host_mesh,
) -> monarch_status {
    guard(|| {
        derive_view::<HostMesh, _>(hm, out, |m| {
            Ok(m.select(arg_str(label, "label")?, Some(start), Some(stop), step)?)
        })
    })
}

/// Free a host mesh handle. The agents and procs started through it keep
/// running (stop procs with `monarch_proc_mesh_stop`).
#[no_mangle]
pub unsafe extern "C" fn monarch_host_mesh_free(hm: *mut monarch_host_mesh) -> monarch_status {
    guard(|| remove(hm as usize, "host mesh").map(drop))
}

/// Streaming of remote procs' stdout/stderr to this process: print each
/// line with a `[rank N]` prefix when `stream_to_client` is true (the
/// default), dropping them otherwise; with `aggregate_window_ms` > 0,
/// identical lines arriving within that window are printed once as
/// `[K similar lines] text`. Applies to the whole process.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_logging_option(
    rt: *mut monarch_runtime,
    stream_to_client: bool,
    aggregate_window_ms: u64,
) -> monarch_status {
    guard(|| {
        let _ = crate::typed!(rt, Runtime, "runtime");
        monarch_core::logs::set_options(
            stream_to_client,
            Some(std::time::Duration::from_millis(aggregate_window_ms)),
        );
        Ok(())
    })
}

/// Write a copy of the job secret this runtime authenticates peers with
/// (MONARCH_JOB_TOKEN when it was set at creation, else a fresh random
/// one) to `*out`/`*out_len`; free it with `monarch_buffer_free`. An
/// allocator starting host agents passes it to them (environment or a
/// file only the user can read), never on a command line.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_job_token(
    rt: *mut monarch_runtime,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let r = crate::typed!(rt, Runtime, "runtime");
        crate::owned_buffer(r.job_token().as_bytes().to_vec(), out, out_len)
    })
}
