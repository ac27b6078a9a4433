//! Reading what C passes in: strings, arrays, string arrays, `NAME=value`
//! environment arrays, mesh dimensions, timeouts and out-pointers. Every
//! reader names the argument in its error, so a bad one gives
//! `MONARCH_ERR_INVALID_ARGUMENT` saying which.
//!
//! Everything read here is borrowed for the call only: the caller promises
//! it stays valid until the function returns, and the library copies what
//! it keeps.

use std::borrow::Cow;
use std::ffi::{c_char, CStr};
use std::time::Duration;

use monarch_core::limits::bounded_message;
use monarch_core::{Error, Shape};

use crate::status::Fail;

/// Borrow a NUL-terminated UTF-8 string.
pub(crate) fn arg_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller promises a NUL-terminated string that outlives the call.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Fail::invalid(format!("{what} is not valid UTF-8")))
}

/// Borrow an error message to send, cut to the length an answer may carry
/// (see [`bounded_message`]).
pub(crate) fn arg_error_message<'a>(p: *const c_char, what: &str) -> Result<Cow<'a, str>, Fail> {
    Ok(bounded_message(arg_str(p, what)?))
}

/// Borrow an array of `n` items (NULL allowed when `n` is 0). Byte ranges
/// (`const uint8_t *`, `size_t`) are read with this too.
pub(crate) fn arg_slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], Fail> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::invalid(format!(
            "{what} is NULL but its length is {n}"
        )));
    }
    // SAFETY: the caller promises `n` valid items that outlive the call.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Borrow an array of `n` strings; element i is named `what[i]` in errors.
pub(crate) fn str_array<'a>(
    p: *const *const c_char,
    n: usize,
    what: &str,
) -> Result<Vec<&'a str>, Fail> {
    arg_slice(p, n, what)?
        .iter()
        .enumerate()
        .map(|(i, s)| arg_str(*s, &format!("{what}[{i}]")))
        .collect()
}

/// Copy an array of `n` strings (an argv, a list of addresses, ...).
pub(crate) fn string_array(
    p: *const *const c_char,
    n: usize,
    what: &str,
) -> Result<Vec<String>, Fail> {
    Ok(str_array(p, n, what)?
        .into_iter()
        .map(str::to_string)
        .collect())
}

/// Copy an array of `n` "NAME=value" strings into (name, value) pairs; an
/// entry without `=` or with an empty name is refused.
pub(crate) fn env_array(
    p: *const *const c_char,
    n: usize,
    what: &str,
) -> Result<Vec<(String, String)>, Fail> {
    str_array(p, n, what)?
        .into_iter()
        .enumerate()
        .map(|(i, e)| match e.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(Fail::invalid(format!(
                "{what}[{i}] {e:?} is not NAME=value"
            ))),
        })
        .collect()
}

/// The dense shape of `ndim` dimensions named `labels[i]` of size `sizes[i]`.
pub(crate) fn dims(
    labels: *const *const c_char,
    sizes: *const usize,
    ndim: usize,
) -> Result<Shape, Fail> {
    arg_slice(labels, ndim, "labels")?;
    let sizes = arg_slice(sizes, ndim, "sizes")?;
    let labels = string_array(labels, ndim, "labels")?;
    Ok(Shape::dense(labels, sizes.to_vec()).map_err(Error::from)?)
}

/// The one timeout value meaning "wait forever".
pub(crate) const WAIT_FOREVER: i64 = -1;

/// A wait's bound in milliseconds: [`WAIT_FOREVER`] waits forever (None),
/// 0 only checks; any other negative value is refused.
pub(crate) fn timeout(ms: i64) -> Result<Option<Duration>, Fail> {
    match ms {
        WAIT_FOREVER => Ok(None),
        ms if ms < 0 => Err(Fail::invalid(format!(
            "timeout_ms is {ms}: give -1 to wait forever or a bound >= 0"
        ))),
        ms => Ok(Some(Duration::from_millis(ms as u64))),
    }
}

/// Check an out-pointer is non-null.
pub(crate) fn out_ptr<T>(p: *mut T, what: &str) -> Result<&'static mut T, Fail> {
    if p.is_null() {
        return Err(Fail::invalid(format!("out-pointer {what} is NULL")));
    }
    // SAFETY: non-null and, by the API contract, valid for a write of T.
    Ok(unsafe { &mut *p })
}
