//! Bytes across the boundary: `monarch_bytes` (a borrowed input range) and
//! the owned buffers functions write to `out`/`out_len` pairs, freed with
//! `monarch_buffer_free`.

use crate::args::{arg_slice, out_ptr};
use crate::status::{guard, monarch_status, Fail};

/// A borrowed byte range: `len` bytes at `ptr` (`ptr` may be NULL when
/// `len` is 0).
///
/// Filled in by the caller and borrowed by the library for the duration of
/// the call only; the library copies what it keeps.
#[repr(C)]
pub struct monarch_bytes {
    pub ptr: *const u8,
    pub len: usize,
}

/// Borrow the `n` byte ranges of a `monarch_bytes` array (the parts of a
/// message).
pub(crate) fn parts<'a>(p: *const monarch_bytes, n: usize) -> Result<Vec<&'a [u8]>, Fail> {
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

/// Hand `v` to the caller as an owned buffer (`*out`, `*out_len`), to be
/// freed with `monarch_buffer_free`.
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

/// Free a buffer that libmonarch returned as owned (`out`/`out_len` pairs
/// documented as "free with monarch_buffer_free"), passing the length it
/// was returned with. NULL is a no-op; always returns `MONARCH_OK`.
#[no_mangle]
pub unsafe extern "C" fn monarch_buffer_free(ptr: *mut u8, len: usize) -> monarch_status {
    guard(|| {
        if !ptr.is_null() {
            // SAFETY: (ptr, len) came from `owned_buffer`, which leaked a Box<[u8]>.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
        }
        Ok(())
    })
}
