//! How threads wait and how the sockets get read.
//!
//! Threads that wait inside the runtime read its sockets themselves: they
//! spin briefly (reading now and then), then sleep in `poll` on their own
//! wake-up eventfd *and* all connections (with many connections, the epoll
//! set of them: `poller`), so a reply or message is read by the thread
//! that wants it. The I/O thread ("monarch-io") reads only while
//! nobody has been waiting for a while, or while a foreign event loop
//! watches the notification fd; it also guarantees that batched frames are
//! written within `FLUSH_DELAY`. See docs/architecture.md, "Waiting".

use crate::eventfd::{self, EventFd};
use parking_lot::Mutex;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Inner, BURST};
use crate::completion::{spin_until, SpinPolicy};
use crate::conn::Conn;
use crate::frame::FrameError;

/// Threads parked in [`Inner::park`], each on its own eventfd.
pub(super) struct Parking {
    pub(super) fds: Mutex<Vec<RawFd>>,
    pub(super) count: AtomicUsize,
}

thread_local! {
    /// This thread's wake-up descriptor for parking.
    static PARK_FD: Option<EventFd> = EventFd::new().ok();
}

/// State shared between waiting threads and the runtime's I/O thread.
///
/// Threads that wait inside the runtime read its sockets themselves. The
/// I/O thread ("monarch-io") reads them only when nobody has been waiting
/// for a while (`IO_IDLE_TICK`) or when a foreign event loop watches the
/// notification fd (asked for it since a thread last waited inside);
/// otherwise it sleeps, so a message wakes one thread, not two. A waiter
/// that arrives while the I/O thread sits in `poll` kicks it back to
/// sleep.
pub(super) struct Io {
    pub(super) kick: EventFd,
    /// Threads inside `wait_until`.
    pub(super) active: AtomicUsize,
    /// When a thread last left `wait_until` (ns since `epoch`; 0: never).
    pub(super) last_active_ns: AtomicU64,
    /// The I/O thread is (about to be) in `poll` on the sockets.
    pub(super) polling: AtomicBool,
    /// The I/O thread sleeps longer than `IO_IDLE_TICK` because a waiter
    /// has been inside `wait_until` for that long; the last waiter to
    /// leave kicks it (so an idle proc wakes about once a second, not a
    /// hundred times).
    pub(super) deep: AtomicBool,
    pub(super) epoch: Instant,
}

/// Batched frames wait at most about this long before they are written.
pub(super) const FLUSH_DELAY: Duration = Duration::from_micros(200);

/// A spinning waiter reads the sockets on every this many turns.
pub(super) const PUMP_EVERY: u32 = 4;

/// With more connections than this, a spinning waiter first asks `poll`
/// which ones have data (one syscall) instead of reading each.
pub(super) const POLL_FIRST_ABOVE: usize = 2;

/// With more connections than this, threads sleep on the epoll set of
/// connections (one descriptor) and read only those it reports ready,
/// instead of polling every connection: the cost of a wait follows the
/// active connections. With this many or fewer, one `poll` over them all
/// costs less than `poll` plus `epoll_wait`.
pub(super) const EPOLL_ABOVE: usize = 16;

/// What a sleeping thread watched, to read what woke it.
enum Watched {
    /// Each connection (same order as the `pollfd`s after the first).
    Each(Vec<Arc<Conn>>, Vec<libc::pollfd>),
    /// The epoll set; whether it polled readable.
    Set(bool),
}

/// How long no thread must have waited before the I/O thread reads.
pub(super) const IO_IDLE_TICK: Duration = Duration::from_millis(10);

/// The longest the I/O thread sleeps while a thread keeps waiting (it
/// backs off from `IO_IDLE_TICK` to this; a leaving waiter kicks it).
pub(super) const IO_DEEP_TICK: Duration = Duration::from_secs(1);

pub(super) fn pollin(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// `ppoll` with an optional timeout (None: forever). Errors (EINTR) just
/// return: every caller re-checks its condition.
pub(super) fn poll_fds(fds: &mut [libc::pollfd], timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    // SAFETY: a valid pollfd array and an optional timespec.
    unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            ts.as_ref().map_or(std::ptr::null(), |t| t as *const _),
            std::ptr::null(),
        )
    };
}

impl Inner {
    /// Wait until `ready()` or the deadline, reading our sockets meanwhile:
    /// spin (when `policy` says it pays), then sleep in `poll`.
    pub(super) fn wait_until(
        self: &Arc<Self>,
        policy: &SpinPolicy,
        deadline: Option<Instant>,
        ready: &dyn Fn() -> bool,
    ) -> bool {
        if ready() {
            return true;
        }
        // Whatever is batched goes out before anyone sleeps on an answer,
        // and this thread's burst of sends is over. (A wait that needs no
        // waiting, like collecting an already complete future in a window
        // of pipelined calls, ends neither.)
        self.flush_deferred(None);
        BURST.with(|b| b.set((0, 0)));
        if ready() {
            return true;
        }
        let start = Instant::now();
        self.io.active.fetch_add(1, Ordering::SeqCst);
        // This thread reads for the descriptor's watcher too (its dispatch
        // signals it) until the descriptor is asked for again.
        self.notifier.unwatch();
        self.kick_io();
        // While a gather misses at least as many replies as there are CPUs,
        // wait asleep: the procs computing them need those CPUs.
        let budget = if self.many_replies_missing() {
            Duration::ZERO
        } else {
            policy.budget()
        };
        // Without a spin, `park` polls the sockets itself: reading them
        // first would only cost a syscall per wait (EAGAIN).
        let ok = (!budget.is_zero() && self.spin_for(budget, deadline, ready))
            || self.park(deadline, ready);
        let now = self.io.epoch.elapsed().as_nanos().max(1) as u64;
        self.io.last_active_ns.store(now, Ordering::SeqCst);
        // Pairs with the I/O thread's `deep` store then `active` load: either
        // it sees us gone, or we see it in its long sleep and wake it.
        if self.io.active.fetch_sub(1, Ordering::SeqCst) == 1 && self.io.deep.load(Ordering::SeqCst)
        {
            self.io.kick.signal();
        }
        if ok {
            policy.record(start.elapsed());
        }
        ok
    }

    /// The I/O thread: reads the sockets while no other thread does.
    pub(super) fn io_loop(self: Arc<Self>) {
        let kick = self.io.kick.fd();
        // How long to sleep while a waiter stays inside `wait_until`.
        let mut tick = IO_IDLE_TICK;
        loop {
            if self.lifecycle.is_stopped() {
                return;
            }
            // Batched frames go out after FLUSH_DELAY at the latest.
            self.flush_deferred(Some(FLUSH_DELAY));
            let flush_wait = self.deferred.load(Ordering::SeqCst).then_some(FLUSH_DELAY);
            let watched = self.notifier.is_watched();
            if !watched {
                let idle = self.idle_for();
                if idle < IO_IDLE_TICK {
                    // Someone is (or just was) waiting, and reading for us.
                    let mut t = IO_IDLE_TICK - idle;
                    if idle.is_zero() {
                        // Still waiting since our last look: back off, but
                        // announce it first so the waiter's exit kicks us
                        // (see `wait_until`). The first tick stays short and
                        // silent, so busy procs pay no kick per wait.
                        if tick > IO_IDLE_TICK {
                            self.io.deep.store(true, Ordering::SeqCst);
                            if self.io.active.load(Ordering::SeqCst) > 0 {
                                t = tick;
                            }
                        }
                        tick = (tick * 2).min(IO_DEEP_TICK);
                    } else {
                        tick = IO_IDLE_TICK;
                    }
                    let mut fds = [pollin(kick)];
                    poll_fds(&mut fds, Some(t.min(flush_wait.unwrap_or(Duration::MAX))));
                    self.io.deep.store(false, Ordering::SeqCst);
                    if fds[0].revents != 0 {
                        eventfd::drain(kick);
                    }
                    continue;
                }
            }
            tick = IO_IDLE_TICK;
            self.io.polling.store(true, Ordering::SeqCst);
            if !self.notifier.is_watched() && self.io.active.load(Ordering::SeqCst) > 0 {
                self.io.polling.store(false, Ordering::SeqCst);
                continue;
            }
            let (kicked, watched) = self.sleep_on_conns(kick, flush_wait);
            self.io.polling.store(false, Ordering::SeqCst);
            if kicked {
                eventfd::drain(kick);
            }
            self.pump_watched(watched);
        }
    }

    /// How long no thread has been waiting inside the runtime (zero while
    /// one is).
    pub(super) fn idle_for(&self) -> Duration {
        if self.io.active.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        let last = self.io.last_active_ns.load(Ordering::SeqCst);
        if last == 0 {
            return Duration::MAX;
        }
        self.io
            .epoch
            .elapsed()
            .saturating_sub(Duration::from_nanos(last))
    }

    /// A connection was added: every thread sleeping in `poll` must
    /// rebuild its descriptor list, or bytes on the new one go unread.
    pub(super) fn conns_changed(&self) {
        self.wake_parked();
        self.kick_io();
    }

    /// Someone started watching the notification descriptor: get the I/O
    /// thread out of its sleep to read the sockets for them.
    pub(super) fn watch_started(&self) {
        self.io.kick.signal();
    }

    /// Get the I/O thread out of `poll` (to sleep, or to re-read the
    /// connection list).
    pub(super) fn kick_io(&self) {
        if self.io.polling.load(Ordering::SeqCst) {
            self.io.kick.signal();
        }
    }

    /// Write batched frames (those batched for at least `min_age`, or all)
    /// as far as the sockets take them. Never waits for a writer lock: its
    /// holder writes the batched frames before its own, and it may be stuck
    /// on a peer that stopped reading (a SIGSTOPped controller), which must
    /// not stop this thread from serving the others.
    pub(super) fn flush_deferred(self: &Arc<Self>, min_age: Option<Duration>) {
        if !self.deferred.swap(false, Ordering::SeqCst) {
            return;
        }
        let mut left = false;
        for conn in self.conn_list() {
            match conn.flush(min_age) {
                Ok(more) => left |= more,
                // The reader side notices the broken connection.
                Err(e) => tracing::debug!(peer = %conn.peer, error = %e, "flush failed"),
            }
        }
        if left {
            self.deferred.store(true, Ordering::SeqCst);
            if min_age.is_none() {
                // What is left goes out from the I/O thread.
                self.io.kick.signal();
            }
        }
    }

    pub(super) fn conn_list(&self) -> Vec<Arc<Conn>> {
        self.peers.list()
    }

    /// A new connection may hold the peer's first frames already (taken
    /// by its handshake's last read into the TLS session), which no
    /// `poll` on the socket would report: read them now, on a thread of
    /// their own (reading dispatches, which may block on sends). Both
    /// ends need this: the acceptor's and the connector's last handshake
    /// read can each take frames sent right after it.
    pub(super) fn read_held_data(self: &Arc<Self>, conn: Arc<Conn>) {
        if !conn.holds_data() {
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("monarch-conn".into())
            .spawn(move || me.drain_conn(&conn));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start a thread to read a new connection");
        }
    }

    /// Read what one connection has ready (waiting for its reader lock).
    pub(super) fn drain_conn(self: &Arc<Self>, conn: &Arc<Conn>) {
        let result = {
            let mut r = conn.reader.lock();
            r.drain(&mut |f| self.dispatch(&conn.peer, f))
        };
        if let Err(e) = result {
            self.conn_failed(conn, e);
        }
    }

    /// Read whatever our connections have ready. Connections another
    /// thread is reading are skipped (it dispatches in order for us).
    pub(super) fn pump(self: &Arc<Self>) {
        for conn in self.conn_list() {
            self.try_drain(&conn);
        }
    }

    /// Read one connection unless another thread is reading it.
    fn try_drain(self: &Arc<Self>, conn: &Arc<Conn>) {
        let result = match conn.reader.try_lock() {
            Some(mut r) => r.drain(&mut |f| self.dispatch(&conn.peer, f)),
            None => return,
        };
        if let Err(e) = result {
            self.conn_failed(conn, e);
        }
    }

    /// `pump`, costing one syscall when nothing arrived: with several
    /// connections (a controller's), ask `poll` (or, with many, the epoll
    /// set) which ones have something (or were closed) and read only
    /// those, instead of one read per connection.
    pub(super) fn pump_ready(self: &Arc<Self>) {
        if self.peers.poller.len() > EPOLL_ABOVE {
            self.pump_epoll();
            return;
        }
        let conns = self.conn_list();
        if conns.len() <= POLL_FIRST_ABOVE {
            for conn in &conns {
                self.try_drain(conn);
            }
            return;
        }
        let mut fds: Vec<libc::pollfd> = conns.iter().map(|c| pollin(c.fd())).collect();
        poll_fds(&mut fds, Some(Duration::ZERO));
        self.pump_polled(&conns, &fds);
    }

    /// Read the connections the epoll set reports ready.
    fn pump_epoll(self: &Arc<Self>) {
        for conn in self.peers.poller.ready() {
            self.try_drain(&conn);
        }
    }

    /// Sleep until `own` is signalled, a connection has something to read
    /// or `timeout` passes: in `poll` over `own` and every connection, or,
    /// with many connections, over `own` and the epoll set. Returns
    /// whether `own` was signalled, and what to read.
    fn sleep_on_conns(&self, own: RawFd, timeout: Option<Duration>) -> (bool, Watched) {
        if self.peers.poller.len() > EPOLL_ABOVE {
            let mut fds = [pollin(own), pollin(self.peers.poller.fd())];
            poll_fds(&mut fds, timeout);
            return (fds[0].revents != 0, Watched::Set(fds[1].revents != 0));
        }
        let conns = self.conn_list();
        let mut fds = vec![pollin(own)];
        fds.extend(conns.iter().map(|c| pollin(c.fd())));
        poll_fds(&mut fds, timeout);
        (fds[0].revents != 0, Watched::Each(conns, fds))
    }

    /// Read what `sleep_on_conns` reported.
    fn pump_watched(self: &Arc<Self>, watched: Watched) {
        match watched {
            Watched::Each(conns, fds) => self.pump_polled(&conns, &fds[1..]),
            Watched::Set(true) => self.pump_epoll(),
            Watched::Set(false) => {}
        }
    }

    /// Read the connections whose `fds` entry (same order) polled ready.
    /// One that did not is left alone: `poll` is level-triggered, so
    /// anything arriving later shows up in the next `poll`.
    pub(super) fn pump_polled(self: &Arc<Self>, conns: &[Arc<Conn>], fds: &[libc::pollfd]) {
        for (conn, fd) in conns.iter().zip(fds) {
            if fd.revents != 0 {
                self.try_drain(conn);
            }
        }
    }

    pub(super) fn conn_failed(&self, conn: &Arc<Conn>, e: FrameError) {
        let reason = match e {
            FrameError::Closed => "connection closed".to_string(),
            e => {
                if !self.lifecycle.is_stopped() && !conn.is_closed() {
                    tracing::warn!(peer = %conn.peer, error = %e, "dropping connection");
                }
                e.to_string()
            }
        };
        self.conn_ended(conn, reason);
    }

    /// Wake every parked thread so it re-checks what it waits for.
    pub(super) fn wake_parked(&self) {
        // Pairs with the registration in `park`: either the parked thread
        // sees the state change, or we see it registered.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.parking.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        for fd in self.parking.fds.lock().iter() {
            // A parked thread's own eventfd stays registered, hence open,
            // until that thread unparks.
            eventfd::signal(*fd);
        }
    }

    /// Block until `ready()` or the deadline, sleeping in `poll` on this
    /// thread's wake descriptor *and* our connections, so a message that
    /// arrives is read by this thread directly (one wake-up, not a reader
    /// thread's plus ours). Returns `ready()`.
    pub(super) fn park(
        self: &Arc<Self>,
        deadline: Option<Instant>,
        ready: &dyn Fn() -> bool,
    ) -> bool {
        let Some(own) = PARK_FD.with(|f| f.as_ref().map(|f| f.fd())) else {
            // No eventfd for this thread: fall back to short sleeps.
            while !ready() && deadline.is_none_or(|d| Instant::now() < d) {
                std::thread::sleep(Duration::from_micros(200));
                self.pump();
            }
            return ready();
        };
        loop {
            if ready() {
                return true;
            }
            let timeout = match deadline {
                None => None,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return ready();
                    }
                    Some(d - now)
                }
            };
            {
                let mut fds = self.parking.fds.lock();
                fds.push(own);
                self.parking.count.fetch_add(1, Ordering::SeqCst);
            }
            // Re-check after registering: a wake-up sent before we
            // registered would otherwise be lost.
            let done = ready();
            // Only a signalled eventfd needs its counter reset (a read of
            // an unsignalled one is a wasted syscall per wake-up). Without
            // a poll we cannot tell, so reset it to be safe.
            let mut signalled = true;
            let mut polled = None;
            if !done {
                let (woken, watched) = self.sleep_on_conns(own, timeout);
                signalled = woken;
                polled = Some(watched);
            }
            {
                let mut fds = self.parking.fds.lock();
                if let Some(i) = fds.iter().position(|f| *f == own) {
                    fds.swap_remove(i);
                }
                self.parking.count.fetch_sub(1, Ordering::SeqCst);
            }
            if signalled {
                eventfd::drain(own);
            }
            if done {
                return true;
            }
            match polled {
                // Read what woke us (a wake-up of our own eventfd means
                // another thread changed something: re-check first).
                Some(watched) => self.pump_watched(watched),
                None => self.pump(),
            }
            if !ready()
                && self.last_replies_close()
                && self.spin_for(crate::completion::spin_budget(), deadline, ready)
            {
                return true;
            }
        }
    }

    /// Whether the replies a gather still misses could each be computed
    /// on a CPU of their own beside this waiter (fewer missing than CPUs).
    /// A waiter woken by a reply then spins for the rest instead of going
    /// back to sleep: it takes no CPU from the procs it waits for, and the
    /// last reply does not wait for this thread to be woken (on a small VM
    /// a wake-up is the most costly step of a broadcast+gather's tail).
    /// While more are missing than there are CPUs, sleeping leaves those
    /// procs the CPU. The count is the last gather's that took a reply,
    /// so with several gathers in flight it is only a hint; a wrong guess
    /// costs at most one bounded spin.
    pub(super) fn last_replies_close(&self) -> bool {
        let missing = self.ports.missing_hint();
        missing < crate::completion::cpu_count()
    }

    /// Whether a gather is in flight that misses at least as many replies
    /// as there are CPUs (the other side of [`Inner::last_replies_close`]).
    pub(super) fn many_replies_missing(&self) -> bool {
        let missing = self.ports.missing_hint();
        missing != usize::MAX && missing >= crate::completion::cpu_count()
    }

    /// Spin up to `budget` for `ready()`, reading the sockets now and
    /// then (reading costs a syscall per connection; between reads the
    /// spin only checks the condition, which another thread may complete).
    /// Returns `ready()`.
    fn spin_for(
        self: &Arc<Self>,
        budget: Duration,
        deadline: Option<Instant>,
        ready: &dyn Fn() -> bool,
    ) -> bool {
        let turn = std::cell::Cell::new(0u32);
        spin_until(budget, deadline, || {
            let t = turn.get();
            turn.set(t.wrapping_add(1));
            if t.is_multiple_of(PUMP_EVERY) {
                self.pump_ready();
            }
            ready()
        })
    }
}
