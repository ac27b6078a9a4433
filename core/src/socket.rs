//! Raw calls on a socket descriptor, shared by the plain and TLS paths:
//! a vectored send that never raises SIGPIPE, and blocking until the
//! descriptor is ready.

use std::io;
use std::os::fd::RawFd;

/// `sendmsg` with `MSG_NOSIGNAL`: writing to a peer that has gone away must
/// be an error (EPIPE), not a SIGPIPE that kills a host program which left
/// that signal at its default (C and C++ programs do; Rust and Python ignore
/// it).
pub(crate) fn send_vectored(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is guaranteed ABI-compatible with iovec on Unix.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len().min(libc::UIO_MAXIOV as usize) as _;
    loop {
        // SAFETY: `msg` points at `bufs`, which outlive the call.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Block until `fd` is ready for `events` (or has an error/hang-up).
pub(crate) fn wait_fd(fd: RawFd, events: libc::c_short) -> io::Result<()> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd, infinite timeout.
        let r = unsafe { libc::poll(&mut p, 1, -1) };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
