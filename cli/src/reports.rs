//! What a host agent tells the controllers that started its procs: their
//! stdout and stderr lines, their exits, that one hung. Each controller's
//! reports are written, in order, by a thread of that controller's own (a
//! [`Sink`]); the pipes are read on the process's tokio thread
//! (`monarch_core::background`). A controller that stops reading
//! (SIGSTOPped, its host hung) then holds up only its own procs' output,
//! which waits on their full pipes as it would on a terminal; the agent's
//! other controllers, its event loop and its reaper go on, and no line is
//! dropped.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::fd::OwnedFd;

use monarch_core::agent_protocol::LOG;
use monarch_core::background::{for_each_line_into, Sink, WeakSink};
use monarch_core::Runtime;

/// Batches of lines that may wait for one controller's thread.
const QUEUED_BATCHES: usize = 64;

/// One report for a controller.
pub(crate) enum Report {
    /// The lines of one read of a proc's pipe.
    Lines {
        addr: String,
        rank: String,
        /// `LOG_STDOUT` or `LOG_STDERR`.
        which: &'static str,
        lines: Vec<Vec<u8>>,
    },
    /// Any other report (`EXIT`, `HUNG`): a method and its parts.
    Event {
        method: &'static str,
        parts: Vec<Vec<u8>>,
    },
}

/// A controller's queue of reports.
pub(crate) type Reports = Sink<Report>;

/// The report queues, one per controller with procs here.
pub(crate) struct ReportQueues {
    rt: Runtime,
    queues: Mutex<HashMap<String, WeakSink<Report>>>,
}

impl ReportQueues {
    pub(crate) fn new(rt: Runtime) -> ReportQueues {
        ReportQueues {
            rt,
            queues: Mutex::new(HashMap::new()),
        }
    }

    /// The queue of `controller`: its live one, or a new one (whose thread
    /// ends once every holder of it, pipes and procs, is gone).
    pub(crate) fn of(&self, controller: &str) -> monarch_core::Result<Reports> {
        let mut queues = self.queues.lock();
        if let Some(q) = queues.get(controller).and_then(|w| w.upgrade()) {
            return Ok(q);
        }
        queues.retain(|_, w| w.upgrade().is_some());
        let (rt, to) = (self.rt.clone(), controller.to_string());
        let q = Sink::new("monarch-reports", QUEUED_BATCHES, move |r| {
            send(&rt, &to, r)
        })?;
        queues.insert(controller.to_string(), q.downgrade());
        Ok(q)
    }
}

/// Stream one output pipe (`which`: `LOG_STDOUT` or `LOG_STDERR`) of the
/// proc `addr` at `rank` to the controller of `reports`, the lines of one
/// read in one report.
pub(crate) fn forward(pipe: OwnedFd, reports: Reports, addr: &str, rank: u64, which: &'static str) {
    let (addr, rank) = (addr.to_string(), rank.to_string());
    let batch = move |lines: &[&[u8]]| Report::Lines {
        addr: addr.clone(),
        rank: rank.clone(),
        which,
        lines: lines.iter().map(|l| l.to_vec()).collect(),
    };
    if let Err(e) = for_each_line_into(pipe, reports, batch) {
        tracing::warn!(error = %e, "proc output is not forwarded");
    }
}

/// One report to `controller` (blocking while its socket is full). When
/// the controller is gone, lines go to this agent's stderr instead, so
/// they are not lost.
fn send(rt: &Runtime, controller: &str, r: Report) {
    match r {
        Report::Lines {
            addr,
            rank,
            which,
            lines,
        } => {
            let mut parts: Vec<&[u8]> = vec![addr.as_bytes(), rank.as_bytes(), which.as_bytes()];
            parts.extend(lines.iter().map(|l| l.as_slice()));
            if rt.report(controller, LOG, &parts).is_ok() {
                return;
            }
            use std::io::Write;
            let mut text = Vec::new();
            for line in &lines {
                text.extend_from_slice(&[b"[rank ", rank.as_bytes(), b"] ", line, b"\n"].concat());
            }
            let _ = std::io::stderr().write_all(&text);
        }
        Report::Event { method, parts } => {
            let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
            if let Err(e) = rt.report(controller, method, &parts) {
                tracing::debug!(%controller, method, error = %e, "report not delivered");
            }
        }
    }
}
