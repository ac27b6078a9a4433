//! Same-host backend: one-sided copies with `process_vm_readv` /
//! `process_vm_writev`, straight between the two processes' memory (no
//! socket, no intermediate buffer, one copy done by the kernel).
//!
//! Permission: the kernel lets a process access another's memory when it
//! may ptrace it. Each owner calls [`allow_access`] when it registers its
//! first buffer: with Yama (`kernel.yama.ptrace_scope` = 1) that is
//! `prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`; without Yama, same-uid
//! processes already may. When the kernel still refuses (Yama scope 2/3,
//! a seccomp filter, different users), the first transfer fails with
//! EPERM/ENOSYS and the pair falls back to TCP.
//!
//! Validation: the reader never touches the owner's memory without a lease
//! granted by the owner's data-plane server over a Unix socket (see
//! `server.rs`): the owner checks id, key and bounds, and holds the region
//! against drop until the reader reports it is done (or its connection
//! closes). After the copy the reader waits for the owner's acknowledgement
//! of that report, so an owner that died during the copy (its pid possibly
//! reused) is reported as an error rather than a success.

use std::io;

use crate::pacing;

/// Identity of this host and pid namespace: the kernel's boot id plus the
/// pid namespace inode. Equal identities mean pids are comparable.
pub fn host_identity() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown-boot".into());
        let ns = std::fs::read_link("/proc/self/ns/pid")
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        format!("{boot}/{ns}")
    })
    .clone()
}

/// Let other processes of the job read and write our registered memory.
pub fn allow_access() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: plain prctl; EINVAL (no Yama) is harmless and ignored.
        unsafe {
            libc::prctl(
                libc::PR_SET_PTRACER,
                libc::PR_SET_PTRACER_ANY as libc::c_ulong,
                0,
                0,
                0,
            )
        };
    });
}

fn copy(pid: u32, remote: u64, local: *mut u8, len: usize, write: bool) -> io::Result<()> {
    // One syscall copies one piece (`bulk_chunk`): the kernel does not
    // preempt it, so the piece bounds how long it holds the CPU.
    let chunk = pacing::bulk_chunk();
    let _copier = pacing::Copier::new(len);
    let mut done = 0usize;
    while done < len {
        if done > 0 {
            pacing::between_chunks();
        }
        let n = (len - done).min(chunk);
        vm_copy(
            pid,
            remote + done as u64,
            (local as usize + done) as *mut u8,
            n,
            write,
        )?;
        done += n;
    }
    Ok(())
}

/// `len` bytes between `remote` in process `pid` and `local` here, as
/// many `process_vm_readv` / `process_vm_writev` calls as the kernel
/// needs, without pacing; the caller's `local` must be valid for `len`
/// bytes (the kernel checks the remote range against the target's
/// mappings).
fn vm_copy(pid: u32, remote: u64, local: *mut u8, len: usize, write: bool) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let l = libc::iovec {
            iov_base: (local as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: `local` is valid for `len` bytes (caller's contract); the
        // remote range is checked by the kernel against the target's
        // mappings (and by the owner's lease against its registration).
        let got = unsafe {
            if write {
                libc::process_vm_writev(pid as libc::pid_t, &l, 1, &r, 1, 0)
            } else {
                libc::process_vm_readv(pid as libc::pid_t, &l, 1, &r, 1, 0)
            }
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if got == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "process_vm copy made no progress",
            ));
        }
        done += got as usize;
    }
    Ok(())
}

/// Copy `len` bytes at `remote` in process `pid` into `local` at once, in
/// as few system calls as the kernel allows, not paced as data-plane
/// transfers are (for callers that read small blocks right before using
/// them, such as the tensor plane's collectives).
///
/// # Safety
/// `local` must be valid for writes of `len` bytes.
pub unsafe fn read_now(pid: u32, remote: u64, local: *mut u8, len: usize) -> io::Result<()> {
    vm_copy(pid, remote, local, len, false)
}

/// Copy `len` bytes at `local` here to `remote` in process `pid` at once,
/// not paced: the counterpart of [`read_now`] (the tensor plane writes a
/// reduced block into peers' results while it is in cache).
///
/// # Safety
/// `local` must be valid for reads of `len` bytes.
pub unsafe fn write_now(pid: u32, remote: u64, local: *const u8, len: usize) -> io::Result<()> {
    vm_copy(pid, remote, local as *mut u8, len, true)
}

/// Copy `len` bytes at `remote` in process `pid` into `local`.
pub fn read(pid: u32, remote: u64, local: *mut u8, len: usize) -> io::Result<()> {
    copy(pid, remote, local, len, false)
}

/// Copy `len` bytes from `local` to `remote` in process `pid`.
pub fn write(pid: u32, remote: u64, local: *const u8, len: usize) -> io::Result<()> {
    copy(pid, remote, local as *mut u8, len, true)
}

/// Whether an error means "not permitted / not available here" (fall back)
/// rather than a failure of this transfer.
pub fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM) | Some(libc::ENOSYS) | Some(libc::EACCES)
    )
}
