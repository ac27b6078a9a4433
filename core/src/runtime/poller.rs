//! The epoll set of this proc's connections: one descriptor that becomes
//! readable when any connection has something to read, and the list of
//! exactly those that do. A thread waiting on many connections (a
//! controller's) sleeps on this one descriptor and, woken, reads only the
//! connections that are ready, so its cost per wait follows the active
//! connections, not all of them. Level-triggered, like `poll`: a
//! connection not fully read is reported again.

use parking_lot::Mutex;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::HashMap;
use crate::conn::Conn;

/// At most this many ready connections are taken per look (the rest stay
/// ready and are reported by the next one).
const MAX_READY: usize = 256;

pub(super) struct Poller {
    epoll: OwnedFd,
    /// The connections in the set, by the token their events carry.
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_token: AtomicU64,
    len: AtomicUsize,
}

impl Poller {
    pub(super) fn new() -> io::Result<Poller> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Poller {
            // SAFETY: a fresh descriptor we own.
            epoll: unsafe { OwnedFd::from_raw_fd(fd) },
            conns: Mutex::new(HashMap::default()),
            next_token: AtomicU64::new(1),
            len: AtomicUsize::new(0),
        })
    }

    /// The epoll descriptor: readable while a connection in the set is.
    #[inline]
    pub(super) fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// How many connections are in the set.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Watch `conn` for reading.
    pub(super) fn add(&self, conn: &Arc<Conn>) {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let mut conns = self.conns.lock();
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: a valid epoll descriptor, socket descriptor and event.
        let r = unsafe { libc::epoll_ctl(self.fd(), libc::EPOLL_CTL_ADD, conn.fd(), &mut ev) };
        if r < 0 {
            // Only resource exhaustion gets here; the connection is then
            // read by the threads that poll each connection instead.
            tracing::warn!(peer = %conn.peer, error = %io::Error::last_os_error(), "epoll_ctl add");
        }
        conns.insert(token, conn.clone());
        self.len.store(conns.len(), Ordering::Relaxed);
    }

    /// Stop watching `conn` (before its socket is shut down: a shut-down
    /// socket stays readable, and level-triggered epoll would report it on
    /// every look).
    pub(super) fn remove(&self, conn: &Arc<Conn>) {
        let mut conns = self.conns.lock();
        let before = conns.len();
        conns.retain(|_, c| !Arc::ptr_eq(c, conn));
        if conns.len() != before {
            // SAFETY: valid descriptors; the event argument may be null for DEL.
            unsafe {
                libc::epoll_ctl(
                    self.fd(),
                    libc::EPOLL_CTL_DEL,
                    conn.fd(),
                    std::ptr::null_mut(),
                )
            };
        }
        self.len.store(conns.len(), Ordering::Relaxed);
    }

    /// Every connection in the set.
    pub(super) fn all(&self) -> Vec<Arc<Conn>> {
        self.conns.lock().values().cloned().collect()
    }

    /// The connections that have something to read (or were closed) now,
    /// without waiting: one system call, and work in the number of ready
    /// connections only.
    pub(super) fn ready(&self) -> Vec<Arc<Conn>> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; MAX_READY];
        // SAFETY: a valid epoll descriptor and an array of MAX_READY events.
        let n = unsafe {
            libc::epoll_wait(self.fd(), events.as_mut_ptr(), MAX_READY as libc::c_int, 0)
        };
        if n <= 0 {
            return Vec::new();
        }
        let conns = self.conns.lock();
        events[..n as usize]
            .iter()
            .filter_map(|e| {
                let token = e.u64;
                conns.get(&token).cloned()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    fn pair(name: &str) -> (Arc<Conn>, UnixStream) {
        let (a, b) = UnixStream::pair().expect("socketpair");
        (
            Arc::new(Conn::new(name.to_string(), a, Vec::new()).expect("conn")),
            b,
        )
    }

    #[test]
    fn only_the_connections_with_data_are_reported() {
        let poller = Poller::new().expect("epoll");
        let ends: Vec<_> = (0..40).map(|i| pair(&format!("p{i}"))).collect();
        for (c, _) in &ends {
            poller.add(c);
        }
        assert_eq!(poller.len(), 40);
        assert!(poller.ready().is_empty(), "idle connections were reported");
        for i in [3, 17, 39] {
            (&ends[i].1).write_all(b"x").expect("write");
        }
        let mut ready: Vec<String> = poller.ready().iter().map(|c| c.peer.clone()).collect();
        ready.sort();
        assert_eq!(ready, ["p17", "p3", "p39"]);
        // Level-triggered: unread data is reported again.
        assert_eq!(poller.ready().len(), 3);
        // A removed connection is not reported, even with data waiting.
        poller.remove(&ends[17].0);
        assert_eq!(poller.len(), 39);
        let mut ready: Vec<String> = poller.ready().iter().map(|c| c.peer.clone()).collect();
        ready.sort();
        assert_eq!(ready, ["p3", "p39"]);
        // A peer that hung up is reported (the reader then sees the end).
        ends[5]
            .1
            .shutdown(std::net::Shutdown::Both)
            .expect("shutdown");
        let mut ready: Vec<String> = poller.ready().iter().map(|c| c.peer.clone()).collect();
        ready.sort();
        assert_eq!(ready, ["p3", "p39", "p5"]);
    }
}
