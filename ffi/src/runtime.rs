//! `monarch_runtime`: this process's runtime, and what is asked of it as a
//! whole (its notification fd, logging, the job secret, top-level
//! supervision events). Functions that create other objects from a runtime
//! live with the type they create.

use std::ffi::{c_char, c_int};
use std::time::Duration;

use monarch_core::Runtime;
use parking_lot::{const_mutex, Mutex};

use crate::args::{arg_str, out_ptr, timeout};
use crate::bytes::owned_buffer;
use crate::handles::{self, get, insert, Handle};
use crate::status::{guard, monarch_status, Fail};

/// The runtime of this process: its connections to the other procs of the
/// job, its ports and its event queue.
///
/// Created by `monarch_runtime_new`, at most one per process at a time;
/// freed by `monarch_runtime_free`, which shuts it down. May be used from
/// any number of threads at once; free it once no other thread uses it.
pub struct monarch_runtime {
    _private: [u8; 0],
}

impl Handle for monarch_runtime {
    type Rust = Runtime;
    const KIND: &'static str = "runtime";
}

/// Whether a runtime exists in this process.
static RUNTIME_LIVE: Mutex<bool> = const_mutex(false);

/// Create this process's runtime and write it to `*out`.
///
/// In a process started by a controller as a proc (its bootstrap
/// environment is set), the runtime connects back to the controller and
/// reports ready; its actors' work then arrives through
/// `monarch_runtime_next_event`. Otherwise the process is a controller.
/// Only one runtime may exist at a time; free it with `monarch_runtime_free`.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_new(out: *mut *mut monarch_runtime) -> monarch_status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        monarch_core::trace::install_subscriber();
        let mut live = RUNTIME_LIVE.lock();
        if *live {
            return Err(Fail::invalid("a runtime already exists in this process"));
        }
        let rt = Runtime::new()?;
        *live = true;
        *out = insert::<monarch_runtime>(rt);
        Ok(())
    })
}

/// Shut the runtime down and free its handle: stops every proc it started
/// (asking first, killing after a grace period), closes its connections and
/// fails whatever is still pending with `MONARCH_ERR_STOPPED`. Handles of
/// its meshes and futures stay valid to free but fail to use. NULL is a
/// no-op.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_free(rt: *mut monarch_runtime) -> monarch_status {
    guard(|| {
        if let Some(r) = handles::remove(rt)? {
            r.shutdown();
            *RUNTIME_LIVE.lock() = false;
        }
        Ok(())
    })
}

/// Write whether this process is a proc started by a controller.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_is_worker(
    rt: *const monarch_runtime,
    out: *mut bool,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        *out_ptr(out, "out")? = r.is_worker();
        Ok(())
    })
}

/// Write a file descriptor that becomes readable whenever a future of this
/// runtime completes or an event arrives, for use with poll/epoll/asyncio.
/// After it wakes you, call `monarch_runtime_clear_fd`, then poll your
/// futures and events. Owned by the runtime; do not close it. Asking for it
/// also has the runtime's I/O thread read the sockets for its watcher,
/// until a thread next waits inside the runtime (`monarch_future_wait`,
/// `monarch_runtime_next_event`, ...), which reads them itself: ask again
/// before going back to sleep on the descriptor after such a wait, or a
/// completion may be seen up to 10 ms late.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_fd(
    rt: *const monarch_runtime,
    out_fd: *mut c_int,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        *out_ptr(out_fd, "out_fd")? = r.notify_fd();
        Ok(())
    })
}

/// Make the runtime's file descriptor not readable until the next completion.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_clear_fd(rt: *const monarch_runtime) -> monarch_status {
    guard(|| {
        get(rt)?.clear_notify_fd();
        Ok(())
    })
}

/// Wait up to `timeout_ms` (-1: forever, 0: just check; any other negative value is
/// refused with `MONARCH_ERR_INVALID_ARGUMENT`) for the next
/// supervision event addressed to this process's top level (failures of
/// meshes spawned outside any actor's event, e.g. by a controller's main
/// program) and write it to `*out`/`*out_len` as a
/// `monarch.schema.SupervisionEvent` flatbuffer (owned by the caller; free
/// it with `monarch_buffer_free`). Returns `MONARCH_ERR_TIMEOUT` if none
/// arrived, `MONARCH_ERR_STOPPED` once the runtime was shut down. The
/// runtime's file descriptor (`monarch_runtime_fd`) also becomes readable
/// when an event is queued. Safe to call from a thread of its own.
#[no_mangle]
pub unsafe extern "C" fn monarch_supervision_next(
    rt: *const monarch_runtime,
    timeout_ms: i64,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        out_ptr(out, "out")?;
        out_ptr(out_len, "out_len")?;
        let ev = r.next_supervision_event(timeout(timeout_ms)?)?;
        owned_buffer(ev.encode(), out, out_len)
    })
}

/// Make actor `actor` (its key, as in `monarch_event_info`; NULL or "" =
/// this process's top level) the owner of the meshes the calling thread
/// spawns from now on: their failures go to that actor as
/// `MONARCH_EVENT_SUPERVISE` events. libmonarch sets this itself whenever
/// `monarch_runtime_next_event` hands the thread an event (to its actor)
/// and clears it when the event is answered; call it only when an actor's
/// code runs on another thread (e.g. an async event loop), right before
/// spawning. The string is copied.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_set_owner(
    rt: *const monarch_runtime,
    actor: *const c_char,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let actor = if actor.is_null() {
            ""
        } else {
            arg_str(actor, "actor")?
        };
        r.set_spawn_owner(actor);
        Ok(())
    })
}

/// Streaming of remote procs' stdout/stderr to this process: print each
/// line with a `[rank N]` prefix when `stream_to_client` is true (the
/// default), dropping them otherwise; with `aggregate_window_ms` > 0,
/// lines arriving within that window that differ only in numbers or ids
/// are printed once, as the first of them with their count and ranks:
/// `[8 similar lines, ranks 0-7] step 12 loss 0.53`. Applies to the whole
/// process.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_logging_option(
    rt: *const monarch_runtime,
    stream_to_client: bool,
    aggregate_window_ms: u64,
) -> monarch_status {
    guard(|| {
        get(rt)?;
        monarch_core::logs::set_options(
            stream_to_client,
            Some(Duration::from_millis(aggregate_window_ms)),
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
    rt: *const monarch_runtime,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        owned_buffer(r.job_token().as_bytes().to_vec(), out, out_len)
    })
}

/// Start, ahead of the first spawn, the zygote that procs spawned with the
/// bootstrap command `argv[0..argc]` and the environment `env[0..nenv]`
/// ("NAME=value"; NULL when `nenv` is 0) will be forked from, as
/// `monarch_proc_mesh_spawn` does when `env` holds `MONARCH_ZYGOTE=1`
/// (docs/architecture.md, "Procs forked from a zygote"). Returns at once;
/// does nothing when `env` does not ask for a zygote, when one is running
/// for them, or when `MONARCH_USE_ZYGOTE=0`. A command that cannot serve as
/// one costs nothing but its start: spawns then start procs with exec.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_warm_zygote(
    rt: *const monarch_runtime,
    argv: *const *const c_char,
    argc: usize,
    env: *const *const c_char,
    nenv: usize,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let argv = crate::args::string_array(argv, argc, "argv")?;
        let env = crate::args::env_array(env, nenv, "env")?;
        r.warm_zygote(&argv, &env)?;
        Ok(())
    })
}

/// Serve as a zygote: fork one proc per request of the controller on `fd`
/// (the descriptor in `MONARCH_ZYGOTE_FD`), see docs/architecture.md,
/// "Procs forked from a zygote". Call it while the process has a single
/// thread and no runtime. Returns in each forked child with `*out_is_proc`
/// set to 1: that process is now a proc (environment, working directory,
/// output and descriptors set as the controller asked) and goes on to
/// create its runtime. Returns in the zygote with `*out_is_proc` set to 0
/// once the controller has closed the socket: the zygote should exit.
/// `MONARCH_ERR_INVALID_ARGUMENT` when `fd` is not open or a runtime
/// exists.
#[no_mangle]
pub unsafe extern "C" fn monarch_zygote_serve(
    fd: c_int,
    out_is_proc: *mut c_int,
) -> monarch_status {
    guard(|| {
        let out = out_ptr(out_is_proc, "out_is_proc")?;
        if *RUNTIME_LIVE.lock() {
            return Err(
                monarch_core::error::Error::invalid("a zygote must not have a runtime").into(),
            );
        }
        let served = monarch_core::zygote::serve(fd)?;
        *out = c_int::from(served == monarch_core::zygote::Served::Proc);
        Ok(())
    })
}
