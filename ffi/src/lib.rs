//! libmonarch's C ABI. Every `extern "C"` function of the project lives in
//! this crate; `include/monarch.h` is generated from it by cbindgen.
//!
//! Rules every function follows: it returns a `monarch_status` and writes
//! results through out-pointers; it checks every handle and pointer; it
//! never lets a panic cross the boundary; it never calls back into foreign
//! code (completions and incoming messages are pulled).
#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)]

mod handles;
mod hosts;
pub mod rdma;
mod slurm;
mod status;

use monarch_core::sync::LockExt;
use std::ffi::{c_char, c_int};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use handles::{insert, remove, HeldEvent, HeldValueMesh, Object};
pub use hosts::*;
use monarch_core::{
    ActorMesh, CallMode, Error, MeshView, PointValue, PortRef, ProcMesh, Runtime, Shape,
};
pub use slurm::*;
pub use status::*;

/// The ABI version this library implements. Bumped on any incompatible
/// change; a binding should refuse a library whose version it doesn't know.
pub const MONARCH_ABI_VERSION: u32 = 1;

/// Call mode: every actor of the mesh answers (gather a ValueMesh).
pub const MONARCH_CALL_ALL: u32 = 0;
/// Call mode: like ALL, but the mesh must contain exactly one actor.
pub const MONARCH_CALL_ONE: u32 = 1;
/// Call mode: one actor, chosen by the runtime, answers.
pub const MONARCH_CALL_CHOOSE: u32 = 2;
/// Call mode: every actor gets the message, nobody answers (no future).
pub const MONARCH_CALL_BROADCAST: u32 = 3;

/// Event kind: construct an actor (`type_name`, argument parts).
pub const MONARCH_EVENT_SPAWN: u32 = 1;
/// Event kind: run endpoint `method` of an actor on the parts.
pub const MONARCH_EVENT_MESSAGE: u32 = 2;
/// Event kind: stop an actor (run its cleanup, then reply).
pub const MONARCH_EVENT_STOP_ACTOR: u32 = 3;
/// Event kind: the proc is stopping; leave the event loop and free the runtime.
pub const MONARCH_EVENT_STOP_PROC: u32 = 4;
/// Event kind: a mesh owned by the event's actor failed. Part 0 is a
/// `monarch.schema.SupervisionEvent` flatbuffer. Answer with
/// `monarch_event_reply` if the actor handled it; answer with
/// `monarch_event_reply_error` (or free it unanswered) to escalate: the
/// actor then fails and its own owner gets an event caused by this one.
pub const MONARCH_EVENT_SUPERVISE: u32 = 5;

/// A stop bound for `*_slice_range` meaning "to the end of the dimension".
pub const MONARCH_SLICE_END: i64 = 9_223_372_036_854_775_807;

/// A size for `*_split` meaning "infer this size from the others" (at most
/// one per split).
pub const MONARCH_SPLIT_INFER: usize = 0;

/// The runtime of this process (one per process).
pub struct monarch_runtime {
    _private: [u8; 0],
}
/// An n-d array of procs (or a slice of one).
pub struct monarch_proc_mesh {
    _private: [u8; 0],
}
/// An n-d array of actors (or a slice of one).
pub struct monarch_actor_mesh {
    _private: [u8; 0],
}
/// A pending result; complete it by waiting, polling or watching the fd.
pub struct monarch_future {
    _private: [u8; 0],
}
/// The gathered replies of a call: one value or error per point.
pub struct monarch_value_mesh {
    _private: [u8; 0],
}
/// One unit of work for the actors hosted in this process.
pub struct monarch_event {
    _private: [u8; 0],
}
/// The receiving end of a port of this process (a channel, or the replies
/// of `monarch_actor_mesh_stream`).
pub struct monarch_port_receiver {
    _private: [u8; 0],
}

/// A borrowed byte range.
#[repr(C)]
pub struct monarch_bytes {
    pub ptr: *const u8,
    pub len: usize,
}

fn parts<'a>(p: *const monarch_bytes, n: usize) -> Result<Vec<&'a [u8]>, Fail> {
    arg_slice(p, n, "parts")?
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if b.len == 0 {
                Ok(&[][..])
            } else if b.ptr.is_null() {
                Err(Fail::invalid(format!(
                    "part {i} is NULL but its length is {}",
                    b.len
                )))
            } else {
                // SAFETY: the caller promises `len` readable bytes for the call.
                Ok(unsafe { std::slice::from_raw_parts(b.ptr, b.len) })
            }
        })
        .collect()
}

pub(crate) fn owned_buffer(
    mut v: Vec<u8>,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> Result<(), Fail> {
    let out = out_ptr(out, "out")?;
    let out_len = out_ptr(out_len, "out_len")?;
    v.shrink_to_fit();
    let mut b = v.into_boxed_slice();
    *out_len = b.len();
    *out = b.as_mut_ptr();
    std::mem::forget(b);
    Ok(())
}

fn timeout(ms: i64) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

// ---------------------------------------------------------------------------
// Library

/// Returns `MONARCH_ABI_VERSION` of the loaded library.
#[no_mangle]
pub extern "C" fn monarch_abi_version() -> u32 {
    MONARCH_ABI_VERSION
}

/// The calling thread's most recent error message, or "" if none.
/// Owned by the library; valid until the next libmonarch call on this thread.
#[no_mangle]
pub extern "C" fn monarch_last_error() -> *const c_char {
    last_error_ptr()
}

/// Free a buffer that libmonarch returned as owned (`out`/`out_len` pairs
/// documented as "free with monarch_buffer_free"). NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn monarch_buffer_free(ptr: *mut u8, len: usize) {
    if ptr.is_null() {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: (ptr, len) came from `owned_buffer`, which leaked a Box<[u8]>.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
    });
}

// ---------------------------------------------------------------------------
// Runtime

static RUNTIME_LIVE: Mutex<bool> = Mutex::new(false);

fn init_logging() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let filter = std::env::var("MONARCH_LOG").unwrap_or_else(|_| "warn".into());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    });
}

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
        init_logging();
        let mut live = RUNTIME_LIVE.locked();
        if *live {
            return Err(Fail::invalid("a runtime already exists in this process"));
        }
        let rt = Runtime::new()?;
        *live = true;
        *out = insert(Object::Runtime(rt)) as *mut monarch_runtime;
        Ok(())
    })
}

/// Shut the runtime down and free its handle: stops every proc it started
/// (asking first, killing after a grace period), closes its connections and
/// fails whatever is still pending with `MONARCH_ERR_STOPPED`. Handles of
/// its meshes and futures stay valid to free but fail to use.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_free(rt: *mut monarch_runtime) -> monarch_status {
    guard(|| {
        let Object::Runtime(r) = remove(rt as usize, "runtime")? else {
            unreachable!("remove checks the kind")
        };
        r.shutdown();
        *RUNTIME_LIVE.locked() = false;
        Ok(())
    })
}

/// Write whether this process is a proc started by a controller.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_is_worker(
    rt: *mut monarch_runtime,
    out: *mut bool,
) -> monarch_status {
    guard(|| {
        let r = typed!(rt, Runtime, "runtime");
        *out_ptr(out, "out")? = r.is_worker();
        Ok(())
    })
}

/// Write a file descriptor that becomes readable whenever a future of this
/// runtime completes or an event arrives, for use with poll/epoll/asyncio.
/// After it wakes you, call `monarch_runtime_clear_fd`, then poll your
/// futures and events. Owned by the runtime; do not close it.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_fd(
    rt: *mut monarch_runtime,
    out_fd: *mut c_int,
) -> monarch_status {
    guard(|| {
        let r = typed!(rt, Runtime, "runtime");
        *out_ptr(out_fd, "out_fd")? = r.notify_fd();
        Ok(())
    })
}

/// Make the runtime's file descriptor not readable until the next completion.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_clear_fd(rt: *mut monarch_runtime) -> monarch_status {
    guard(|| {
        typed!(rt, Runtime, "runtime").clear_notify_fd();
        Ok(())
    })
}

/// Write a proc mesh with no dimensions holding just this process's own
/// proc. Actors spawned on it run in this process; serve them with
/// `monarch_runtime_next_event`.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_this_proc(
    rt: *mut monarch_runtime,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| {
        let r = typed!(rt, Runtime, "runtime");
        let out = out_ptr(out, "out")?;
        *out = insert(Object::ProcMesh(ProcMesh::this_proc(&r))) as *mut monarch_proc_mesh;
        Ok(())
    })
}

/// Wait up to `timeout_ms` (-1: forever, 0: just check) for the next event
/// for the actors hosted in this process and write it to `*out`.
/// Returns `MONARCH_ERR_TIMEOUT` if none arrived, `MONARCH_ERR_STOPPED`
/// once the runtime was shut down. Answer the event if
/// `monarch_event_wants_reply` says so, then free it.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_next_event(
    rt: *mut monarch_runtime,
    timeout_ms: i64,
    out: *mut *mut monarch_event,
) -> monarch_status {
    guard(|| {
        let r = typed!(rt, Runtime, "runtime");
        let out = out_ptr(out, "out")?;
        let ev = r.next_event(timeout(timeout_ms))?;
        *out = insert(Object::Event(Arc::new(hold_event(ev)))) as *mut monarch_event;
        Ok(())
    })
}

/// An event plus the C strings of its names.
fn hold_event(ev: monarch_core::Event) -> HeldEvent {
    // Empty names (most events have no type name) need no allocation.
    let cstr = |s: &str| {
        (!s.is_empty()).then(|| {
            std::ffi::CString::new(s)
                .unwrap_or_else(|_| std::ffi::CString::new(s.replace('\0', "")).unwrap_or_default())
        })
    };
    HeldEvent {
        actor: cstr(&ev.actor),
        method: cstr(&ev.method),
        type_name: cstr(&ev.type_name),
        event: Mutex::new(ev),
    }
}

/// What `monarch_runtime_next_event_header` says about an event: what
/// `monarch_event_info`, `monarch_event_nparts`, `monarch_event_part` (part
/// 0) and `monarch_event_wants_reply` would, in one call. Strings and part 0
/// are borrowed from the event, valid until it is freed; unused names are
/// "".
#[repr(C)]
pub struct monarch_event_header {
    /// `MONARCH_EVENT_*`.
    pub kind: u32,
    /// Whether the sender waits for an answer (until the event is answered
    /// or its reply port taken).
    pub wants_reply: bool,
    /// Key of the actor the event concerns.
    pub actor: *const c_char,
    /// Endpoint name (messages).
    pub method: *const c_char,
    /// Actor type name (spawns).
    pub type_name: *const c_char,
    /// Number of payload parts.
    pub nparts: usize,
    /// Payload part 0 (NULL when there are no parts).
    pub part0: *const u8,
    /// Length of part 0 (0 when there are no parts).
    pub part0_len: usize,
}

/// `monarch_runtime_next_event`, and describe the event into `*out_header`
/// at once (one call per event instead of four). Same statuses; on
/// MONARCH_OK the event in `*out` is owned by the caller as with
/// `monarch_runtime_next_event` (answer it if it wants a reply, then free
/// it, or use `monarch_event_reply_one_and_free`).
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_next_event_header(
    rt: *mut monarch_runtime,
    timeout_ms: i64,
    out: *mut *mut monarch_event,
    out_header: *mut monarch_event_header,
) -> monarch_status {
    guard(|| {
        let r = typed!(rt, Runtime, "runtime");
        let out = out_ptr(out, "out")?;
        let header = out_ptr(out_header, "out_header")?;
        let held = Arc::new(hold_event(r.next_event(timeout(timeout_ms))?));
        {
            let ptr = |s: &Option<std::ffi::CString>| s.as_deref().unwrap_or(c"").as_ptr();
            let g = held.event.locked();
            let (part0, part0_len) = match g.parts.first() {
                Some(p) => (p.as_ptr(), p.len()),
                None => (std::ptr::null(), 0),
            };
            *header = monarch_event_header {
                kind: g.kind as u32,
                wants_reply: g.wants_reply(),
                actor: ptr(&held.actor),
                method: ptr(&held.method),
                type_name: ptr(&held.type_name),
                nparts: g.parts.len(),
                part0,
                part0_len,
            };
        }
        // The event's parts live on the heap: the pointers stay valid when
        // the handle takes the Arc over.
        *out = insert(Object::Event(held)) as *mut monarch_event;
        Ok(())
    })
}

/// Wait up to `timeout_ms` (-1: forever, 0: just check) for the next
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
    rt: *mut monarch_runtime,
    timeout_ms: i64,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let r = typed!(rt, Runtime, "runtime");
        out_ptr(out, "out")?;
        out_ptr(out_len, "out_len")?;
        let ev = r.next_supervision_event(timeout(timeout_ms))?;
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
    rt: *mut monarch_runtime,
    actor: *const c_char,
) -> monarch_status {
    guard(|| {
        let r = typed!(rt, Runtime, "runtime");
        let actor = if actor.is_null() {
            ""
        } else {
            arg_str(actor, "actor")?
        };
        r.set_spawn_owner(actor);
        Ok(())
    })
}

fn str_array<'a>(p: *const *const c_char, n: usize, what: &str) -> Result<Vec<&'a str>, Fail> {
    arg_slice(p, n, what)?
        .iter()
        .enumerate()
        .map(|(i, s)| arg_str(*s, &format!("{what}[{i}]")))
        .collect()
}

fn rename_args<'a>(
    from: *const *const c_char,
    to: *const *const c_char,
    n: usize,
) -> Result<Vec<(&'a str, &'a str)>, Fail> {
    let from = str_array(from, n, "from")?;
    let to = str_array(to, n, "to")?;
    Ok(from.into_iter().zip(to).collect())
}

fn split_args<'a>(
    names: *const *const c_char,
    sizes: *const usize,
    n: usize,
) -> Result<Vec<(&'a str, Option<usize>)>, Fail> {
    let names = str_array(names, n, "names")?;
    let sizes = arg_slice(sizes, n, "sizes")?;
    Ok(names
        .into_iter()
        .zip(sizes)
        .map(|(name, &size)| (name, (size != MONARCH_SPLIT_INFER).then_some(size)))
        .collect())
}

/// The two kinds of mesh handle, for the entry points they share.
trait MeshHandle: MeshView {
    const KIND: &'static str;
    fn from_object(o: Object) -> Result<Self, Object>;
    fn into_object(self) -> Object;
}

impl MeshHandle for ProcMesh {
    const KIND: &'static str = "proc mesh";
    fn from_object(o: Object) -> Result<Self, Object> {
        match o {
            Object::ProcMesh(m) => Ok(m),
            o => Err(o),
        }
    }
    fn into_object(self) -> Object {
        Object::ProcMesh(self)
    }
}

impl MeshHandle for ActorMesh {
    const KIND: &'static str = "actor mesh";
    fn from_object(o: Object) -> Result<Self, Object> {
        match o {
            Object::ActorMesh(m) => Ok(m),
            o => Err(o),
        }
    }
    fn into_object(self) -> Object {
        Object::ActorMesh(self)
    }
}

/// Look up mesh handle `h`, derive a new view with `op`, and write a new
/// handle for it to `*out`.
fn derive_view<M: MeshHandle, C: 'static>(
    h: *mut C,
    out: *mut *mut C,
    op: impl FnOnce(&M) -> Result<M, Fail>,
) -> Result<(), Fail> {
    let h = h as usize;
    let m = M::from_object(handles::get(h, M::KIND)?)
        .map_err(|o| handles::wrong_kind(h, M::KIND, o.kind()))?;
    let out = out_ptr(out, "out")?;
    *out = insert(op(&m)?.into_object()) as *mut C;
    Ok(())
}

// ---------------------------------------------------------------------------
// Proc meshes

fn shape_from_args(
    labels: *const *const c_char,
    sizes: *const usize,
    ndim: usize,
) -> Result<Shape, Fail> {
    let labels = arg_slice(labels, ndim, "labels")?;
    let sizes = arg_slice(sizes, ndim, "sizes")?;
    let labels = labels
        .iter()
        .enumerate()
        .map(|(i, l)| arg_str(*l, &format!("labels[{i}]")).map(str::to_string))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Shape::dense(labels, sizes.to_vec()).map_err(Error::from)?)
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
    rt: *mut monarch_runtime,
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
        let r = typed!(rt, Runtime, "runtime");
        let out = out_ptr(out, "out")?;
        let shape = shape_from_args(labels, sizes, ndim)?;
        let argv = arg_slice(argv, argc, "argv")?
            .iter()
            .enumerate()
            .map(|(i, a)| arg_str(*a, &format!("argv[{i}]")).map(str::to_string))
            .collect::<Result<Vec<_>, _>>()?;
        let env = arg_slice(env, nenv, "env")?
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let e = arg_str(*e, &format!("env[{i}]"))?;
                match e.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
                    _ => Err(Fail::invalid(format!("env[{i}] {e:?} is not NAME=value"))),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pm = ProcMesh::spawn(&r, shape, &argv, &env)?;
        *out = insert(Object::ProcMesh(pm)) as *mut monarch_proc_mesh;
        Ok(())
    })
}

/// Write the mesh's Shape (a `monarch.schema.Shape` flatbuffer) to
/// `*out`/`*out_len`; free it with `monarch_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_shape(
    pm: *mut monarch_proc_mesh,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let m = typed!(pm, ProcMesh, "proc mesh");
        owned_buffer(monarch_core::wire::encode_shape(m.shape()), out, out_len)
    })
}

/// Write a new handle for the slice that fixes dimension `label` at
/// `index` (the dimension is removed). The slice shares the procs.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_slice_index(
    pm: *mut monarch_proc_mesh,
    label: *const c_char,
    index: usize,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| derive_view::<ProcMesh, _>(pm, out, |m| Ok(m.at(arg_str(label, "label")?, index)?)))
}

/// Write a new handle for the slice that keeps dimension `label` narrowed
/// to `start..stop` by `step` (> 0). Negative bounds count from the end;
/// bounds are clamped; `MONARCH_SLICE_END` as `stop` means the end.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_slice_range(
    pm: *mut monarch_proc_mesh,
    label: *const c_char,
    start: i64,
    stop: i64,
    step: i64,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| {
        derive_view::<ProcMesh, _>(pm, out, |m| {
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
    pm: *mut monarch_proc_mesh,
    label: *const c_char,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| derive_view::<ProcMesh, _>(pm, out, |m| Ok(m.flatten(arg_str(label, "label")?)?)))
}

/// Write a new handle for the view with dimension `from[i]` renamed to
/// `to[i]` for each i < n, all at once (so two dimensions can swap names).
/// Dimensions not named keep their names; the result must not have a name
/// twice.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_rename(
    pm: *mut monarch_proc_mesh,
    from: *const *const c_char,
    to: *const *const c_char,
    n: usize,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| derive_view::<ProcMesh, _>(pm, out, |m| Ok(m.rename(&rename_args(from, to, n)?)?)))
}

/// Write a new handle for the view with dimension `label` replaced, in
/// place, by `n` (>= 1) dimensions named `names[i]` of size `sizes[i]`,
/// outermost first. One size may be `MONARCH_SPLIT_INFER`: it is the
/// dimension's size divided by the others. The sizes must multiply to the
/// dimension's size; the new names must not clash with the other
/// dimensions (reusing `label` is fine). Ranks are unchanged.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_split(
    pm: *mut monarch_proc_mesh,
    label: *const c_char,
    names: *const *const c_char,
    sizes: *const usize,
    n: usize,
    out: *mut *mut monarch_proc_mesh,
) -> monarch_status {
    guard(|| {
        derive_view::<ProcMesh, _>(pm, out, |m| {
            Ok(m.split(arg_str(label, "label")?, &split_args(names, sizes, n)?)?)
        })
    })
}

/// Stop the procs of this mesh (or slice): each is asked to stop and is
/// killed if it has not exited after a grace period. Writes a future that
/// completes when all have exited.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_stop(
    pm: *mut monarch_proc_mesh,
    out: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| {
        let m = typed!(pm, ProcMesh, "proc mesh");
        let out = out_ptr(out, "out")?;
        *out = insert(Object::Future(m.stop())) as *mut monarch_future;
        Ok(())
    })
}

/// Free a proc mesh handle. Does not stop the procs.
#[no_mangle]
pub unsafe extern "C" fn monarch_proc_mesh_free(pm: *mut monarch_proc_mesh) -> monarch_status {
    guard(|| remove(pm as usize, "proc mesh").map(drop))
}

// ---------------------------------------------------------------------------
// Actor meshes

/// Spawn one actor named `name` of type `type_name` on every proc of the
/// mesh, passing the argument parts to each constructor (the bytes are
/// copied before return). Writes the actor mesh to `*out_mesh` at once, and
/// to `*out_ready` a future whose ValueMesh holds each constructor's
/// outcome (an error point if it raised). Messages sent meanwhile are
/// delivered after construction.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_spawn(
    pm: *mut monarch_proc_mesh,
    name: *const c_char,
    type_name: *const c_char,
    args: *const monarch_bytes,
    nargs: usize,
    out_mesh: *mut *mut monarch_actor_mesh,
    out_ready: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| {
        let m = typed!(pm, ProcMesh, "proc mesh");
        let out_mesh = out_ptr(out_mesh, "out_mesh")?;
        let out_ready = out_ptr(out_ready, "out_ready")?;
        let name = arg_str(name, "name")?;
        let type_name = arg_str(type_name, "type_name")?;
        let args = parts(args, nargs)?;
        let (am, ready) = m.spawn_actors(name, type_name, &args)?;
        *out_mesh = insert(Object::ActorMesh(am)) as *mut monarch_actor_mesh;
        *out_ready = insert(Object::Future(ready)) as *mut monarch_future;
        Ok(())
    })
}

/// Write the mesh's Shape flatbuffer; free it with `monarch_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_shape(
    am: *mut monarch_actor_mesh,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let m = typed!(am, ActorMesh, "actor mesh");
        owned_buffer(monarch_core::wire::encode_shape(m.shape()), out, out_len)
    })
}

/// Like `monarch_proc_mesh_slice_index`, for actor meshes.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_slice_index(
    am: *mut monarch_actor_mesh,
    label: *const c_char,
    index: usize,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| derive_view::<ActorMesh, _>(am, out, |m| Ok(m.at(arg_str(label, "label")?, index)?)))
}

/// Like `monarch_proc_mesh_slice_range`, for actor meshes.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_slice_range(
    am: *mut monarch_actor_mesh,
    label: *const c_char,
    start: i64,
    stop: i64,
    step: i64,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| {
        derive_view::<ActorMesh, _>(am, out, |m| {
            Ok(m.select(arg_str(label, "label")?, Some(start), Some(stop), step)?)
        })
    })
}

/// Like `monarch_proc_mesh_flatten`, for actor meshes.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_flatten(
    am: *mut monarch_actor_mesh,
    label: *const c_char,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| derive_view::<ActorMesh, _>(am, out, |m| Ok(m.flatten(arg_str(label, "label")?)?)))
}

/// Like `monarch_proc_mesh_rename`, for actor meshes.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_rename(
    am: *mut monarch_actor_mesh,
    from: *const *const c_char,
    to: *const *const c_char,
    n: usize,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| derive_view::<ActorMesh, _>(am, out, |m| Ok(m.rename(&rename_args(from, to, n)?)?)))
}

/// Like `monarch_proc_mesh_split`, for actor meshes.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_split(
    am: *mut monarch_actor_mesh,
    label: *const c_char,
    names: *const *const c_char,
    sizes: *const usize,
    n: usize,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| {
        derive_view::<ActorMesh, _>(am, out, |m| {
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
    am: *mut monarch_actor_mesh,
    method: *const c_char,
    parts_in: *const monarch_bytes,
    nparts: usize,
    mode: u32,
    out: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| {
        let m = typed!(am, ActorMesh, "actor mesh");
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
                    Some(f) => insert(Object::Future(f)) as *mut monarch_future,
                    None => std::ptr::null_mut(),
                }
            };
        }
        Ok(())
    })
}

/// Stop the actors of this mesh (their procs keep running). Writes a
/// future that completes when every actor has stopped.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_stop(
    am: *mut monarch_actor_mesh,
    out: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| {
        let m = typed!(am, ActorMesh, "actor mesh");
        let out = out_ptr(out, "out")?;
        *out = insert(Object::Future(m.stop()?)) as *mut monarch_future;
        Ok(())
    })
}

/// Serialize a reference to this mesh (an `ActorMeshRef` flatbuffer) that
/// can be sent to any proc of the job and turned back into a mesh there
/// with `monarch_actor_mesh_from_ref`. Free with `monarch_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_to_ref(
    am: *mut monarch_actor_mesh,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let m = typed!(am, ActorMesh, "actor mesh");
        owned_buffer(m.to_ref(), out, out_len)
    })
}

/// Rebuild an actor mesh from the bytes of `monarch_actor_mesh_to_ref`
/// (borrowed for the call). Malformed bytes give MONARCH_ERR_INVALID_ARGUMENT.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_from_ref(
    rt: *mut monarch_runtime,
    ptr: *const u8,
    len: usize,
    out: *mut *mut monarch_actor_mesh,
) -> monarch_status {
    guard(|| {
        let r = typed!(rt, Runtime, "runtime");
        let out = out_ptr(out, "out")?;
        let bytes = arg_slice(ptr, len, "ptr")?;
        let m = ActorMesh::from_ref(&r, bytes)?;
        *out = insert(Object::ActorMesh(m)) as *mut monarch_actor_mesh;
        Ok(())
    })
}

/// Free an actor mesh handle. Does not stop the actors.
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_free(am: *mut monarch_actor_mesh) -> monarch_status {
    guard(|| remove(am as usize, "actor mesh").map(drop))
}

// ---------------------------------------------------------------------------
// Futures

/// Wait up to `timeout_ms` (-1: forever, 0: just check) for the future to
/// complete. MONARCH_OK means it is complete (take its result with
/// `monarch_future_take`); MONARCH_ERR_TIMEOUT means not yet.
#[no_mangle]
pub unsafe extern "C" fn monarch_future_wait(
    fut: *mut monarch_future,
    timeout_ms: i64,
) -> monarch_status {
    guard(|| {
        let f = typed!(fut, Future, "future");
        if f.wait(timeout(timeout_ms)) {
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
    fut: *mut monarch_future,
    out_ready: *mut bool,
) -> monarch_status {
    guard(|| {
        let f = typed!(fut, Future, "future");
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
    fut: *mut monarch_future,
    out: *mut *mut monarch_value_mesh,
) -> monarch_status {
    guard(|| {
        let f = typed!(fut, Future, "future");
        let out = out_ptr(out, "out")?;
        if !f.is_ready() {
            return Err(Fail::invalid("future is not complete yet"));
        }
        let mesh = f
            .take()
            .ok_or_else(|| Fail::invalid("future's result was already taken"))??;
        let errors = mesh
            .values
            .iter()
            .map(|v| match v {
                PointValue::Err { message, .. } => {
                    Some(std::ffi::CString::new(message.replace('\0', "")).unwrap_or_default())
                }
                PointValue::Ok(_) => None,
            })
            .collect();
        *out = insert(Object::ValueMesh(Arc::new(HeldValueMesh { mesh, errors })))
            as *mut monarch_value_mesh;
        Ok(())
    })
}

/// Free a future handle. The operation itself is not cancelled.
#[no_mangle]
pub unsafe extern "C" fn monarch_future_free(fut: *mut monarch_future) -> monarch_status {
    guard(|| remove(fut as usize, "future").map(drop))
}

// ---------------------------------------------------------------------------
// Value meshes

/// Write the Shape flatbuffer of the mesh that was called; free it with
/// `monarch_buffer_free`. Points are in row-major rank order of this shape.
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_shape(
    vm: *mut monarch_value_mesh,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let v = typed!(vm, ValueMesh, "value mesh");
        owned_buffer(
            monarch_core::wire::encode_shape(&v.mesh.shape),
            out,
            out_len,
        )
    })
}

/// Write the number of points.
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_len(
    vm: *mut monarch_value_mesh,
    out: *mut usize,
) -> monarch_status {
    guard(|| {
        let v = typed!(vm, ValueMesh, "value mesh");
        *out_ptr(out, "out")? = v.mesh.values.len();
        Ok(())
    })
}

fn point(v: &HeldValueMesh, rank: usize) -> Result<&PointValue, Fail> {
    v.mesh.values.get(rank).ok_or_else(|| {
        Fail::invalid(format!(
            "rank {rank} out of range for a value mesh of {} points",
            v.mesh.values.len()
        ))
    })
}

/// Describe point `rank`: writes whether it is an error, its error message
/// (NULL if none; borrowed, valid until the value mesh is freed) and its
/// number of payload parts.
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_point(
    vm: *mut monarch_value_mesh,
    rank: usize,
    out_is_error: *mut bool,
    out_error: *mut *const c_char,
    out_nparts: *mut usize,
) -> monarch_status {
    guard(|| {
        let v = typed!(vm, ValueMesh, "value mesh");
        let p = point(&v, rank)?;
        *out_ptr(out_is_error, "out_is_error")? = p.is_err();
        *out_ptr(out_error, "out_error")? = v.errors[rank]
            .as_ref()
            .map(|c| c.as_ptr())
            .unwrap_or(std::ptr::null());
        *out_ptr(out_nparts, "out_nparts")? = p.parts().len();
        Ok(())
    })
}

/// Borrow payload part `part` of point `rank` (valid until the value mesh
/// is freed).
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_part(
    vm: *mut monarch_value_mesh,
    rank: usize,
    part: usize,
    out_data: *mut *const u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let v = typed!(vm, ValueMesh, "value mesh");
        let p = point(&v, rank)?;
        let bytes = p.parts().get(part).ok_or_else(|| {
            Fail::invalid(format!(
                "part {part} out of range: point {rank} has {}",
                p.parts().len()
            ))
        })?;
        *out_ptr(out_data, "out_data")? = bytes.as_ptr();
        *out_ptr(out_len, "out_len")? = bytes.len();
        Ok(())
    })
}

/// One point of a value mesh as `monarch_value_mesh_points` describes it:
/// what `monarch_value_mesh_point` and `monarch_value_mesh_part` (part 0)
/// would say. Pointers are borrowed, valid until the value mesh is freed.
#[repr(C)]
pub struct monarch_point_info {
    /// Whether the point is an error.
    pub is_error: bool,
    /// The point is OK with exactly one part, byte-identical to point 0's
    /// (also OK with one part); always false for point 0 itself. Lets a
    /// binding decode a uniform answer once.
    pub same_as_first: bool,
    /// Error message (NULL if none).
    pub error: *const c_char,
    /// Number of payload parts.
    pub nparts: usize,
    /// Payload part 0 (NULL when there are no parts).
    pub part0: *const u8,
    /// Length of part 0 (0 when there are no parts).
    pub part0_len: usize,
}

/// Describe the points of a value mesh in rank order, all in one call:
/// fills `out[0..min(cap, len)]` and writes the number of points to
/// `*out_len` (when it exceeds `cap`, call again with a larger array).
/// `out` may be NULL when `cap` is 0.
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_points(
    vm: *mut monarch_value_mesh,
    out: *mut monarch_point_info,
    cap: usize,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let v = typed!(vm, ValueMesh, "value mesh");
        let out_len = out_ptr(out_len, "out_len")?;
        let values = &v.mesh.values;
        let n = values.len().min(cap);
        if n > 0 && out.is_null() {
            return Err(Fail::invalid("out is NULL but cap is not 0"));
        }
        let first: Option<&[u8]> = match values.first() {
            Some(PointValue::Ok(parts)) if parts.len() == 1 => Some(&parts[0]),
            _ => None,
        };
        for (rank, p) in values.iter().take(n).enumerate() {
            let parts = p.parts();
            let (part0, part0_len) = match parts.first() {
                Some(b) => (b.as_ptr(), b.len()),
                None => (std::ptr::null(), 0),
            };
            let same_as_first = rank > 0
                && !p.is_err()
                && parts.len() == 1
                && first.is_some_and(|f| f == &parts[0][..]);
            // SAFETY: the caller promises `cap` writable items at `out`.
            unsafe {
                out.add(rank).write(monarch_point_info {
                    is_error: p.is_err(),
                    same_as_first,
                    error: v.errors[rank]
                        .as_ref()
                        .map(|c| c.as_ptr())
                        .unwrap_or(std::ptr::null()),
                    nparts: parts.len(),
                    part0,
                    part0_len,
                })
            };
        }
        *out_len = values.len();
        Ok(())
    })
}

/// Free a value mesh handle (and everything borrowed from it).
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_free(vm: *mut monarch_value_mesh) -> monarch_status {
    guard(|| remove(vm as usize, "value mesh").map(drop))
}

// ---------------------------------------------------------------------------
// Events (the worker side)

/// Describe an event: writes its kind (`MONARCH_EVENT_*`), the key of the
/// actor it concerns, the endpoint name (messages) and the actor type name
/// (spawns). Strings are borrowed, valid until the event is freed; unused
/// ones are "". Any out-pointer except `out_kind` may be NULL.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_info(
    ev: *mut monarch_event,
    out_kind: *mut u32,
    out_actor: *mut *const c_char,
    out_method: *mut *const c_char,
    out_type_name: *mut *const c_char,
) -> monarch_status {
    guard(|| {
        let e = typed!(ev, Event, "event");
        let kind = e.event.locked().kind as u32;
        *out_ptr(out_kind, "out_kind")? = kind;
        let ptr = |s: &Option<std::ffi::CString>| s.as_deref().unwrap_or(c"").as_ptr();
        if !out_actor.is_null() {
            *out_actor = ptr(&e.actor);
        }
        if !out_method.is_null() {
            *out_method = ptr(&e.method);
        }
        if !out_type_name.is_null() {
            *out_type_name = ptr(&e.type_name);
        }
        Ok(())
    })
}

/// Write the rank of this actor in the mesh the message was sent to (for a
/// spawn: its rank in the mesh it is spawned into), and borrow that mesh's
/// Shape flatbuffer (NULL/0 if none; valid until the event is freed).
#[no_mangle]
pub unsafe extern "C" fn monarch_event_rank(
    ev: *mut monarch_event,
    out_rank: *mut u64,
    out_shape: *mut *const u8,
    out_shape_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let e = typed!(ev, Event, "event");
        let g = e.event.locked();
        *out_ptr(out_rank, "out_rank")? = g.message_rank;
        let (p, n) = match &g.shape {
            Some(s) => (s.as_ptr(), s.len()),
            None => (std::ptr::null(), 0),
        };
        *out_ptr(out_shape, "out_shape")? = p;
        *out_ptr(out_shape_len, "out_shape_len")? = n;
        Ok(())
    })
}

/// Write the number of payload parts of the event.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_nparts(
    ev: *mut monarch_event,
    out: *mut usize,
) -> monarch_status {
    guard(|| {
        let e = typed!(ev, Event, "event");
        *out_ptr(out, "out")? = e.event.locked().parts.len();
        Ok(())
    })
}

/// Borrow payload part `part` (valid until the event is freed).
#[no_mangle]
pub unsafe extern "C" fn monarch_event_part(
    ev: *mut monarch_event,
    part: usize,
    out_data: *mut *const u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let e = typed!(ev, Event, "event");
        let g = e.event.locked();
        let bytes = g.parts.get(part).ok_or_else(|| {
            Fail::invalid(format!(
                "part {part} out of range: event has {}",
                g.parts.len()
            ))
        })?;
        *out_ptr(out_data, "out_data")? = bytes.as_ptr();
        *out_ptr(out_len, "out_len")? = bytes.len();
        Ok(())
    })
}

/// Write whether the sender waits for an answer that has not been given.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_wants_reply(
    ev: *mut monarch_event,
    out: *mut bool,
) -> monarch_status {
    guard(|| {
        let e = typed!(ev, Event, "event");
        *out_ptr(out, "out")? = e.event.locked().wants_reply();
        Ok(())
    })
}

fn answer(ev: *mut monarch_event, result: monarch_core::runtime::Answer<'_>) -> Result<(), Fail> {
    let e = typed!(ev, Event, "event");
    let mut g = e.event.locked();
    g.reply(result).map_err(Fail::from)
}

/// Answer the event successfully with the given parts (borrowed for the
/// call). For a spawn this means the actor was constructed; for a stop,
/// that it has stopped. At most one answer per event.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_reply(
    ev: *mut monarch_event,
    parts_in: *const monarch_bytes,
    nparts: usize,
) -> monarch_status {
    guard(|| answer(ev, Ok(&parts(parts_in, nparts)?)))
}

/// Answer the event with an error: `message` (UTF-8) for any reader, plus
/// optional parts (e.g. a serialized exception for a same-language caller).
/// For a spawn this means construction failed; later messages to that actor
/// are answered with an error by the runtime.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_reply_error(
    ev: *mut monarch_event,
    message: *const c_char,
    parts_in: *const monarch_bytes,
    nparts: usize,
) -> monarch_status {
    guard(|| {
        let message = arg_str(message, "message")?;
        answer(ev, Err((message, &parts(parts_in, nparts)?)))
    })
}

/// Answer the event successfully with exactly one part (`len` bytes at
/// `data`, borrowed for the call; `data` may be NULL when `len` is 0) and
/// free it, in one call: `monarch_event_reply` then `monarch_event_free`.
/// The event is freed whatever the answer's status (a failed answer leaves
/// its sender with an error, as freeing an unanswered event does).
#[no_mangle]
pub unsafe extern "C" fn monarch_event_reply_one_and_free(
    ev: *mut monarch_event,
    data: *const u8,
    len: usize,
) -> monarch_status {
    guard(|| {
        let result = arg_slice(data, len, "data").and_then(|part| answer(ev, Ok(&[part])));
        remove(ev as usize, "event").map(drop)?;
        result
    })
}

/// Free an event. An event that still wants a reply is answered with an
/// error first, so its sender never waits forever.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_free(ev: *mut monarch_event) -> monarch_status {
    guard(|| remove(ev as usize, "event").map(drop))
}

/// Take over answering a message: writes the reply port its sender waits
/// on, as an opaque port reference (free with `monarch_buffer_free`), to
/// be answered later with `monarch_port_send`/`monarch_port_send_error`
/// from any thread, or by another proc the bytes are handed to. The event
/// then counts as answered (freeing it sends nothing). When nobody waits
/// for an answer (a broadcast), writes NULL and 0.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_take_port(
    ev: *mut monarch_event,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let e = typed!(ev, Event, "event");
        out_ptr(out, "out")?;
        out_ptr(out_len, "out_len")?;
        let taken = e.event.locked().take_reply_port();
        match taken {
            Some(r) => owned_buffer(r.encode(), out, out_len),
            None => {
                *out = std::ptr::null_mut();
                *out_len = 0;
                Ok(())
            }
        }
    })
}

// ---------------------------------------------------------------------------
// Ports

fn port_ref(ptr: *const u8, len: usize) -> Result<PortRef, Fail> {
    Ok(PortRef::decode(arg_slice(ptr, len, "port_ref")?)?)
}

/// Open a port of this process. `once`: it takes one value, then closes.
/// Writes its receiver to `*out`; the caller owns it and frees it with
/// `monarch_port_receiver_free`, which closes the port (values sent later
/// are dropped).
#[no_mangle]
pub unsafe extern "C" fn monarch_port_open(
    rt: *mut monarch_runtime,
    once: bool,
    out: *mut *mut monarch_port_receiver,
) -> monarch_status {
    guard(|| {
        let r = typed!(rt, Runtime, "runtime");
        let out = out_ptr(out, "out")?;
        let rx = r.open_port(once);
        *out = insert(Object::PortReceiver(Arc::new(rx))) as *mut monarch_port_receiver;
        Ok(())
    })
}

/// Write an opaque reference to the receiver's port (free with
/// `monarch_buffer_free`). Any proc of the job may send to it with
/// `monarch_port_send`; the bytes may travel in messages.
#[no_mangle]
pub unsafe extern "C" fn monarch_port_receiver_ref(
    rx: *mut monarch_port_receiver,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let p = typed!(rx, PortReceiver, "port receiver");
        owned_buffer(p.port_ref().encode(), out, out_len)
    })
}

/// Write a future of the next value of the port: its ValueMesh has one
/// point holding the value or error that was sent. Futures complete in
/// the order they were asked for; a future asked of a closed port (a once
/// port that already delivered, a stream whose every point answered)
/// fails with MONARCH_ERR_INVALID_ARGUMENT when taken.
#[no_mangle]
pub unsafe extern "C" fn monarch_port_receiver_recv(
    rx: *mut monarch_port_receiver,
    out: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| {
        let p = typed!(rx, PortReceiver, "port receiver");
        let out = out_ptr(out, "out")?;
        *out = insert(Object::Future(p.recv())) as *mut monarch_future;
        Ok(())
    })
}

/// Free a port receiver; its port closes: values sent later are dropped,
/// and futures from `monarch_port_receiver_recv` still pending fail with
/// `MONARCH_ERR_STOPPED` (they stay valid to free). Futures already
/// complete keep their values.
#[no_mangle]
pub unsafe extern "C" fn monarch_port_receiver_free(
    rx: *mut monarch_port_receiver,
) -> monarch_status {
    guard(|| remove(rx as usize, "port receiver").map(drop))
}

/// Send a value (parts, borrowed for the call) to the port named by the
/// reference bytes (borrowed). Malformed bytes give
/// MONARCH_ERR_INVALID_ARGUMENT; a port that no longer exists drops it.
#[no_mangle]
pub unsafe extern "C" fn monarch_port_send(
    rt: *mut monarch_runtime,
    port_ref_ptr: *const u8,
    port_ref_len: usize,
    parts_in: *const monarch_bytes,
    nparts: usize,
) -> monarch_status {
    guard(|| {
        let r = typed!(rt, Runtime, "runtime");
        let to = port_ref(port_ref_ptr, port_ref_len)?;
        let p = parts(parts_in, nparts)?;
        Ok(r.port_send(&to, Ok(&p))?)
    })
}

/// Send an error to a port: `message` (UTF-8) plus optional parts (e.g. a
/// serialized exception), like `monarch_event_reply_error`.
#[no_mangle]
pub unsafe extern "C" fn monarch_port_send_error(
    rt: *mut monarch_runtime,
    port_ref_ptr: *const u8,
    port_ref_len: usize,
    message: *const c_char,
    parts_in: *const monarch_bytes,
    nparts: usize,
) -> monarch_status {
    guard(|| {
        let r = typed!(rt, Runtime, "runtime");
        let to = port_ref(port_ref_ptr, port_ref_len)?;
        let message = arg_str(message, "message")?;
        let p = parts(parts_in, nparts)?;
        Ok(r.port_send(&to, Err((message, &p)))?)
    })
}

/// Call endpoint `method` with replies sent to the port named by the
/// reference bytes (borrowed) instead of a future: `mode` is
/// `MONARCH_CALL_ALL` (every actor; point r of the mesh answers to slot r)
/// or `MONARCH_CALL_CHOOSE` (one actor chosen by the runtime).
#[no_mangle]
pub unsafe extern "C" fn monarch_actor_mesh_send(
    am: *mut monarch_actor_mesh,
    method: *const c_char,
    parts_in: *const monarch_bytes,
    nparts: usize,
    port_ref_ptr: *const u8,
    port_ref_len: usize,
    mode: u32,
) -> monarch_status {
    guard(|| {
        let m = typed!(am, ActorMesh, "actor mesh");
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
    am: *mut monarch_actor_mesh,
    method: *const c_char,
    parts_in: *const monarch_bytes,
    nparts: usize,
    out: *mut *mut monarch_port_receiver,
) -> monarch_status {
    guard(|| {
        let m = typed!(am, ActorMesh, "actor mesh");
        let out = out_ptr(out, "out")?;
        let method = arg_str(method, "method")?;
        let p = parts(parts_in, nparts)?;
        let rx = m.stream(method, &p)?;
        *out = insert(Object::PortReceiver(Arc::new(rx))) as *mut monarch_port_receiver;
        Ok(())
    })
}
