//! One-shot completions with a spin-then-park wait, and the per-runtime
//! notification file descriptor.
//!
//! On a small VM a cross-CPU wake-up of a parked thread costs tens of
//! microseconds, more than a whole round trip should. Waiters therefore spin
//! for a short, bounded time (yielding the CPU between checks, so a runnable
//! peer is not starved) before parking on a condition variable.

use crate::eventfd::EventFd;
use parking_lot::{Condvar, Mutex};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a waiter spins before parking. Zero disables spinning
/// (`MONARCH_SPIN_US`, default 200 µs).
pub(crate) fn spin_budget() -> Duration {
    static BUDGET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        let us = std::env::var("MONARCH_SPIN_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(200);
        Duration::from_micros(us)
    })
}

/// Learns, for one place where threads wait, whether spinning pays off.
///
/// Spinning only helps when the wait is usually shorter than the budget; a
/// proc that waits a millisecond for each message would just burn a core
/// that its neighbours need (on 2 cores, eight spinning procs starve the
/// ones with work). So the policy keeps a moving average of how long waits
/// took and spins only while it is within budget, probing every 32nd wait.
///
/// Nor does spinning pay while the machine has more runnable threads than
/// CPUs (a controller waiting for the replies of eight procs on two cores):
/// the spinner then takes a CPU from the very procs it waits for. Every
/// `CROWD_CHECK_EVERY`th wait reads the number of runnable threads
/// (`/proc/loadavg`); while it exceeds the CPU count, waits park at once.
pub(crate) struct SpinPolicy {
    avg_ns: AtomicU64,
    waits: AtomicU64,
    crowded: AtomicBool,
}

/// How often (in waits) a `SpinPolicy` looks whether the machine is
/// crowded (one small file read).
pub(crate) const CROWD_CHECK_EVERY: u64 = 64;

/// The CPUs this process may run on (read once).
pub(crate) fn cpu_count() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Whether more threads are runnable right now than there are CPUs (the
/// caller, which is running, counts). False when it cannot tell.
pub(crate) fn machine_crowded() -> bool {
    let cpus = cpu_count();
    let Ok(text) = std::fs::read_to_string("/proc/loadavg") else {
        return false;
    };
    // "0.52 0.58 0.59 3/412 12345": the fourth field is running/total.
    text.split_whitespace()
        .nth(3)
        .and_then(|f| f.split('/').next())
        .and_then(|r| r.parse::<usize>().ok())
        .is_some_and(|running| running > cpus)
}

impl Default for SpinPolicy {
    fn default() -> Self {
        SpinPolicy::new()
    }
}

impl SpinPolicy {
    /// A policy with no history (spins on its first waits).
    pub const fn new() -> SpinPolicy {
        SpinPolicy {
            avg_ns: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            crowded: AtomicBool::new(false),
        }
    }

    /// How long the next wait may spin.
    pub fn budget(&self) -> Duration {
        let max = spin_budget();
        if max.is_zero() {
            return max;
        }
        let n = self.waits.fetch_add(1, Ordering::Relaxed);
        if n.is_multiple_of(CROWD_CHECK_EVERY) {
            self.crowded.store(machine_crowded(), Ordering::Relaxed);
        }
        if self.crowded.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        if self.avg_ns.load(Ordering::Relaxed) <= max.as_nanos() as u64 || n.is_multiple_of(32) {
            max
        } else {
            Duration::ZERO
        }
    }

    /// Record how long a wait took in all (spinning plus parked).
    pub fn record(&self, waited: Duration) {
        let w = waited.as_nanos().min(u64::MAX as u128) as u64;
        let old = self.avg_ns.load(Ordering::Relaxed);
        self.avg_ns.store(old - old / 8 + w / 8, Ordering::Relaxed);
    }
}

/// Spin until `ready()` holds or `budget` (capped by `deadline`) is spent.
/// Returns whether `ready()` became true.
pub(crate) fn spin_until(
    budget: Duration,
    deadline: Option<Instant>,
    ready: impl Fn() -> bool,
) -> bool {
    if budget.is_zero() {
        return ready();
    }
    let start = Instant::now();
    let mut end = start + budget;
    if let Some(d) = deadline {
        end = end.min(d);
    }
    let mut i: u32 = 0;
    loop {
        if ready() {
            return true;
        }
        i = i.wrapping_add(1);
        if i.is_multiple_of(64) {
            if Instant::now() >= end {
                return false;
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// An eventfd that becomes readable when any completion or event of its
/// runtime arrives, so a foreign event loop can watch one descriptor.
pub struct Notifier {
    fd: EventFd,
    armed: AtomicBool,
    watched: AtomicBool,
}

impl Notifier {
    /// A new, unarmed notification descriptor.
    pub fn new() -> std::io::Result<Notifier> {
        Ok(Notifier {
            fd: EventFd::new()?,
            armed: AtomicBool::new(false),
            watched: AtomicBool::new(false),
        })
    }

    /// The descriptor; asking for it arms notifications (before that no
    /// write syscall is spent per completion) and marks it watched.
    pub fn fd(&self) -> RawFd {
        self.armed.store(true, Ordering::SeqCst);
        self.watched.store(true, Ordering::SeqCst);
        self.fd.fd()
    }

    /// Whether someone asked for the descriptor (and may be watching it).
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// Whether someone asked for the descriptor since a thread last
    /// waited inside the runtime: its watcher then relies on the runtime's
    /// I/O thread to read the sockets.
    pub fn is_watched(&self) -> bool {
        self.watched.load(Ordering::SeqCst)
    }

    /// A thread waits inside the runtime (and reads the sockets itself):
    /// the descriptor counts as unwatched until it is asked for again.
    pub fn unwatch(&self) {
        if self.watched.load(Ordering::Relaxed) {
            self.watched.store(false, Ordering::SeqCst);
        }
    }

    /// Make the descriptor readable, when someone watches it.
    pub fn signal(&self) {
        if self.armed.load(Ordering::Relaxed) {
            self.fd.signal();
        }
    }

    /// Reset the descriptor to not-readable.
    pub fn clear(&self) {
        self.fd.drain();
    }
}

/// How a completion's waiters wait when the completion belongs to a
/// runtime: the runtime lets the waiting thread read its sockets itself
/// (spinning briefly, then sleeping in `poll`), so a reply is handled by
/// the thread that wants it, with no hand-off between threads.
pub trait Pump: Send + Sync {
    /// Wait until `ready()` or the deadline; returns `ready()`.
    fn wait_until(&self, deadline: Option<Instant>, ready: &dyn Fn() -> bool) -> bool;
    /// Wake threads waiting in `wait_until` so they re-check.
    fn wake(&self);
}

/// A value that arrives once. Cloneable handle; any thread may wait.
pub struct Completion<T> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    ready: AtomicBool,
    value: Mutex<Option<T>>,
    cv: Condvar,
    /// Threads blocked on `cv`. `Condvar::notify_all` is a futex syscall
    /// even with nobody waiting, which would cost one syscall per reply.
    parked: AtomicU32,
    notifier: Option<Arc<Notifier>>,
    pump: Option<Arc<dyn Pump>>,
}

impl<T> Clone for Completion<T> {
    fn clone(&self) -> Self {
        Completion {
            inner: self.inner.clone(),
        }
    }
}

impl<T> Completion<T> {
    /// A pending completion; `notifier` is signalled when it completes.
    pub fn new(notifier: Option<Arc<Notifier>>) -> Completion<T> {
        Completion::with_pump(notifier, None)
    }

    /// A completion whose waiters run `pump` while they spin.
    pub fn with_pump(
        notifier: Option<Arc<Notifier>>,
        pump: Option<Arc<dyn Pump>>,
    ) -> Completion<T> {
        Completion {
            inner: Arc::new(Inner {
                ready: AtomicBool::new(false),
                value: Mutex::new(None),
                cv: Condvar::new(),
                parked: AtomicU32::new(0),
                notifier,
                pump,
            }),
        }
    }

    /// Set the value. Only the first call has any effect; returns whether
    /// this call was it.
    pub fn complete(&self, v: T) -> bool {
        let parked = {
            let mut g = self.inner.value.lock();
            if self.inner.ready.load(Ordering::Acquire) {
                return false;
            }
            *g = Some(v);
            self.inner.ready.store(true, Ordering::Release);
            // Parkers register under the same lock before they wait, so a
            // zero here means nobody can be (or become) blocked on `cv`.
            self.inner.parked.load(Ordering::Relaxed)
        };
        if parked > 0 {
            self.inner.cv.notify_all();
        }
        if let Some(p) = &self.inner.pump {
            p.wake();
        }
        if let Some(n) = &self.inner.notifier {
            n.signal();
        }
        true
    }

    /// Whether the completion has its value.
    pub fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::Acquire)
    }

    /// Wait until ready or until `timeout` passes (None waits forever).
    /// Returns whether the completion is ready.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        if self.is_ready() {
            return true;
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        match &self.inner.pump {
            Some(pump) => pump.wait_until(deadline, &|| self.is_ready()),
            None => self.park(deadline),
        }
    }

    fn park(&self, deadline: Option<Instant>) -> bool {
        if self.is_ready() {
            return true;
        }
        let mut g = self.inner.value.lock();
        self.inner.parked.fetch_add(1, Ordering::Relaxed);
        let ready = loop {
            if self.inner.ready.load(Ordering::Acquire) {
                break true;
            }
            match deadline {
                None => self.inner.cv.wait(&mut g),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break false;
                    }
                    self.inner.cv.wait_for(&mut g, d - now);
                }
            }
        };
        self.inner.parked.fetch_sub(1, Ordering::Relaxed);
        drop(g);
        ready
    }

    /// Take the value out (once ready); None if not ready or already taken.
    pub fn take(&self) -> Option<T> {
        if !self.is_ready() {
            return None;
        }
        self.inner.value.lock().take()
    }
}

impl<T: Clone> Completion<T> {
    /// A copy of the value, leaving it in place.
    pub fn peek(&self) -> Option<T> {
        if !self.is_ready() {
            return None;
        }
        self.inner.value.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_once_and_wait_across_threads() {
        let c: Completion<u32> = Completion::new(None);
        assert!(!c.wait(Some(Duration::from_millis(5))));
        let c2 = c.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            assert!(c2.complete(1));
            assert!(!c2.complete(2));
        });
        assert!(c.wait(None));
        assert_eq!(c.take(), Some(1));
        assert_eq!(c.take(), None);
        t.join().unwrap();
    }

    #[test]
    fn crowded_machine_reads_loadavg() {
        // Whatever the load, the check answers without failing, and a
        // policy keeps giving a budget it can use.
        let _ = machine_crowded();
        let p = SpinPolicy::new();
        for _ in 0..(2 * CROWD_CHECK_EVERY) {
            assert!(p.budget() <= spin_budget());
        }
    }

    #[test]
    fn notifier_is_watched_from_each_ask_until_unwatched() {
        let n = Notifier::new().unwrap();
        assert!(!n.is_armed() && !n.is_watched());
        n.fd();
        assert!(n.is_armed() && n.is_watched());
        n.unwatch();
        assert!(n.is_armed() && !n.is_watched());
        n.fd();
        assert!(n.is_watched());
    }

    #[test]
    fn notifier_becomes_readable_only_when_armed() {
        let n = Arc::new(Notifier::new().unwrap());
        let c: Completion<()> = Completion::new(Some(n.clone()));
        let fd = n.fd();
        c.complete(());
        let mut v = 0u64;
        // SAFETY: reading 8 bytes into a valid u64 from our own eventfd.
        let r = unsafe { libc::read(fd, &mut v as *mut u64 as *mut _, 8) };
        assert_eq!(r, 8);
        n.clear();
        // SAFETY: as above.
        let r = unsafe { libc::read(fd, &mut v as *mut u64 as *mut _, 8) };
        assert_eq!(r, -1);
    }
}
