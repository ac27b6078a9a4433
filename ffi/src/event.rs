//! `monarch_event`: one unit of work for the actors hosted in this process
//! (the worker side of the ABI), pulled from the runtime and answered.

use std::ffi::{c_char, CString};

use monarch_core::runtime::Answer;
use monarch_core::Event;
use parking_lot::Mutex;

use crate::args::{arg_error_message, arg_slice, out_ptr, timeout};
use crate::bytes::{monarch_bytes, owned_buffer, parts};
use crate::handles::{self, get, insert_arc, Handle};
use crate::runtime::monarch_runtime;
use crate::status::{guard, monarch_status, Fail};

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

/// One unit of work for the actors hosted in this process: spawn an actor,
/// run an endpoint, stop an actor or the proc, or handle a failure.
///
/// Created by `monarch_runtime_next_event` or
/// `monarch_runtime_next_event_header`; freed by `monarch_event_free` or
/// `monarch_event_reply_one_and_free` (an event freed unanswered is
/// answered with an error). May be used from any thread; strings and parts
/// borrowed from it stay valid until it is freed.
pub struct monarch_event {
    _private: [u8; 0],
}

impl Handle for monarch_event {
    type Rust = HeldEvent;
    const KIND: &'static str = "event";
}

/// An event plus NUL-terminated copies of its names that C borrows
/// (None for an empty name).
pub(crate) struct HeldEvent {
    event: Mutex<Event>,
    actor: Option<CString>,
    method: Option<CString>,
    type_name: Option<CString>,
}

impl HeldEvent {
    fn new(ev: Event) -> HeldEvent {
        // Empty names (most events have no type name) need no allocation.
        let cstr = |s: &str| {
            (!s.is_empty()).then(|| {
                CString::new(s)
                    .unwrap_or_else(|_| CString::new(s.replace('\0', "")).unwrap_or_default())
            })
        };
        HeldEvent {
            actor: cstr(&ev.actor),
            method: cstr(&ev.method),
            type_name: cstr(&ev.type_name),
            event: Mutex::new(ev),
        }
    }
}

/// A borrowed C string for an optional name ("" for none).
fn name_ptr(s: &Option<CString>) -> *const c_char {
    s.as_deref().unwrap_or(c"").as_ptr()
}

/// Wait up to `timeout_ms` (-1: forever, 0: just check; any other negative value is
/// refused with `MONARCH_ERR_INVALID_ARGUMENT`) for the next event
/// for the actors hosted in this process and write it to `*out`.
/// Returns `MONARCH_ERR_TIMEOUT` if none arrived, `MONARCH_ERR_STOPPED`
/// once the runtime was shut down. Answer the event if
/// `monarch_event_wants_reply` says so, then free it.
#[no_mangle]
pub unsafe extern "C" fn monarch_runtime_next_event(
    rt: *const monarch_runtime,
    timeout_ms: i64,
    out: *mut *mut monarch_event,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let out = out_ptr(out, "out")?;
        let ev = r.next_event(timeout(timeout_ms)?)?;
        *out = insert_arc::<monarch_event>(HeldEvent::new(ev).into());
        Ok(())
    })
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
    rt: *const monarch_runtime,
    timeout_ms: i64,
    out: *mut *mut monarch_event,
    out_header: *mut monarch_event_header,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let out = out_ptr(out, "out")?;
        let header = out_ptr(out_header, "out_header")?;
        let held = std::sync::Arc::new(HeldEvent::new(r.next_event(timeout(timeout_ms)?)?));
        {
            let g = held.event.lock();
            let (part0, part0_len) = match g.parts.first() {
                Some(p) => (p.as_ptr(), p.len()),
                None => (std::ptr::null(), 0),
            };
            *header = monarch_event_header {
                kind: g.kind as u32,
                wants_reply: g.wants_reply(),
                actor: name_ptr(&held.actor),
                method: name_ptr(&held.method),
                type_name: name_ptr(&held.type_name),
                nparts: g.parts.len(),
                part0,
                part0_len,
            };
        }
        // The event's parts live on the heap: the pointers stay valid when
        // the handle takes the Arc over.
        *out = insert_arc::<monarch_event>(held);
        Ok(())
    })
}

/// Describe an event: writes its kind (`MONARCH_EVENT_*`), the key of the
/// actor it concerns, the endpoint name (messages) and the actor type name
/// (spawns). Strings are borrowed, valid until the event is freed; unused
/// ones are "". Any out-pointer except `out_kind` may be NULL.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_info(
    ev: *const monarch_event,
    out_kind: *mut u32,
    out_actor: *mut *const c_char,
    out_method: *mut *const c_char,
    out_type_name: *mut *const c_char,
) -> monarch_status {
    guard(|| {
        let e = get(ev)?;
        let kind = e.event.lock().kind as u32;
        *out_ptr(out_kind, "out_kind")? = kind;
        if !out_actor.is_null() {
            *out_actor = name_ptr(&e.actor);
        }
        if !out_method.is_null() {
            *out_method = name_ptr(&e.method);
        }
        if !out_type_name.is_null() {
            *out_type_name = name_ptr(&e.type_name);
        }
        Ok(())
    })
}

/// Write the rank of this actor in the mesh the message was sent to (for a
/// spawn: its rank in the mesh it is spawned into), and borrow that mesh's
/// Shape flatbuffer (NULL/0 if none; valid until the event is freed).
#[no_mangle]
pub unsafe extern "C" fn monarch_event_rank(
    ev: *const monarch_event,
    out_rank: *mut u64,
    out_shape: *mut *const u8,
    out_shape_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let e = get(ev)?;
        let g = e.event.lock();
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
    ev: *const monarch_event,
    out: *mut usize,
) -> monarch_status {
    guard(|| {
        let e = get(ev)?;
        *out_ptr(out, "out")? = e.event.lock().parts.len();
        Ok(())
    })
}

/// Borrow payload part `part` (valid until the event is freed).
#[no_mangle]
pub unsafe extern "C" fn monarch_event_part(
    ev: *const monarch_event,
    part: usize,
    out_data: *mut *const u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let e = get(ev)?;
        let g = e.event.lock();
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
    ev: *const monarch_event,
    out: *mut bool,
) -> monarch_status {
    guard(|| {
        let e = get(ev)?;
        *out_ptr(out, "out")? = e.event.lock().wants_reply();
        Ok(())
    })
}

fn answer(e: &HeldEvent, result: Answer<'_>) -> Result<(), Fail> {
    e.event.lock().reply(result).map_err(Fail::from)
}

/// Answer the event successfully with the given parts (borrowed for the
/// call). For a spawn this means the actor was constructed; for a stop,
/// that it has stopped. At most one answer per event.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_reply(
    ev: *const monarch_event,
    parts_in: *const monarch_bytes,
    nparts: usize,
) -> monarch_status {
    guard(|| {
        let p = parts(parts_in, nparts)?;
        answer(&*get(ev)?, Ok(&p))
    })
}

/// Answer the event with an error: `message` (UTF-8) for any reader, plus
/// optional parts (e.g. a serialized exception for a same-language caller).
/// A message over 64 KiB is cut to that length.
/// For a spawn this means construction failed; later messages to that actor
/// are answered with an error by the runtime.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_reply_error(
    ev: *const monarch_event,
    message: *const c_char,
    parts_in: *const monarch_bytes,
    nparts: usize,
) -> monarch_status {
    guard(|| {
        let message = arg_error_message(message, "message")?;
        let p = parts(parts_in, nparts)?;
        answer(&*get(ev)?, Err((&message, &p)))
    })
}

/// The actor this event is for has failed while handling it (a spawn or a
/// message event): `message` (UTF-8) says how, `parts` are binding-defined
/// (e.g. a serialized exception), borrowed for the call. The actor is
/// marked failed (later messages to it are refused), its owner receives a
/// supervision event once (cause `SpawnFailed` for a spawn, else
/// `EndpointError`), and the sender, if it waits (also through a reply
/// port taken with `monarch_event_take_port`), gets the failure report as
/// an error without parts. The event counts as answered.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_fail(
    ev: *const monarch_event,
    message: *const c_char,
    parts_in: *const monarch_bytes,
    nparts: usize,
) -> monarch_status {
    guard(|| {
        let message = arg_error_message(message, "message")?;
        let p = parts(parts_in, nparts)?;
        let payload = p.first().copied().unwrap_or(&[]);
        let e = get(ev)?;
        let mut g = e.event.lock();
        g.fail(&message, payload).map_err(Fail::from)
    })
}

/// Answer the event successfully with exactly one part (`len` bytes at
/// `data`, borrowed for the call; `data` may be NULL when `len` is 0) and
/// free it, in one call: `monarch_event_reply` then `monarch_event_free`.
/// The event is freed whatever the answer's status (a failed answer leaves
/// its sender with an error, as freeing an unanswered event does). Unlike
/// `monarch_event_free`, a NULL event is `MONARCH_ERR_INVALID_HANDLE`: it
/// cannot be answered.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_reply_one_and_free(
    ev: *mut monarch_event,
    data: *const u8,
    len: usize,
) -> monarch_status {
    guard(|| {
        let e = get(ev.cast_const())?;
        let result = arg_slice(data, len, "data").and_then(|part| answer(&e, Ok(&[part])));
        drop(e);
        handles::free(ev)?;
        result
    })
}

/// Free an event. An event that still wants a reply is answered with an
/// error first, so its sender never waits forever. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_free(ev: *mut monarch_event) -> monarch_status {
    guard(|| handles::free(ev))
}

/// Take over answering a message: writes the reply port its sender waits
/// on, as an opaque port reference (free with `monarch_buffer_free`), to
/// be answered later with `monarch_port_send`/`monarch_port_send_error`
/// from any thread, or by another proc the bytes are handed to. The event
/// then counts as answered (freeing it sends nothing). When nobody waits
/// for an answer (a broadcast), writes NULL and 0.
#[no_mangle]
pub unsafe extern "C" fn monarch_event_take_port(
    ev: *const monarch_event,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let e = get(ev)?;
        out_ptr(out, "out")?;
        out_ptr(out_len, "out_len")?;
        let taken = e.event.lock().take_reply_port();
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
