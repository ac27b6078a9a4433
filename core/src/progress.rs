//! Progress of long operations (procs starting, a SLURM allocation waiting
//! in the queue, large RDMA transfers, tensor fetches): one status line on
//! the controller's terminal when stderr is one, and the same updates as
//! structured events for a host that watches them ([`watch`], [`next`];
//! `monarch_progress_next` in the C ABI). docs/tracing.md, "Progress".
//!
//! The terminal line is drawn only for operations still running after
//! `MONARCH_PROGRESS_DELAY_MS` (default 500), at most every 100 ms, and is
//! finished with a newline once its operation ends. `MONARCH_PROGRESS`:
//! `auto` (default: on when stderr is a terminal and this process is a
//! controller), `always`, `never`.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::wire::fb;

/// What kind of operation an update is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ProgressKind {
    /// Procs of a mesh saying Ready: `done`/`total` procs, `failed` exited
    /// before they were ready.
    ProcsReady = 1,
    /// A SLURM allocation: `state` is the job's queue state (e.g.
    /// `PENDING (Resources)`), `done` the agents started of `total`.
    SlurmAllocation = 2,
    /// An RDMA transfer: `done`/`total` bytes.
    RdmaTransfer = 3,
    /// A tensor fetch: `done`/`total` bytes.
    TensorFetch = 4,
}

impl ProgressKind {
    /// The kind with this number.
    pub fn from_u32(v: u32) -> Option<ProgressKind> {
        Some(match v {
            1 => ProgressKind::ProcsReady,
            2 => ProgressKind::SlurmAllocation,
            3 => ProgressKind::RdmaTransfer,
            4 => ProgressKind::TensorFetch,
            _ => return None,
        })
    }

    fn counts_bytes(self) -> bool {
        matches!(self, ProgressKind::RdmaTransfer | ProgressKind::TensorFetch)
    }
}

/// One report of an operation's progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The operation (unique in this process).
    pub id: u64,
    /// What it is.
    pub kind: ProgressKind,
    /// What it is about, e.g. `procs ready` or `RDMA read`.
    pub label: String,
    /// How much is done (procs, bytes).
    pub done: u64,
    /// How much there is in all (0: unknown).
    pub total: u64,
    /// How many parts failed (procs that exited before Ready).
    pub failed: u64,
    /// A state in words (a SLURM job's queue state), or empty.
    pub state: String,
    /// Time since the operation started.
    pub elapsed: Duration,
    /// Whether this is its last update.
    pub finished: bool,
}

impl Update {
    /// Encode as a `ProgressEvent` flatbuffer (core/schema/monarch.fbs).
    pub fn encode(&self) -> Vec<u8> {
        let mut fbb = flatbuffers::FlatBufferBuilder::new();
        let label = fbb.create_string(&self.label);
        let state = fbb.create_string(&self.state);
        let text = fbb.create_string(&self.render());
        let root = fb::ProgressEvent::create(
            &mut fbb,
            &fb::ProgressEventArgs {
                id: self.id,
                kind: fb::ProgressKind(self.kind as u32),
                label: Some(label),
                done: self.done,
                total: self.total,
                failed: self.failed,
                state: Some(state),
                elapsed_us: self.elapsed.as_micros() as u64,
                finished: self.finished,
                text: Some(text),
            },
        );
        fbb.finish_minimal(root);
        fbb.finished_data().to_vec()
    }

    /// The update as one line of text, e.g. `procs ready 37/128 (2.1s)`.
    pub fn render(&self) -> String {
        let count = |v: u64| {
            if self.kind.counts_bytes() {
                bytes(v)
            } else {
                v.to_string()
            }
        };
        let mut line = self.label.clone();
        if self.total > 0 {
            line += &format!(" {}/{}", count(self.done), count(self.total));
        } else if self.done > 0 {
            line += &format!(" {}", count(self.done));
        }
        if self.failed > 0 {
            line += &format!(" ({} failed)", self.failed);
        }
        if !self.state.is_empty() {
            line += &format!(": {}", self.state);
        }
        line += &format!(" ({:.1}s)", self.elapsed.as_secs_f64());
        line
    }
}

fn bytes(v: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

/// A long operation in progress; reports its last update when finished or
/// dropped.
pub struct Operation {
    id: u64,
    kind: ProgressKind,
    label: String,
    total: AtomicU64,
    started: Instant,
    done: AtomicU64,
    failed: AtomicU64,
    state: Mutex<String>,
    finished: AtomicBool,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Start reporting an operation of `kind` with `total` parts (0: unknown).
pub fn start(kind: ProgressKind, label: &str, total: u64) -> Arc<Operation> {
    let op = Arc::new(Operation {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        kind,
        label: label.to_string(),
        total: AtomicU64::new(total),
        started: Instant::now(),
        done: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        state: Mutex::new(String::new()),
        finished: AtomicBool::new(false),
    });
    op.publish(false);
    op
}

impl Operation {
    /// `n` more parts are done; the operation finishes with its last one.
    pub fn advance(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::AcqRel) + n;
        self.after_count(done + self.failed.load(Ordering::Acquire));
    }

    /// `n` more parts failed; the operation finishes with its last one.
    pub fn fail(&self, n: u64) {
        let failed = self.failed.fetch_add(n, Ordering::AcqRel) + n;
        self.after_count(failed + self.done.load(Ordering::Acquire));
    }

    fn after_count(&self, settled: u64) {
        let total = self.total.load(Ordering::Acquire);
        if total > 0 && settled >= total {
            self.finish();
        } else {
            self.publish(false);
        }
    }

    /// Set how much is done (bytes moved so far).
    pub fn set_done(&self, done: u64) {
        self.done.store(done, Ordering::Release);
        self.publish(false);
    }

    /// Set how much there is in all.
    pub fn set_total(&self, total: u64) {
        self.total.store(total, Ordering::Release);
        self.publish(false);
    }

    /// Set the state in words (a queue state).
    pub fn set_state(&self, state: &str) {
        *self.state.lock() = state.to_string();
        self.publish(false);
    }

    /// The operation is over: report its last update (once).
    pub fn finish(&self) {
        if !self.finished.swap(true, Ordering::AcqRel) {
            self.publish(true);
        }
    }

    fn update(&self, finished: bool) -> Update {
        Update {
            id: self.id,
            kind: self.kind,
            label: self.label.clone(),
            done: self.done.load(Ordering::Acquire),
            total: self.total.load(Ordering::Acquire),
            failed: self.failed.load(Ordering::Acquire),
            state: self.state.lock().clone(),
            elapsed: self.started.elapsed(),
            finished,
        }
    }

    fn publish(&self, finished: bool) {
        if self.finished.load(Ordering::Acquire) && !finished {
            return;
        }
        let watched = HUB.watching.load(Ordering::Acquire);
        let term = terminal();
        if !watched && !term.on {
            return;
        }
        let u = self.update(finished);
        if term.on {
            term.draw(&u);
        }
        if watched {
            HUB.push(u);
        }
    }
}

impl Drop for Operation {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The updates queued for a host that watches them.
struct Hub {
    watching: AtomicBool,
    queue: Mutex<VecDeque<Update>>,
    ready: Condvar,
}

/// Updates kept for a watcher that does not take them: the oldest go.
const QUEUE_CAP: usize = 4096;

static HUB: Hub = Hub {
    watching: AtomicBool::new(false),
    queue: parking_lot::const_mutex(VecDeque::new()),
    ready: Condvar::new(),
};

impl Hub {
    fn push(&self, u: Update) {
        let mut q = self.queue.lock();
        if q.len() >= QUEUE_CAP {
            q.pop_front();
        }
        q.push_back(u);
        self.ready.notify_all();
    }
}

/// Whether anyone follows progress (the terminal line or a watcher):
/// operations that cost something to report skip it otherwise.
pub fn observed() -> bool {
    HUB.watching.load(Ordering::Acquire) || terminal().on
}

/// Start (or stop) keeping progress updates for [`next`]; stopping drops
/// those not taken.
pub fn watch(enable: bool) {
    HUB.watching.store(enable, Ordering::Release);
    if !enable {
        HUB.queue.lock().clear();
    }
}

/// The next progress update, waiting up to `timeout` (None: forever).
pub fn next(timeout: Option<Duration>) -> Option<Update> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut q = HUB.queue.lock();
    loop {
        if let Some(u) = q.pop_front() {
            return Some(u);
        }
        match deadline {
            Some(d) => {
                if HUB.ready.wait_until(&mut q, d).timed_out() {
                    return q.pop_front();
                }
            }
            None => HUB.ready.wait(&mut q),
        }
    }
}

/// The status line on this process's terminal.
struct Terminal {
    on: bool,
    delay: Duration,
    /// When the line was last drawn, and whether it is on screen.
    drawn: Mutex<(Option<Instant>, bool)>,
}

const REDRAW: Duration = Duration::from_millis(100);

fn terminal() -> &'static Terminal {
    static T: OnceLock<Terminal> = OnceLock::new();
    T.get_or_init(|| {
        let worker = std::env::var_os("MONARCH_PROC_ADDR").is_some();
        let on = match std::env::var("MONARCH_PROGRESS").as_deref() {
            Ok("always") | Ok("1") => true,
            Ok("never") | Ok("0") => false,
            _ => !worker && std::io::stderr().is_terminal(),
        };
        let delay = std::env::var("MONARCH_PROGRESS_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or(Duration::from_millis(500));
        Terminal {
            on,
            delay,
            drawn: Mutex::new((None, false)),
        }
    })
}

impl Terminal {
    fn draw(&self, u: &Update) {
        let mut drawn = self.drawn.lock();
        // Quick operations leave no line; one drawn is always finished.
        if u.elapsed < self.delay && !(u.finished && drawn.1) {
            return;
        }
        let now = Instant::now();
        if !u.finished && drawn.0.is_some_and(|t| now.duration_since(t) < REDRAW) {
            return;
        }
        let mut err = std::io::stderr().lock();
        let end = if u.finished { "\n" } else { "" };
        let _ = write!(err, "\r\x1b[2K{}{end}", u.render());
        let _ = err.flush();
        *drawn = (Some(now), !u.finished);
    }
}

/// Clear the status line before other output is printed on the terminal
/// (it is drawn again with the next update).
pub fn clear_line() {
    let t = terminal();
    if !t.on {
        return;
    }
    let mut drawn = t.drawn.lock();
    if drawn.1 {
        let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
        *drawn = (None, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_render_counts_bytes_and_states() {
        let mut u = Update {
            id: 1,
            kind: ProgressKind::ProcsReady,
            label: "procs ready".into(),
            done: 37,
            total: 128,
            failed: 2,
            state: String::new(),
            elapsed: Duration::from_millis(2100),
            finished: false,
        };
        assert_eq!(u.render(), "procs ready 37/128 (2 failed) (2.1s)");
        u.kind = ProgressKind::RdmaTransfer;
        u.label = "RDMA read".into();
        u.done = 512 << 20;
        u.total = 1 << 30;
        u.failed = 0;
        assert_eq!(u.render(), "RDMA read 512.0 MiB/1.0 GiB (2.1s)");
        u.kind = ProgressKind::SlurmAllocation;
        u.label = "SLURM job 42".into();
        u.done = 0;
        u.total = 0;
        u.state = "PENDING (Resources)".into();
        assert_eq!(u.render(), "SLURM job 42: PENDING (Resources) (2.1s)");
    }

    #[test]
    fn an_update_encodes_as_a_progress_event() {
        let u = Update {
            id: 7,
            kind: ProgressKind::TensorFetch,
            label: "fetch".into(),
            done: 3,
            total: 4,
            failed: 0,
            state: "x".into(),
            elapsed: Duration::from_micros(1500),
            finished: true,
        };
        let bytes = u.encode();
        let ev = flatbuffers::root::<fb::ProgressEvent>(&bytes).unwrap();
        assert_eq!(ev.id(), 7);
        assert_eq!(ev.kind(), fb::ProgressKind::TensorFetch);
        assert_eq!((ev.done(), ev.total(), ev.elapsed_us()), (3, 4, 1500));
        assert_eq!(ev.label(), Some("fetch"));
        assert_eq!(ev.state(), Some("x"));
        assert!(ev.finished());
        assert_eq!(ev.text(), Some(u.render().as_str()));
    }

    #[test]
    fn a_watcher_gets_every_update_and_the_last_one_finishes() {
        watch(true);
        let op = start(ProgressKind::ProcsReady, "procs ready", 2);
        op.advance(1);
        op.fail(1);
        op.advance(1); // after the end: not reported
        let mut mine = Vec::new();
        while let Some(u) = next(Some(Duration::from_secs(5))) {
            if u.id == op.id {
                let last = u.finished;
                mine.push(u);
                if last {
                    break;
                }
            }
        }
        watch(false);
        let steps: Vec<(u64, u64, bool)> = mine
            .iter()
            .map(|u| (u.done, u.failed, u.finished))
            .collect();
        assert_eq!(steps, [(0, 0, false), (1, 0, false), (1, 1, true)]);
    }
}
