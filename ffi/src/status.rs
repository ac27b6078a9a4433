//! Status codes, their names, the thread's last error message, and the one
//! guard every entry point runs in (so no panic ever unwinds into foreign
//! code).

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use monarch_core::{Error, ErrorKind};

/// Result of every libmonarch function: `MONARCH_OK` (0) or an error code.
/// On error, `monarch_last_error()` describes what went wrong.
///
/// New status codes may be added in later versions of the library: treat
/// any code other than `MONARCH_OK` as an error, and use
/// `monarch_status_name` (which names unknown codes "MONARCH_ERR_UNKNOWN")
/// rather than a table of your own to print one.
pub type monarch_status = i32;

/// Success.
pub const MONARCH_OK: monarch_status = 0;
/// An argument was NULL, not UTF-8, out of range or otherwise unusable.
pub const MONARCH_ERR_INVALID_ARGUMENT: monarch_status = 1;
/// A handle was NULL, already freed, never valid, or of the wrong kind.
pub const MONARCH_ERR_INVALID_HANDLE: monarch_status = 2;
/// A wait ran out of time. Nothing was lost; the wait may be repeated.
pub const MONARCH_ERR_TIMEOUT: monarch_status = 3;
/// A proc (or actor) the operation needed has failed or exited.
pub const MONARCH_ERR_PROC_FAILED: monarch_status = 4;
/// The runtime or the object was stopped.
pub const MONARCH_ERR_STOPPED: monarch_status = 5;
/// An operating-system or network error.
pub const MONARCH_ERR_IO: monarch_status = 6;
/// A bug in libmonarch was caught at the boundary (a Rust panic).
pub const MONARCH_ERR_PANIC: monarch_status = 7;
/// An internal error in libmonarch.
pub const MONARCH_ERR_INTERNAL: monarch_status = 8;

/// A failed call: its status and message.
#[derive(Debug)]
pub struct Fail {
    pub status: monarch_status,
    pub message: String,
}

impl Fail {
    pub fn new(status: monarch_status, message: impl Into<String>) -> Fail {
        Fail {
            status,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Fail {
        Fail::new(MONARCH_ERR_INVALID_ARGUMENT, message)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let status = match e.kind {
            ErrorKind::InvalidArgument => MONARCH_ERR_INVALID_ARGUMENT,
            ErrorKind::Timeout => MONARCH_ERR_TIMEOUT,
            ErrorKind::ProcFailed => MONARCH_ERR_PROC_FAILED,
            ErrorKind::Stopped => MONARCH_ERR_STOPPED,
            ErrorKind::Io => MONARCH_ERR_IO,
            ErrorKind::Internal => MONARCH_ERR_INTERNAL,
        };
        Fail::new(status, e.message)
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Run an entry point's body: record its error, and turn a panic into
/// `MONARCH_ERR_PANIC` instead of unwinding across the boundary.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), Fail>) -> monarch_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => MONARCH_OK,
        Ok(Err(fail)) => {
            set_last_error(&fail.message);
            fail.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!("internal error (panic): {what}"));
            MONARCH_ERR_PANIC
        }
    }
}

/// The calling thread's most recent error message, or "" if none.
/// Owned by the library; valid until the next libmonarch call on this thread.
#[no_mangle]
pub extern "C" fn monarch_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// The name of status code `status` as it is spelled in this header (e.g.
/// "MONARCH_ERR_INVALID_HANDLE" for `MONARCH_ERR_INVALID_HANDLE`), or
/// "MONARCH_ERR_UNKNOWN" for a code this library does not know. A static
/// string owned by the library: never free it.
#[no_mangle]
pub extern "C" fn monarch_status_name(status: monarch_status) -> *const c_char {
    let name: &CStr = match status {
        MONARCH_OK => c"MONARCH_OK",
        MONARCH_ERR_INVALID_ARGUMENT => c"MONARCH_ERR_INVALID_ARGUMENT",
        MONARCH_ERR_INVALID_HANDLE => c"MONARCH_ERR_INVALID_HANDLE",
        MONARCH_ERR_TIMEOUT => c"MONARCH_ERR_TIMEOUT",
        MONARCH_ERR_PROC_FAILED => c"MONARCH_ERR_PROC_FAILED",
        MONARCH_ERR_STOPPED => c"MONARCH_ERR_STOPPED",
        MONARCH_ERR_IO => c"MONARCH_ERR_IO",
        MONARCH_ERR_PANIC => c"MONARCH_ERR_PANIC",
        MONARCH_ERR_INTERNAL => c"MONARCH_ERR_INTERNAL",
        _ => c"MONARCH_ERR_UNKNOWN",
    };
    name.as_ptr()
}
