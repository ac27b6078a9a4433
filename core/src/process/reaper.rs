//! Reaping children: one thread for all of them, sleeping in `epoll` on a
//! pidfd per child (a pidfd becomes readable when its process exits). So
//! a controller with a thousand children has one reaper thread, not one
//! per child. Without pidfds (a kernel before 5.3), a child is waited for
//! on a thread of its own.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, OnceLock};

use super::{pidfd_open, Child, ExitInfo};
use crate::error::{Error, Result};

/// What runs once a child has been reaped.
pub(super) type OnExit = Box<dyn FnOnce(Arc<Child>, ExitInfo) + Send>;

/// A child being waited for.
struct Watched {
    /// Kept open until the child is reaped (closing it unregisters it).
    _pidfd: OwnedFd,
    process: std::process::Child,
    info: Arc<Child>,
    on_exit: OnExit,
}

struct Reaper {
    epoll: OwnedFd,
    /// The children waited for, by pid (their epoll events' token).
    children: Mutex<HashMap<u32, Watched>>,
}

/// The process's reaper, started on first use (None: no epoll).
fn reaper() -> Option<&'static Reaper> {
    static REAPER: OnceLock<Option<&'static Reaper>> = OnceLock::new();
    *REAPER.get_or_init(|| {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        let reaper: &'static Reaper = Box::leak(Box::new(Reaper {
            // SAFETY: a fresh descriptor we own.
            epoll: unsafe { OwnedFd::from_raw_fd(fd) },
            children: Mutex::new(HashMap::new()),
        }));
        std::thread::Builder::new()
            .name("monarch-reaper".into())
            .spawn(move || reaper.run())
            .ok()?;
        Some(reaper)
    })
}

fn exit_info(status: io::Result<std::process::ExitStatus>) -> ExitInfo {
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => ExitInfo::Code(c),
            (None, Some(sig)) => ExitInfo::Signal(sig),
            _ => ExitInfo::Code(-1),
        },
        Err(_) => ExitInfo::Code(-1),
    }
}

/// Reap `process` when it exits: record its exit in `info`, then run
/// `on_exit`.
pub(super) fn watch(process: std::process::Child, info: Arc<Child>, on_exit: OnExit) -> Result<()> {
    // The child is not reaped before we are done here, so its pid cannot
    // name another process yet.
    let pidfd = match (reaper(), pidfd_open(process.id())) {
        (Some(r), Ok(fd)) => (r, fd),
        _ => return wait_on_thread(process, info, on_exit),
    };
    let (reaper, pidfd) = pidfd;
    let pid = process.id();
    let raw = pidfd.as_raw_fd();
    let mut children = reaper.children.lock();
    children.insert(
        pid,
        Watched {
            _pidfd: pidfd,
            process,
            info,
            on_exit,
        },
    );
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: pid as u64,
    };
    // SAFETY: valid epoll and pidfd descriptors and event.
    if unsafe { libc::epoll_ctl(reaper.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, raw, &mut ev) } < 0 {
        let w = children.remove(&pid).expect("just inserted");
        drop(children);
        return wait_on_thread(w.process, w.info, w.on_exit);
    }
    Ok(())
}

impl Reaper {
    fn run(&self) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        loop {
            // SAFETY: a valid epoll descriptor and an array of 64 events.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as libc::c_int,
                    -1,
                )
            };
            for e in &events[..n.max(0) as usize] {
                let pid = e.u64 as u32;
                // Closing the pidfd (dropping `w`) takes it out of the set.
                let Some(mut w) = self.children.lock().remove(&pid) else {
                    continue;
                };
                let exit = exit_info(w.process.wait());
                w.info.exit.complete(exit.clone());
                (w.on_exit)(w.info, exit);
            }
        }
    }
}

/// Without pidfds: wait for `process` on a thread of its own.
fn wait_on_thread(
    mut process: std::process::Child,
    info: Arc<Child>,
    on_exit: OnExit,
) -> Result<()> {
    std::thread::Builder::new()
        .name(format!("monarch-reaper-{}", info.pid))
        .spawn(move || {
            let exit = exit_info(process.wait());
            info.exit.complete(exit.clone());
            on_exit(info, exit);
        })
        .map_err(|e| Error::io("cannot start reaper thread", e))?;
    Ok(())
}
