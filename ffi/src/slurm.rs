//! `monarch_slurm_job`: the SLURM allocator. `srun` starts one host agent
//! per node and the agents become a host mesh (core/src/allocator/slurm.rs,
//! docs/slurm.md).

use std::ffi::c_char;
use std::time::Duration;

use monarch_core::allocator::slurm::{SlurmJob, SlurmOptions};

use crate::args::{out_ptr, string_array};
use crate::bytes::owned_buffer;
use crate::handles::{self, get, insert, Handle};
use crate::host_mesh::monarch_host_mesh;
use crate::runtime::monarch_runtime;
use crate::status::{guard, monarch_status, Fail};

/// A running SLURM job step with one host agent per node, attached as a
/// host mesh.
///
/// Created by `monarch_slurm_job_start`; freed by `monarch_slurm_job_free`,
/// which stops the job. May be used from any number of threads at once.
pub struct monarch_slurm_job {
    _private: [u8; 0],
}

impl Handle for monarch_slurm_job {
    type Rust = SlurmJob;
    const KIND: &'static str = "slurm job";
}

/// Start one host agent per node with srun and attach them as a host mesh
/// (dimension `hosts`, in srun's task order: task i on the i-th node).
///
/// Inside a SLURM allocation (SLURM_JOB_ID set) the agents run as a job
/// step in it, and `nodes` 0 means all its nodes; outside one, srun asks
/// for a new allocation of `nodes` nodes (> 0). `agent_argv[0..agent_argc]`
/// is the agent command, valid on every node, e.g. {"/path/to/monarch",
/// "host", "--listen", "0.0.0.0:0"}; it gets this runtime's job secret in
/// its environment (MONARCH_JOB_TOKEN), never on a command line.
/// `srun_args[0..nsrun_args]` (may be NULL when 0) are more srun options,
/// e.g. "--partition=gpu", "--time=10", "--gpus-per-node=8". `timeout_ms`
/// bounds the wait for every agent to be ready, queueing included (< 0: the
/// default, 300 s). srun is `$MONARCH_SRUN` or `srun` on PATH.
///
/// Blocks until every agent is ready and attached. On failure (no srun:
/// MONARCH_ERR_IO; allocation refused or an agent that died first:
/// MONARCH_ERR_PROC_FAILED; out of time: MONARCH_ERR_TIMEOUT) the last
/// error has srun's and the agents' last output, and nothing is left
/// running. On success writes a job handle to `*out`; the caller owns it
/// and frees it with `monarch_slurm_job_free`, which also stops the agents.
#[no_mangle]
pub unsafe extern "C" fn monarch_slurm_job_start(
    rt: *const monarch_runtime,
    nodes: usize,
    agent_argv: *const *const c_char,
    agent_argc: usize,
    srun_args: *const *const c_char,
    nsrun_args: usize,
    timeout_ms: i64,
    out: *mut *mut monarch_slurm_job,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let out = out_ptr(out, "out")?;
        let argv = string_array(agent_argv, agent_argc, "agent_argv")?;
        if argv.is_empty() {
            return Err(Fail::invalid("agent_argv is empty"));
        }
        let mut opts = SlurmOptions::new(nodes, argv);
        opts.srun_args = string_array(srun_args, nsrun_args, "srun_args")?;
        // Any negative value means the default here (documented above).
        if timeout_ms >= 0 {
            opts.timeout = Duration::from_millis(timeout_ms as u64);
        }
        let job = SlurmJob::start(&r, &opts)?;
        *out = insert::<monarch_slurm_job>(job);
        Ok(())
    })
}

/// Write a new handle for the job's host mesh to `*out` (free it with
/// `monarch_host_mesh_free`). The mesh works while the job runs; after
/// `monarch_slurm_job_stop` or `_free` its agents are gone.
#[no_mangle]
pub unsafe extern "C" fn monarch_slurm_job_host_mesh(
    job: *const monarch_slurm_job,
    out: *mut *mut monarch_host_mesh,
) -> monarch_status {
    guard(|| {
        let j = get(job)?;
        let out = out_ptr(out, "out")?;
        *out = insert::<monarch_host_mesh>(j.host_mesh().clone());
        Ok(())
    })
}

/// Write the SLURM job id (e.g. "1234"), as a NUL-free string, to
/// `*out`/`*out_len` (empty if srun did not report it); free it with
/// `monarch_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn monarch_slurm_job_id(
    job: *const monarch_slurm_job,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let j = get(job)?;
        let id = j.agents().job_id().unwrap_or_default();
        owned_buffer(id.into_bytes(), out, out_len)
    })
}

/// Stop the job's agents and every proc they started, and end the srun
/// step (and the allocation, if srun made it). Blocks until srun has
/// exited (SIGTERM, then SIGKILL after 15 s). Idempotent. The handle stays
/// valid and must still be freed.
#[no_mangle]
pub unsafe extern "C" fn monarch_slurm_job_stop(job: *const monarch_slurm_job) -> monarch_status {
    guard(|| {
        let j = get(job)?;
        j.stop();
        Ok(())
    })
}

/// Free a job handle, stopping the job as `monarch_slurm_job_stop` does.
/// Host mesh handles taken from it stay valid to free. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn monarch_slurm_job_free(job: *mut monarch_slurm_job) -> monarch_status {
    guard(|| {
        if let Some(j) = handles::remove(job)? {
            j.stop();
        }
        Ok(())
    })
}
