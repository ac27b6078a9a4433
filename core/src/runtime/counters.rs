//! Per-actor counters: messages answered, errors, messages waiting, and
//! time in handlers as a histogram. Updated with relaxed atomics on the
//! message path (an event carries its actor's counters, so counting takes
//! no lock and no lookup); read by introspection (`introspect`).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use crate::introspect::ActorCounts;

/// Buckets of the handler-time histogram: under 1 us, then one per power
/// of two of microseconds, the last one open-ended (>= 2^22 us, ~4 s).
pub(crate) const HIST_BUCKETS: usize = 24;

/// Longest error text kept as an actor's last error.
const MAX_ERROR_LEN: usize = 4096;

/// The counters of one hosted actor.
#[derive(Default)]
pub(crate) struct ActorCounters {
    messages: AtomicU64,
    errors: AtomicU64,
    waiting: AtomicU64,
    handler_ns: AtomicU64,
    hist: [AtomicU64; HIST_BUCKETS],
    /// Written on errors only.
    last_error: Mutex<String>,
}

/// The histogram bucket of a handler that took `ns` nanoseconds.
#[inline]
fn bucket(ns: u64) -> usize {
    let us = ns / 1000;
    let b = (u64::BITS - us.leading_zeros()) as usize;
    b.min(HIST_BUCKETS - 1)
}

impl ActorCounters {
    /// A message for the actor was admitted.
    #[inline]
    pub(crate) fn delivered(&self) {
        self.waiting.fetch_add(1, Relaxed);
    }

    /// A message admitted was answered; `taken`: when the binding took it
    /// (None: never taken, no handler time); `error`: its error text.
    #[inline]
    pub(crate) fn answered(&self, taken: Option<Instant>, error: Option<&str>) {
        self.waiting.fetch_sub(1, Relaxed);
        self.messages.fetch_add(1, Relaxed);
        if let Some(t) = taken {
            let ns = t.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            self.handler_ns.fetch_add(ns, Relaxed);
            self.hist[bucket(ns)].fetch_add(1, Relaxed);
        }
        if let Some(e) = error {
            self.errors.fetch_add(1, Relaxed);
            let mut end = e.len().min(MAX_ERROR_LEN);
            while !e.is_char_boundary(end) {
                end -= 1;
            }
            let mut last = self.last_error.lock();
            last.clear();
            last.push_str(&e[..end]);
        }
    }

    /// A message admitted was refused before any handler saw it.
    #[inline]
    pub(crate) fn withdrawn(&self) {
        self.waiting.fetch_sub(1, Relaxed);
    }

    /// The actor failed outside a message (its constructor raised, a
    /// supervision event escalated): keep the report as its last error.
    pub(crate) fn note_failure(&self, report: &str) {
        *self.last_error.lock() = report.chars().take(MAX_ERROR_LEN).collect();
    }

    pub(crate) fn snapshot(&self) -> ActorCounts {
        ActorCounts {
            messages: self.messages.load(Relaxed),
            errors: self.errors.load(Relaxed),
            queue_depth: self.waiting.load(Relaxed),
            handler_ns: self.handler_ns.load(Relaxed),
            handler_hist: self.hist.iter().map(|h| h.load(Relaxed)).collect(),
            last_error: self.last_error.lock().clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_of_microseconds() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(999), 0);
        assert_eq!(bucket(1_000), 1);
        assert_eq!(bucket(1_999), 1);
        assert_eq!(bucket(2_000), 2);
        assert_eq!(bucket(3_999), 2);
        assert_eq!(bucket(4_000), 3);
        assert_eq!(bucket(u64::MAX), HIST_BUCKETS - 1);
    }

    #[test]
    fn counts_answers_errors_and_waiting() {
        let c = ActorCounters::default();
        c.delivered();
        c.delivered();
        c.delivered();
        c.answered(None, None);
        c.answered(Some(Instant::now()), Some("boom"));
        let s = c.snapshot();
        assert_eq!((s.messages, s.errors, s.queue_depth), (2, 1, 1));
        assert_eq!(s.handler_hist.iter().sum::<u64>(), 1);
        assert_eq!(s.last_error, "boom");
        c.withdrawn();
        assert_eq!(c.snapshot().queue_depth, 0);
    }
}
