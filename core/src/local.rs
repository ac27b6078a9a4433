//! In-process procs, for scale tests and benchmarks: many procs inside one
//! OS process, so a mesh of thousands of ranks of Rust-native actors fits
//! on a small machine.
//!
//! Each local proc has a mailbox (FIFO) and hosts actors that handle one
//! message at a time; a small pool of worker threads runs whichever procs
//! have mail. A cast travels down the same fixed K-ary tree over base ranks
//! as a cast between OS processes (`multicast`), but carries the view
//! itself rather than a list of nodes: the sender posts it to its first hops
//! only (the root's children whose subtree holds a point, found in
//! O(K · depth) without looking at the points), and each proc finds the
//! first hops below it the same way, then delivers to its own actor. So the
//! sender's work to issue a cast does not grow with N. A gather's replies go
//! back up the tree: each forwarding proc collects exactly one batch per
//! first hop (plus its own actor's value) and hands one batch to its
//! parent, so the sender takes in at most K batches; only filling the N
//! results is O(N).
//!
//! A proc can be lost (`LocalCluster::lose`): later casts route around it
//! (its children are reached directly, its own point fails), and the
//! points of casts it was holding (mail not yet handled, or replies it was
//! collecting) fail at the proc above it, which computes which points those
//! are from the view and the tree only then; nothing is recorded per point
//! while casting. Per-sender FIFO holds as with sockets: one path per
//! sender and proc, FIFO mailboxes, in-order forwarding.

use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::geometry::Shape;
use crate::limits::check_name;
use crate::multicast::{subtree_slots, view_hops, ViewIndex};
use crate::runtime::Future;
use crate::value::{PointValue, ValueMesh};

mod collect;
pub use collect::Combine;
use collect::{Batch, Collector, Mode, Upward};

/// A Rust-native actor hosted by a local proc.
pub trait LocalActor: Send {
    /// Handle `method` with `parts`; `point` is this actor's rank in the
    /// view the message was sent to. Ok: the reply parts; Err: an error
    /// point.
    fn handle(
        &mut self,
        method: &str,
        parts: &[Vec<u8>],
        point: u64,
    ) -> std::result::Result<Vec<Vec<u8>>, String>;
}

struct CastMsg {
    actor: String,
    method: String,
    parts: Vec<Vec<u8>>,
}

/// A cast arriving at one proc: the proc covers the points of `view` in
/// its own subtree (itself included) and works out its first hops itself.
struct Delivery {
    msg: Arc<CastMsg>,
    view: Arc<ViewIndex>,
    /// The receiving proc (root of the subtree this delivery covers).
    at: usize,
    /// Where this proc's batch of replies goes; None: nobody waits.
    up: Option<Arc<Collector>>,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct LocalProc {
    mailbox: Mutex<VecDeque<Delivery>>,
    scheduled: AtomicBool,
    /// Set (under the mailbox lock) when the proc is lost.
    lost: AtomicBool,
    actors: Mutex<HashMap<String, Box<dyn LocalActor>>>,
    /// Collectors of casts this proc forwards, by id.
    relays: Mutex<HashMap<u64, Arc<Collector>>>,
}

struct Shared {
    procs: Vec<LocalProc>,
    fanout: usize,
    runq: Mutex<VecDeque<usize>>,
    wake: Condvar,
    stop: AtomicBool,
    next_id: AtomicU64,
    /// Messages put in mailboxes by the sender itself (its first hops).
    root_sends: AtomicU64,
    /// Messages put in mailboxes by forwarding procs.
    forwards: AtomicU64,
    /// Reply batches the sender's collectors received.
    root_batches: AtomicU64,
    /// Thread CPU time spent taking them in (and completing the futures).
    gather_cpu_ns: AtomicU64,
    /// Collectors alive (registered or not).
    live: Arc<AtomicUsize>,
}

/// Statistics of a cluster since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalStats {
    /// Messages the sender put in mailboxes itself.
    pub root_sends: u64,
    /// Messages procs forwarded down the tree.
    pub forwards: u64,
    /// Reply batches that reached the sender's gathers and folds (at
    /// most one per first hop and cast).
    pub root_batches: u64,
    /// CPU time (ns, thread time) spent taking those batches in, filling
    /// the result and completing the futures.
    pub gather_cpu_ns: u64,
    /// Reply collectors registered at procs now (casts in flight).
    pub relays: usize,
    /// Reply collectors not yet freed, the sender's included (a collector
    /// kept alive by a forgotten reference counts here).
    pub collectors: usize,
}

/// A set of in-process procs served by a pool of worker threads.
pub struct LocalCluster {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl LocalCluster {
    /// `n` procs (base ranks `0..n`), `threads` worker threads, multicast
    /// fan-out `fanout` (at least 2).
    pub fn new(n: usize, threads: usize, fanout: usize) -> LocalCluster {
        let shared = Arc::new(Shared {
            procs: (0..n)
                .map(|_| LocalProc {
                    mailbox: Mutex::new(VecDeque::new()),
                    scheduled: AtomicBool::new(false),
                    lost: AtomicBool::new(false),
                    actors: Mutex::new(HashMap::new()),
                    relays: Mutex::new(HashMap::new()),
                })
                .collect(),
            fanout: fanout.max(2),
            runq: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            root_sends: AtomicU64::new(0),
            forwards: AtomicU64::new(0),
            root_batches: AtomicU64::new(0),
            gather_cpu_ns: AtomicU64::new(0),
            live: Arc::new(AtomicUsize::new(0)),
        });
        let threads = (0..threads.max(1))
            .map(|i| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(format!("monarch-local-{i}"))
                    .spawn(move || s.work())
                    .expect("cannot start a local proc worker thread")
            })
            .collect();
        LocalCluster { shared, threads }
    }

    /// Number of procs.
    pub fn len(&self) -> usize {
        self.shared.procs.len()
    }

    /// Whether the cluster has no procs.
    pub fn is_empty(&self) -> bool {
        self.shared.procs.is_empty()
    }

    /// Construct actor `name` on every proc: `make(base_rank)`. The name
    /// must pass [`check_name`].
    pub fn spawn(&self, name: &str, make: impl Fn(usize) -> Box<dyn LocalActor>) -> Result<()> {
        check_name("actor name", name)?;
        for (r, p) in self.shared.procs.iter().enumerate() {
            p.actors.lock().insert(name.to_string(), make(r));
        }
        Ok(())
    }

    /// Counters of what the cluster has done so far.
    pub fn stats(&self) -> LocalStats {
        let s = &self.shared;
        LocalStats {
            root_sends: s.root_sends.load(Ordering::Relaxed),
            forwards: s.forwards.load(Ordering::Relaxed),
            root_batches: s.root_batches.load(Ordering::Relaxed),
            gather_cpu_ns: s.gather_cpu_ns.load(Ordering::Relaxed),
            relays: s.procs.iter().map(|p| p.relays.lock().len()).sum(),
            collectors: s.live.load(Ordering::Relaxed),
        }
    }

    #[cfg(test)]
    fn mailbox_len(&self, rank: usize) -> usize {
        self.shared.procs[rank].mailbox.lock().len()
    }

    /// Lose proc `rank`, as if its process died: mail waiting for it is
    /// dropped, the casts it was forwarding fail the points of its subtree
    /// (at the proc above it, which computes them only now), and later
    /// casts route around it (its children are reached directly; its own
    /// point fails).
    pub fn lose(&self, rank: usize) -> Result<()> {
        let sh = &self.shared;
        let p = sh
            .procs
            .get(rank)
            .ok_or_else(|| Error::invalid(format!("no local proc {rank}")))?;
        let mail: Vec<Delivery> = {
            let mut mb = p.mailbox.lock();
            if p.lost.swap(true, Ordering::SeqCst) {
                return Ok(());
            }
            mb.drain(..).collect()
        };
        let relays: Vec<Arc<Collector>> = {
            let mut r = p.relays.lock();
            r.drain().map(|(_, c)| c).collect()
        };
        let why = format!("local proc {rank} was lost");
        for d in mail {
            if let Some(up) = d.up {
                up.fail_hop(sh, d.at, &why);
            }
        }
        for c in relays {
            c.st.lock().closed = true;
            if let Upward::Parent(up) = &c.up {
                up.fail_hop(sh, rank, &why);
            }
        }
        Ok(())
    }

    /// Cast `method` to every point of `view` and reduce the replies (their
    /// first part) inside the tree with a native `combine`: each proc folds
    /// its subtree's values and passes one value up; the sender applies
    /// `combine(identity, fold)` (just `identity` for an empty view). The
    /// order in which values meet is the tree's, not rank order, so
    /// `combine` must be associative and commutative. The future's
    /// ValueMesh has one point: the result, or the first error met.
    pub fn cast_reduce(
        &self,
        actor: &str,
        method: &str,
        parts: Vec<Vec<u8>>,
        view: &Shape,
        identity: Vec<u8>,
        combine: Combine,
    ) -> Result<Future> {
        let done: Future = Completion::new(None);
        self.send_cast(
            actor,
            method,
            parts,
            view,
            Some((Mode::Fold(combine), done.clone(), identity)),
        )?;
        Ok(done)
    }

    /// Cast `method` to actor `actor` at every point of `view` (a view over
    /// base ranks `0..len()`). With `gather`, the future yields one value
    /// per point in the view's rank order; without, None (broadcast).
    ///
    /// The sender's work does not grow with the number of points: it
    /// indexes the view (O(dimensions)), finds its first hops (the root's
    /// children whose subtree holds a point: O(K · depth · dimensions)),
    /// and posts one message to each; every proc finds its own first hops
    /// the same way. The one O(N) step is filling the N results, done as
    /// the (at most K) reply batches arrive.
    pub fn cast(
        &self,
        actor: &str,
        method: &str,
        parts: Vec<Vec<u8>>,
        view: &Shape,
        gather: bool,
    ) -> Result<Option<Future>> {
        let done: Option<Future> = gather.then(|| Completion::new(None));
        self.send_cast(
            actor,
            method,
            parts,
            view,
            done.clone().map(|d| (Mode::Gather, d, Vec::new())),
        )?;
        Ok(done)
    }

    fn send_cast(
        &self,
        actor: &str,
        method: &str,
        parts: Vec<Vec<u8>>,
        view: &Shape,
        reply: Option<(Mode, Future, Vec<u8>)>,
    ) -> Result<()> {
        let sh = &self.shared;
        if let Some(max) = view.max_base_rank() {
            if max >= self.len() {
                return Err(Error::invalid(format!(
                    "view {view} reaches base rank {max}, past the {} local procs",
                    self.len()
                )));
            }
        }
        let index = Arc::new(ViewIndex::new(view).map_err(Error::invalid)?);
        let (k, n) = (sh.fanout, sh.procs.len());
        let routes = view_hops(None, k, n, &index, &|r| {
            sh.procs[r].lost.load(Ordering::Relaxed)
        });
        let up = reply.map(|(mode, done, identity)| {
            let shape = if matches!(mode, Mode::Gather) {
                view.clone()
            } else {
                Shape::dense(Vec::new(), Vec::new()).expect("empty shape is valid")
            };
            let c = Arc::new(Collector::new(
                index.clone(),
                None,
                0,
                mode,
                Upward::Root {
                    done,
                    shape,
                    identity,
                },
                routes.hops.clone(),
                sh.live.clone(),
            ));
            if !routes.lost.is_empty() {
                // Points on lost procs fail at once (not pending).
                let mut st = c.st.lock();
                for &(r, slot) in &routes.lost {
                    let why = format!("local proc {r} was lost");
                    let b = Batch::Values(vec![(slot, PointValue::error(why))]);
                    c.merge(&mut st, b);
                }
            }
            c
        });
        if let Some(c) = &up {
            if routes.hops.is_empty() {
                // Nothing to wait for (an empty view, or every point lost).
                let st = {
                    let mut st = c.st.lock();
                    st.closed = true;
                    std::mem::take(&mut *st)
                };
                c.finish(sh, st);
                return Ok(());
            }
        }
        let msg = Arc::new(CastMsg {
            actor: actor.to_string(),
            method: method.to_string(),
            parts,
        });
        sh.root_sends
            .fetch_add(routes.hops.len() as u64, Ordering::Relaxed);
        sh.post_all(routes.hops.into_iter().map(|at| Delivery {
            msg: msg.clone(),
            view: index.clone(),
            at,
            up: up.clone(),
        }));
        Ok(())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _q = self.shared.runq.lock();
            self.shared.wake.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Shared {
    /// Put deliveries in their procs' mailboxes, then wake workers once
    /// for all of them (one futex wake per batch, not per message). A
    /// delivery for a lost proc fails its points at once.
    fn post_all(&self, ds: impl IntoIterator<Item = Delivery>) {
        let mut ready: Vec<usize> = Vec::new();
        for d in ds {
            let r = d.at;
            let p = &self.procs[r];
            {
                let mut mb = p.mailbox.lock();
                if !p.lost.load(Ordering::SeqCst) {
                    mb.push_back(d);
                    drop(mb);
                    if !p.scheduled.swap(true, Ordering::AcqRel) {
                        ready.push(r);
                    }
                    continue;
                }
            }
            if let Some(up) = d.up {
                up.fail_hop(self, r, &format!("local proc {r} was lost"));
            }
        }
        if ready.is_empty() {
            return;
        }
        let one = ready.len() == 1;
        self.runq.lock().extend(ready);
        if one {
            self.wake.notify_one();
        } else {
            self.wake.notify_all();
        }
    }

    fn work(&self) {
        loop {
            let r = {
                let mut q = self.runq.lock();
                loop {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Some(r) = q.pop_front() {
                        break r;
                    }
                    self.wake.wait(&mut q);
                }
            };
            self.run_proc(r);
        }
    }

    /// Drain proc `r`'s mailbox in order (one worker at a time per proc).
    fn run_proc(&self, r: usize) {
        let p = &self.procs[r];
        loop {
            let next = p.mailbox.lock().pop_front();
            match next {
                Some(d) => self.handle(d),
                None => {
                    p.scheduled.store(false, Ordering::Release);
                    // A post may have raced with us going idle.
                    let more = !p.mailbox.lock().is_empty();
                    if !more || p.scheduled.swap(true, Ordering::AcqRel) {
                        return;
                    }
                }
            }
        }
    }

    fn handle(&self, d: Delivery) {
        let r = d.at;
        let (k, n) = (self.fanout, self.procs.len());
        let own = d.view.slot_of(r);
        let routes = view_hops(Some(r), k, n, &d.view, &|c| {
            self.procs[c].lost.load(Ordering::Relaxed)
        });
        let mut up = d.up;
        if !routes.hops.is_empty() || !routes.lost.is_empty() {
            // Our subtree's replies come to a collector of ours and go up
            // in one batch.
            if let Some(parent) = up.take() {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let mut pending = routes.hops.clone();
                pending.extend(own.map(|_| r));
                let c = Arc::new(parent.below(r, id, pending));
                {
                    let mut st = c.st.lock();
                    for &(lr, slot) in &routes.lost {
                        let why = format!("local proc {lr} was lost");
                        c.merge(&mut st, Batch::Values(vec![(slot, PointValue::error(why))]));
                    }
                }
                let registered = {
                    let mut relays = self.procs[r].relays.lock();
                    // Checked under the lock `lose` drains the relays with.
                    let ok = !self.procs[r].lost.load(Ordering::SeqCst);
                    if ok {
                        relays.insert(id, c.clone());
                    }
                    ok
                };
                if !registered {
                    c.st.lock().closed = true;
                    parent.fail_hop(self, r, &format!("local proc {r} was lost"));
                    return;
                }
                if own.is_none() && routes.hops.is_empty() {
                    // Every point below us is lost: nothing to wait for.
                    let st = {
                        let mut st = c.st.lock();
                        st.closed = true;
                        std::mem::take(&mut *st)
                    };
                    c.finish(self, st);
                    return;
                }
                up = Some(c);
            }
            self.forwards
                .fetch_add(routes.hops.len() as u64, Ordering::Relaxed);
            self.post_all(routes.hops.into_iter().map(|at| Delivery {
                msg: d.msg.clone(),
                view: d.view.clone(),
                at,
                up: up.clone(),
            }));
        }
        let Some(slot) = own else { return };
        let msg = &d.msg;
        let result = {
            let mut actors = self.procs[r].actors.lock();
            match actors.get_mut(&msg.actor) {
                Some(a) => a.handle(&msg.method, &msg.parts, slot),
                None => Err(format!("no actor '{}' on local proc {r}", msg.actor)),
            }
        };
        if let Some(up) = &up {
            let value = match result {
                Ok(parts) => PointValue::Ok(parts),
                Err(e) => PointValue::error(e),
            };
            up.add(self, r, Batch::Values(vec![(slot, value)]));
        }
    }
}

#[cfg(test)]
mod tests;
