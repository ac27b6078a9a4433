//! The runtime's error type. Each kind maps to one C ABI status code.

use std::fmt;

/// What kind of failure an [`Error`] is; each maps to one C status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller passed something unusable (bad name, bad index, ...).
    InvalidArgument,
    /// A wait ran out of time; nothing was lost, the wait can be retried.
    Timeout,
    /// A proc or actor the operation needs has failed or exited.
    ProcFailed,
    /// The runtime, mesh or actor was stopped.
    Stopped,
    /// An operating-system or network error.
    Io,
    /// A bug in the runtime.
    Internal,
}

/// An error of the runtime: a kind and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What kind of failure this is.
    pub kind: ErrorKind,
    /// What went wrong, in words.
    pub message: String,
}

impl Error {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }
    /// An [`ErrorKind::InvalidArgument`] error.
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, message)
    }
    /// An [`ErrorKind::Io`] error: `context` says what was being done.
    pub fn io(context: &str, e: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, format!("{context}: {e}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// A result with the runtime's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
