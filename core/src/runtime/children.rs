//! The procs this process started: its local child processes, and which
//! started procs (local or on other hosts) have not said Ready yet.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use super::HashMap;
use crate::completion::Completion;
use crate::error::Result;
use crate::process::Child;

/// Completes when a started proc says Ready (or fails when it exits first).
pub(super) type ReadyGate = Completion<Result<()>>;

/// What watches a proc start: its `spawn` span (from the start to Ready)
/// and the progress of its mesh's procs saying Ready.
pub(crate) struct StartWatch {
    span: tracing::Span,
    progress: Arc<crate::progress::Operation>,
}

impl StartWatch {
    /// Watch the start of rank `rank` at `addr`, one of the procs `progress`
    /// counts.
    pub(crate) fn new(
        rank: usize,
        addr: &str,
        progress: &Arc<crate::progress::Operation>,
    ) -> StartWatch {
        StartWatch {
            span: tracing::info_span!("spawn", rank, proc = %addr, ready = tracing::field::Empty),
            progress: progress.clone(),
        }
    }

    fn settle(self, ready: bool) {
        self.span.record("ready", ready);
        if ready {
            self.progress.advance(1);
        } else {
            self.progress.fail(1);
        }
    }
}

#[derive(Default)]
pub(super) struct Children {
    procs: Mutex<HashMap<String, Arc<Child>>>,
    /// Started procs, local or remote, that have not said Ready yet.
    starting: Mutex<HashMap<String, ReadyGate>>,
    /// The watches of those procs.
    watches: Mutex<HashMap<String, StartWatch>>,
}

impl Children {
    pub(super) fn insert(&self, addr: String, child: Arc<Child>) {
        self.procs.lock().insert(addr, child);
    }

    /// Forget child `addr` if it has exited; whether there was one.
    pub(super) fn remove_exited(&self, addr: &str) -> bool {
        let mut procs = self.procs.lock();
        let exited = procs.get(addr).is_some_and(|c| c.exit.is_ready());
        if exited {
            procs.remove(addr);
        }
        exited
    }

    pub(super) fn get(&self, addr: &str) -> Option<Arc<Child>> {
        self.procs.lock().get(addr).cloned()
    }

    pub(super) fn addrs(&self) -> Vec<String> {
        self.procs.lock().keys().cloned().collect()
    }

    pub(super) fn all(&self) -> Vec<Arc<Child>> {
        self.procs.lock().values().cloned().collect()
    }

    /// Those of `addrs` that are children of ours (one lock for all).
    pub(super) fn among(&self, addrs: &[String]) -> Vec<Arc<Child>> {
        let c = self.procs.lock();
        addrs.iter().filter_map(|a| c.get(a).cloned()).collect()
    }

    /// Those of `addrs` that are children of ours still running.
    pub(super) fn running_among(&self, addrs: Vec<String>) -> Vec<String> {
        let c = self.procs.lock();
        addrs
            .into_iter()
            .filter(|a| c.get(a).is_some_and(|c| !c.exit.is_ready()))
            .collect()
    }

    /// The proc at `addr` was started: sends to it wait for `ready`.
    pub(super) fn expect_ready(&self, addr: &str, ready: ReadyGate, watch: StartWatch) {
        self.starting.lock().insert(addr.to_string(), ready);
        self.watches.lock().insert(addr.to_string(), watch);
    }

    /// The proc at `addr` said Ready (`ready`) or ended: stop waiting for it.
    pub(super) fn take_ready(&self, addr: &str, ready: bool) -> Option<ReadyGate> {
        if let Some(w) = self.watches.lock().remove(addr) {
            w.settle(ready);
        }
        self.starting.lock().remove(addr)
    }

    /// The gate of `addr` when it has not said Ready yet.
    pub(super) fn ready_gate(&self, addr: &str) -> Option<ReadyGate> {
        self.starting.lock().get(addr).cloned()
    }

    pub(super) fn is_starting(&self, addr: &str) -> bool {
        self.starting.lock().contains_key(addr)
    }

    /// Wait (up to `timeout` each) until those of `addrs` still starting
    /// have said Ready; one lock for all, none when no proc is starting.
    pub(super) fn wait_ready_all<'a>(
        &self,
        addrs: impl Iterator<Item = &'a str>,
        timeout: Duration,
    ) {
        let pending: Vec<ReadyGate> = {
            let ready = self.starting.lock();
            if ready.is_empty() {
                return;
            }
            addrs.filter_map(|a| ready.get(a).cloned()).collect()
        };
        for r in pending {
            r.wait(Some(timeout));
        }
    }
}
