//! A non-blocking Linux eventfd: a descriptor one thread makes readable to
//! wake another out of `poll` (the runtime's notification descriptor,
//! each parked thread's wake-up, the I/O thread's kick).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    pub(crate) fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    #[inline]
    pub(crate) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Make the descriptor readable.
    #[inline]
    pub(crate) fn signal(&self) {
        signal(self.fd());
    }

    /// Make the descriptor not readable.
    #[inline]
    pub(crate) fn drain(&self) {
        drain(self.fd());
    }
}

/// Make eventfd `fd` readable (for a descriptor another thread owns and
/// keeps open while it is registered).
#[inline]
pub(crate) fn signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: 8-byte write from a valid u64 to an eventfd; a full counter
    // already means "readable", so errors don't matter.
    unsafe { libc::write(fd, &one as *const u64 as *const _, 8) };
}

/// Make eventfd `fd` not readable.
#[inline]
pub(crate) fn drain(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: 8-byte read into a valid u64 from a non-blocking eventfd;
    // EAGAIN means already clear.
    unsafe { libc::read(fd, &mut v as *mut u64 as *mut _, 8) };
}
