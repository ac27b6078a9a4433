//! Accepting connections and authenticating them, on one thread
//! ("monarch-accept") for all of a runtime's listeners. It polls the
//! listeners and every connection still in its handshake together, and
//! advances each handshake (`auth::Acceptor`) as far as the bytes that
//! have arrived allow: no connection blocks it, none holds a thread.
//!
//! A handshake must be over within its deadline, counted from accept, and
//! the pending ones are capped per source and in total
//! ([`HandshakeLimits`]). Over a cap, an old pending connection is closed
//! to make room (see [`Pendings::admit`]): a connection that trickles its
//! bytes loses its place to a new one, while a peer that answers promptly
//! is done long before. Accepting goes in batches, so pending handshakes
//! advance between them. An authenticated connection is registered and
//! from then on read like any other (`io`).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::io::{poll_fds, pollin};
use super::{HashMap, Inner};
use crate::auth::{Acceptor, AuthError, Step};
use crate::conn::Conn;
use crate::limits::HandshakeLimits;
use crate::transport::{Listener, Stream};

/// Connections accepted from one listener before the pending handshakes
/// are looked at again.
const ACCEPT_BATCH: usize = 16;

/// How long accepting pauses after `accept` failed (out of descriptors:
/// the connection waits in the kernel's queue meanwhile).
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);

/// Connections closed for the deadline or the caps are logged together,
/// at most this often.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Where a connection comes from, for the per-source cap.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Source {
    /// A Unix socket: a process of this user on this host.
    Local,
    /// An IPv4 address, or the /64 prefix of an IPv6 address.
    Ip(IpAddr),
}

/// The source of a connection from `ip` (None: a Unix socket).
fn source_of(ip: Option<IpAddr>) -> Source {
    match ip {
        None => Source::Local,
        Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => Source::Ip(v4.into()),
            None => {
                let mut prefix = v6.octets();
                prefix[8..].fill(0);
                Source::Ip(IpAddr::from(prefix))
            }
        },
        Some(ip) => Source::Ip(ip),
    }
}

/// One connection in its handshake.
struct Pending {
    stream: Stream,
    source: Source,
    deadline: Instant,
    acceptor: Acceptor,
    /// Bytes received and not yet taken by the acceptor.
    input: Vec<u8>,
    /// Bytes for the connector not yet written.
    out: Vec<u8>,
    /// The socket took no more of `out`: wait until it is writable.
    blocked_on_write: bool,
    /// The identity the connector proved, once `out` is written.
    peer: Option<String>,
}

impl Pending {
    /// Go as far as the socket allows without blocking: Some(identity)
    /// once the connector has authenticated.
    fn advance(&mut self, secret: &[u8], my_id: &str) -> Result<Option<String>, AuthError> {
        loop {
            if !self.flush()? {
                return Ok(None);
            }
            if let Some(peer) = self.peer.take() {
                return Ok(Some(peer));
            }
            match self.acceptor.advance(secret, my_id, &self.input)? {
                Step::Need(total) => {
                    if !self.read_more(total)? {
                        return Ok(None);
                    }
                }
                Step::Reply { consumed, reply } => {
                    self.input.drain(..consumed);
                    self.out = reply;
                }
                Step::Done {
                    consumed,
                    reply,
                    peer,
                } => {
                    self.input.drain(..consumed);
                    self.out = reply;
                    self.peer = Some(peer);
                }
            }
        }
    }

    /// Read what has arrived, up to `total` input bytes (never past the
    /// message the acceptor waits for: what follows the handshake stays in
    /// the socket for the connection's reader). False: nothing yet.
    fn read_more(&mut self, total: usize) -> Result<bool, AuthError> {
        let have = self.input.len();
        self.input.resize(total.max(have + 1), 0);
        let r = loop {
            match self.stream.read(&mut self.input[have..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r,
            }
        };
        self.input.truncate(have + r.as_ref().map_or(0, |n| *n));
        match r {
            Ok(0) => Err(AuthError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Write what is waiting (for TLS, also the session's own records).
    /// False: the socket is full.
    fn flush(&mut self) -> Result<bool, AuthError> {
        let done = match &self.stream {
            Stream::Tls(tls) => {
                let (taken, waiting) = tls.flush_tls(&self.out)?;
                if taken {
                    self.out.clear();
                }
                !waiting
            }
            plain => {
                while !self.out.is_empty() {
                    let bufs = [io::IoSlice::new(&self.out)];
                    match crate::socket::send_vectored(plain.as_raw_fd(), &bufs) {
                        Ok(n) => {
                            self.out.drain(..n);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e.into()),
                    }
                }
                self.out.is_empty()
            }
        };
        self.blocked_on_write = !done;
        Ok(done)
    }

    fn pollfd(&self) -> libc::pollfd {
        let mut p = pollin(self.stream.as_raw_fd());
        if self.blocked_on_write {
            p.events |= libc::POLLOUT;
        }
        p
    }
}

/// Connections closed for the deadline or the caps since the last report.
#[derive(Default)]
struct Shed {
    expired: usize,
    evicted: usize,
    since: Option<Instant>,
}

/// The pending handshakes, oldest first (so also by deadline).
struct Pendings {
    limits: HandshakeLimits,
    queue: VecDeque<Pending>,
    per_source: HashMap<Source, usize>,
    shed: Shed,
}

impl Pendings {
    fn new(limits: HandshakeLimits) -> Pendings {
        Pendings {
            limits,
            queue: VecDeque::new(),
            per_source: Default::default(),
            shed: Shed::default(),
        }
    }

    fn forget(&mut self, p: &Pending) {
        if let Some(n) = self.per_source.get_mut(&p.source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&p.source);
            }
        }
    }

    /// Take a connection in, closing pending ones the caps leave no room
    /// for: over the per-source cap, that source's oldest; over the total
    /// cap, the oldest of the source with the most pending connections
    /// (so a few sources cannot crowd out the others). The caller advances
    /// the new one, and queues it while it is pending.
    fn admit(&mut self, stream: Stream, now: Instant) -> Pending {
        let source = source_of(stream.peer_ip());
        self.admit_from(stream, source, now)
    }

    fn admit_from(&mut self, stream: Stream, source: Source, now: Instant) -> Pending {
        let count = self.per_source.entry(source).or_insert(0);
        *count += 1;
        if *count > self.limits.max_per_source {
            if let Some(i) = self.queue.iter().position(|p| p.source == source) {
                self.evict(i);
            }
        }
        if self.queue.len() >= self.limits.max_pending {
            let most = self.per_source.values().copied().max().unwrap_or(0);
            let i = self
                .queue
                .iter()
                .position(|p| self.per_source.get(&p.source) == Some(&most))
                .unwrap_or(0);
            self.evict(i);
        }
        Pending {
            stream,
            source,
            deadline: now + self.limits.timeout,
            acceptor: Acceptor::new(),
            input: Vec::new(),
            out: Vec::new(),
            blocked_on_write: false,
            peer: None,
        }
    }

    fn evict(&mut self, i: usize) {
        if let Some(p) = self.queue.remove(i) {
            tracing::debug!(from = %p.stream.peer_desc(), "pending handshake closed: over the cap");
            self.forget(&p);
            self.shed.evicted += 1;
            self.shed.since.get_or_insert_with(Instant::now);
        }
    }

    /// Close the handshakes whose deadline has passed.
    fn expire(&mut self, now: Instant) {
        while self.queue.front().is_some_and(|p| p.deadline <= now) {
            let p = self.queue.pop_front().expect("front");
            tracing::debug!(from = %p.stream.peer_desc(), "pending handshake closed: deadline passed");
            self.forget(&p);
            self.shed.expired += 1;
            self.shed.since.get_or_insert(now);
        }
    }

    /// When the next thing is due: a deadline, or the report.
    fn next_due(&self) -> Option<Instant> {
        let deadline = self.queue.front().map(|p| p.deadline);
        let report = self.shed.since.map(|t| t + REPORT_EVERY);
        deadline.into_iter().chain(report).min()
    }

    /// Log what the deadline and the caps closed, at most every `REPORT_EVERY`.
    fn report(&mut self, now: Instant) {
        let Some(since) = self.shed.since else {
            return;
        };
        if now < since + REPORT_EVERY {
            return;
        }
        let l = &self.limits;
        tracing::warn!(
            past_deadline = self.shed.expired,
            over_caps = self.shed.evicted,
            seconds = REPORT_EVERY.as_secs(),
            "closed unauthenticated connections (handshake deadline {:?}, at most {} pending, {} per source)",
            l.timeout,
            l.max_pending,
            l.max_per_source,
        );
        self.shed = Shed::default();
    }
}

impl Inner {
    /// The accept thread: accepts on every listener and drives every
    /// pending handshake until the runtime stops.
    pub(super) fn accept_loop(self: Arc<Self>) {
        let mut pending = Pendings::new(HandshakeLimits::from_env());
        let mut paused_until: Option<Instant> = None;
        let mut fds: Vec<libc::pollfd> = Vec::new();
        loop {
            if self.lifecycle.is_stopped() {
                return;
            }
            let now = Instant::now();
            pending.expire(now);
            pending.report(now);
            if paused_until.is_some_and(|t| now >= t) {
                paused_until = None;
            }
            let listeners = match paused_until {
                None => self.listeners.all(),
                Some(_) => Vec::new(),
            };
            fds.clear();
            fds.push(pollin(self.listeners.changed_fd()));
            fds.extend(listeners.iter().map(|l| pollin(l.as_raw_fd())));
            fds.extend(pending.queue.iter().map(Pending::pollfd));
            let due = pending.next_due().into_iter().chain(paused_until).min();
            poll_fds(&mut fds, due.map(|t| t.saturating_duration_since(now)));
            if self.lifecycle.is_stopped() {
                return;
            }
            if fds[0].revents != 0 {
                self.listeners.seen_change();
            }
            // Handshakes first, then new connections: the caps then close
            // the oldest of what is still pending.
            let ready: Vec<bool> = fds[1 + listeners.len()..]
                .iter()
                .map(|p| p.revents != 0)
                .collect();
            self.advance_ready(&mut pending, &ready);
            for (l, p) in listeners.iter().zip(&fds[1..]) {
                if p.revents != 0 && !self.accept_batch(l, &mut pending) {
                    paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                }
            }
        }
    }

    /// Advance the pending handshakes whose sockets `poll` found ready.
    fn advance_ready(self: &Arc<Self>, pending: &mut Pendings, ready: &[bool]) {
        let queue = std::mem::take(&mut pending.queue);
        for (i, p) in queue.into_iter().enumerate() {
            if ready.get(i).copied().unwrap_or(false) {
                self.advance_handshake(pending, p);
            } else {
                pending.queue.push_back(p);
            }
        }
    }

    /// Advance one handshake taken out of the queue: back in while it is
    /// pending, registered once authenticated, dropped on failure.
    fn advance_handshake(self: &Arc<Self>, pending: &mut Pendings, mut p: Pending) {
        match p.advance(self.id.token.as_bytes(), &self.id.addr) {
            Ok(None) => pending.queue.push_back(p),
            Ok(Some(peer)) => {
                pending.forget(&p);
                self.authenticated(p, peer);
            }
            Err(e) => {
                pending.forget(&p);
                if matches!(e, AuthError::BadMac) && p.out.is_empty() {
                    // A wrong proof is answered: the connector learns its
                    // one guess failed. Best effort, the socket is
                    // non-blocking and closed right after.
                    let _ = p.stream.write(&[crate::auth::REFUSED]);
                }
                tracing::warn!(from = %p.stream.peer_desc(), error = %e, "dropping unauthenticated connection");
            }
        }
    }

    /// Accept up to `ACCEPT_BATCH` connections on `l`, starting each one's
    /// handshake. False if accepting failed (other than for lack of
    /// connections).
    fn accept_batch(self: &Arc<Self>, l: &Listener, pending: &mut Pendings) -> bool {
        for _ in 0..ACCEPT_BATCH {
            let stream = match l.accept() {
                Ok(s) => s,
                Err(e) => {
                    return match e.kind() {
                        io::ErrorKind::WouldBlock
                        | io::ErrorKind::Interrupted
                        | io::ErrorKind::ConnectionAborted => true,
                        _ => {
                            if !self.lifecycle.is_stopped() {
                                if super::setup_errors::is_exhaustion(&e) {
                                    self.setup_errors.accept_failed(&e);
                                }
                                tracing::warn!(error = %e, "accept failed");
                            }
                            false
                        }
                    };
                }
            };
            if let Err(e) = stream.set_nonblocking(true) {
                tracing::warn!(error = %e, "cannot make an accepted socket non-blocking");
                continue;
            }
            // Its first message may be there already.
            let p = pending.admit(stream, Instant::now());
            self.advance_handshake(pending, p);
        }
        true
    }

    /// Register an authenticated connection; from now on it is read like
    /// any other.
    fn authenticated(self: &Arc<Self>, p: Pending, peer: String) {
        let conn = match Conn::new_or_give_back(peer.clone(), p.stream, p.input) {
            Ok(c) => Arc::new(c),
            Err((e, stream)) => {
                // Recorded before the peer sees the connection close.
                self.setup_errors.peer_failed(&peer, &e);
                drop(stream);
                tracing::warn!(%peer, error = %e, "cannot set up connection");
                return;
            }
        };
        self.peers.register(&peer, None, &conn);
        self.conns_changed();
        self.read_held_data(conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn ip(s: &str) -> Source {
        Source::Ip(s.parse().unwrap())
    }

    fn limits(max_pending: usize, max_per_source: usize) -> HandshakeLimits {
        HandshakeLimits {
            timeout: Duration::from_secs(60),
            max_pending,
            max_per_source,
        }
    }

    /// Admit a connection from `source` and queue it; the other end is
    /// kept in `ends` (tagged) so a closed one can be told apart.
    fn admit(p: &mut Pendings, ends: &mut Vec<(&'static str, UnixStream)>, tag: &'static str) {
        let (a, b) = UnixStream::pair().unwrap();
        let source = ip(tag.split('#').next().unwrap());
        let pending = p.admit_from(Stream::Unix(a), source, Instant::now());
        p.queue.push_back(pending);
        ends.push((tag, b));
    }

    /// The tags of the connections still held (their other end open).
    fn held(ends: &[(&'static str, UnixStream)]) -> Vec<&'static str> {
        ends.iter()
            .filter(|(_, b)| {
                b.set_nonblocking(true).unwrap();
                let r = (&*b).read(&mut [0u8; 1]);
                matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            })
            .map(|(t, _)| *t)
            .collect()
    }

    #[test]
    fn sources_are_addresses_ipv6_prefixes_or_this_host() {
        assert_eq!(source_of(None), Source::Local);
        assert_eq!(source_of(Some("10.0.0.1".parse().unwrap())), ip("10.0.0.1"));
        assert_eq!(
            source_of(Some("::ffff:10.0.0.1".parse().unwrap())),
            ip("10.0.0.1")
        );
        assert_eq!(
            source_of(Some("2001:db8:1:2:aaaa::1".parse().unwrap())),
            source_of(Some("2001:db8:1:2:bbbb::2".parse().unwrap()))
        );
        assert_ne!(
            source_of(Some("2001:db8:1:2::1".parse().unwrap())),
            source_of(Some("2001:db8:1:3::1".parse().unwrap()))
        );
    }

    #[test]
    fn over_the_source_cap_that_sources_oldest_is_closed() {
        let mut p = Pendings::new(limits(100, 2));
        let mut ends = Vec::new();
        for tag in ["10.0.0.1#1", "10.0.0.2#1", "10.0.0.1#2", "10.0.0.1#3"] {
            admit(&mut p, &mut ends, tag);
        }
        assert_eq!(held(&ends), ["10.0.0.2#1", "10.0.0.1#2", "10.0.0.1#3"]);
        assert_eq!(p.per_source[&ip("10.0.0.1")], 2);
        assert_eq!(p.shed.evicted, 1);
    }

    #[test]
    fn over_the_total_cap_the_busiest_sources_oldest_is_closed() {
        let mut p = Pendings::new(limits(4, 100));
        let mut ends = Vec::new();
        for tag in ["10.0.0.2#1", "10.0.0.1#1", "10.0.0.1#2", "10.0.0.1#3"] {
            admit(&mut p, &mut ends, tag);
        }
        // A fifth, from a third source: the busiest source (10.0.0.1)
        // gives way, not the older connection from 10.0.0.2.
        admit(&mut p, &mut ends, "10.0.0.3#1");
        assert_eq!(
            held(&ends),
            ["10.0.0.2#1", "10.0.0.1#2", "10.0.0.1#3", "10.0.0.3#1"]
        );
        // When every source has one, the oldest of all gives way.
        let mut p = Pendings::new(limits(2, 100));
        let mut ends = Vec::new();
        for tag in ["10.0.0.1#1", "10.0.0.2#1", "10.0.0.3#1"] {
            admit(&mut p, &mut ends, tag);
        }
        assert_eq!(held(&ends), ["10.0.0.2#1", "10.0.0.3#1"]);
        assert_eq!(p.queue.len(), 2);
    }

    #[test]
    fn handshakes_past_their_deadline_are_closed_oldest_first() {
        let mut p = Pendings::new(limits(100, 100));
        let mut ends = Vec::new();
        for tag in ["10.0.0.1#1", "10.0.0.2#1"] {
            admit(&mut p, &mut ends, tag);
        }
        let first = p.queue[0].deadline;
        p.queue[1].deadline = first + Duration::from_secs(1);
        p.expire(first);
        assert_eq!(held(&ends), ["10.0.0.2#1"]);
        assert_eq!(p.next_due(), Some(p.queue[0].deadline));
        assert!(!p.per_source.contains_key(&ip("10.0.0.1")));
    }
}
