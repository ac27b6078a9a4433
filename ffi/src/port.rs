//! Ports: `monarch_port_receiver` (the receiving end of a port of this
//! process) and sending to any port by its reference bytes.

use std::ffi::c_char;

use monarch_core::{PortReceiver, PortRef};

use crate::args::{arg_error_message, arg_slice, out_ptr};
use crate::bytes::{monarch_bytes, owned_buffer, parts};
use crate::future::monarch_future;
use crate::handles::{self, get, insert, Handle};
use crate::runtime::monarch_runtime;
use crate::status::{guard, monarch_status, Fail};

/// The receiving end of a port of this process (a channel, or the replies
/// of `monarch_actor_mesh_stream`).
///
/// Created by `monarch_port_open` or `monarch_actor_mesh_stream`; freed by
/// `monarch_port_receiver_free`, which closes the port. May be used from
/// any thread; receives complete in the order they were asked for.
pub struct monarch_port_receiver {
    _private: [u8; 0],
}

impl Handle for monarch_port_receiver {
    type Rust = PortReceiver;
    const KIND: &'static str = "port receiver";
}

/// Decode a port reference passed as (ptr, len).
pub(crate) fn port_ref(ptr: *const u8, len: usize) -> Result<PortRef, Fail> {
    Ok(PortRef::decode(arg_slice(ptr, len, "port_ref")?)?)
}

/// Open a port of this process. `once`: it takes one value, then closes.
/// Writes its receiver to `*out`; the caller owns it and frees it with
/// `monarch_port_receiver_free`, which closes the port (values sent later
/// are dropped).
#[no_mangle]
pub unsafe extern "C" fn monarch_port_open(
    rt: *const monarch_runtime,
    once: bool,
    out: *mut *mut monarch_port_receiver,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let out = out_ptr(out, "out")?;
        *out = insert::<monarch_port_receiver>(r.open_port(once));
        Ok(())
    })
}

/// Write an opaque reference to the receiver's port (free with
/// `monarch_buffer_free`). Any proc of the job may send to it with
/// `monarch_port_send`; the bytes may travel in messages.
#[no_mangle]
pub unsafe extern "C" fn monarch_port_receiver_ref(
    rx: *const monarch_port_receiver,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let p = get(rx)?;
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
    rx: *const monarch_port_receiver,
    out: *mut *mut monarch_future,
) -> monarch_status {
    guard(|| {
        let p = get(rx)?;
        let out = out_ptr(out, "out")?;
        *out = insert::<monarch_future>(p.recv());
        Ok(())
    })
}

/// Free a port receiver; its port closes: values sent later are dropped,
/// and futures from `monarch_port_receiver_recv` still pending fail with
/// `MONARCH_ERR_STOPPED` (they stay valid to free). Futures already
/// complete keep their values. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn monarch_port_receiver_free(
    rx: *mut monarch_port_receiver,
) -> monarch_status {
    guard(|| handles::free(rx))
}

/// Send a value (parts, borrowed for the call) to the port named by the
/// reference bytes (borrowed). Malformed bytes give
/// MONARCH_ERR_INVALID_ARGUMENT; a port that no longer exists drops it.
#[no_mangle]
pub unsafe extern "C" fn monarch_port_send(
    rt: *const monarch_runtime,
    port_ref_ptr: *const u8,
    port_ref_len: usize,
    parts_in: *const monarch_bytes,
    nparts: usize,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let to = port_ref(port_ref_ptr, port_ref_len)?;
        let p = parts(parts_in, nparts)?;
        Ok(r.port_send(&to, Ok(&p))?)
    })
}

/// Send an error to a port: `message` (UTF-8) plus optional parts (e.g. a
/// serialized exception), like `monarch_event_reply_error`.
#[no_mangle]
pub unsafe extern "C" fn monarch_port_send_error(
    rt: *const monarch_runtime,
    port_ref_ptr: *const u8,
    port_ref_len: usize,
    message: *const c_char,
    parts_in: *const monarch_bytes,
    nparts: usize,
) -> monarch_status {
    guard(|| {
        let r = get(rt)?;
        let to = port_ref(port_ref_ptr, port_ref_len)?;
        let message = arg_error_message(message, "message")?;
        let p = parts(parts_in, nparts)?;
        Ok(r.port_send(&to, Err((&message, &p)))?)
    })
}
