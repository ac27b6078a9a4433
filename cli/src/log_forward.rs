//! A host agent streaming its procs' stdout and stderr to the controllers
//! that started them: the pipes are read on the process's tokio thread
//! (`monarch_core::background`), and each controller's reports are written
//! by a thread of that controller's own (a [`Sink`]). A controller that
//! stops reading (SIGSTOPped, or its host hung) then holds up only the
//! output of its own procs, which wait on their full pipes as they would
//! on a terminal; every other controller's procs stream on, and no line is
//! dropped.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::fd::OwnedFd;

use monarch_core::agent_protocol::LOG;
use monarch_core::background::{for_each_line_into, Sink, WeakSink};
use monarch_core::Runtime;

/// Batches of lines waiting for one controller's thread.
const QUEUED_BATCHES: usize = 64;

/// The lines of one read of one proc's pipe.
struct Report {
    addr: String,
    rank: String,
    which: &'static str,
    lines: Vec<Vec<u8>>,
}

/// The report sinks, one per controller with procs here.
pub(crate) struct LogForwarder {
    rt: Runtime,
    sinks: Mutex<HashMap<String, WeakSink<Report>>>,
}

impl LogForwarder {
    pub(crate) fn new(rt: Runtime) -> LogForwarder {
        LogForwarder {
            rt,
            sinks: Mutex::new(HashMap::new()),
        }
    }

    /// Stream one output pipe (`which`: `LOG_STDOUT` or `LOG_STDERR`) of
    /// the proc `addr` at `rank` to `controller`, lines of one read in one
    /// report.
    pub(crate) fn forward(
        &self,
        pipe: OwnedFd,
        controller: &str,
        addr: &str,
        rank: u64,
        which: &'static str,
    ) {
        let sink = match self.sink(controller) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "proc output is not forwarded");
                return;
            }
        };
        let (addr, rank) = (addr.to_string(), rank.to_string());
        let batch = move |lines: &[&[u8]]| Report {
            addr: addr.clone(),
            rank: rank.clone(),
            which,
            lines: lines.iter().map(|l| l.to_vec()).collect(),
        };
        if let Err(e) = for_each_line_into(pipe, sink, batch) {
            tracing::warn!(error = %e, "proc output is not forwarded");
        }
    }

    /// The sink of `controller`: its live one, or a new one (its thread
    /// ends when the last pipe feeding it has closed).
    fn sink(&self, controller: &str) -> monarch_core::Result<Sink<Report>> {
        let mut sinks = self.sinks.lock();
        if let Some(s) = sinks.get(controller).and_then(|w| w.upgrade()) {
            return Ok(s);
        }
        sinks.retain(|_, w| w.upgrade().is_some());
        let (rt, to) = (self.rt.clone(), controller.to_string());
        let sink = Sink::new("monarch-logs", QUEUED_BATCHES, move |r: Report| {
            send(&rt, &to, r)
        })?;
        sinks.insert(controller.to_string(), sink.downgrade());
        Ok(sink)
    }
}

/// One report to `controller` (blocking while its socket is full); when
/// the controller is gone the lines go to this agent's stderr instead, so
/// they are not lost.
fn send(rt: &Runtime, controller: &str, r: Report) {
    let mut parts: Vec<&[u8]> = vec![r.addr.as_bytes(), r.rank.as_bytes(), r.which.as_bytes()];
    parts.extend(r.lines.iter().map(|l| l.as_slice()));
    if rt.report(controller, LOG, &parts).is_ok() {
        return;
    }
    use std::io::Write;
    let mut text = Vec::new();
    for line in &r.lines {
        text.extend_from_slice(&[b"[rank ", r.rank.as_bytes(), b"] ", line, b"\n"].concat());
    }
    let _ = std::io::stderr().write_all(&text);
}
