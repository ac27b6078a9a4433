//! Collecting a gather's replies up the tree: each forwarding proc takes
//! one batch per first hop (plus its own actor's value), folds or merges
//! them, and hands one batch to its parent; the root completes the future.

use parking_lot::Mutex;
use std::sync::Arc;

use super::*;

/// A partial fold: the combined value, or the first error met.
pub(super) type Folded = std::result::Result<Vec<u8>, String>;

/// A native combine function for reductions inside the tree.
pub type Combine = Arc<dyn Fn(&[u8], &[u8]) -> Vec<u8> + Send + Sync>;

/// What a subtree sends up: its replies, or its fold.
pub(super) enum Batch {
    Values(Vec<(u64, PointValue)>),
    Fold(Option<Folded>),
}

pub(super) enum Mode {
    Gather,
    Fold(Combine),
}

/// Where a collector's result goes once complete.
pub(super) enum Upward {
    /// The collector of the proc above (the forwarder, or the sender).
    Parent(Arc<Collector>),
    /// The sender's future: a gather over `shape`, or a fold finished
    /// with `identity`.
    Root {
        done: Future,
        shape: Shape,
        identity: Vec<u8>,
    },
}

/// Replies of one cast collected at one node (a forwarding proc, or the
/// sender): it waits for exactly one batch from each of its first hops
/// (and one value from its own actor), then sends one batch up. Which
/// points a hop covers is not recorded: if the hop's proc is lost, the
/// points are computed from the view and the tree then
/// (`multicast::subtree_slots`), so issuing a cast costs nothing per point.
pub(super) struct Collector {
    pub(super) view: Arc<ViewIndex>,
    /// The proc holding it (None: the sender) and its key there.
    pub(super) at: Option<usize>,
    pub(super) id: u64,
    pub(super) mode: Mode,
    pub(super) up: Upward,
    pub(super) st: Mutex<CollState>,
    /// The cluster's count of collectors alive (see `LocalStats`).
    pub(super) live: Arc<AtomicUsize>,
}

#[derive(Default)]
pub(super) struct CollState {
    /// Hops (and `at`, for its own point) whose batch is not in yet.
    pub(super) pending: Vec<usize>,
    /// Gather at a forwarder: the replies so far.
    pub(super) values: Vec<(u64, PointValue)>,
    /// Gather at the sender: one cell per point, allocated with the first
    /// batch (not when the cast is issued).
    pub(super) slots: Vec<Option<PointValue>>,
    pub(super) fold: Option<Folded>,
    /// Completed, or its proc was lost: later batches are dropped.
    pub(super) closed: bool,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(super) fn fold_merge(
    combine: &Combine,
    acc: Option<Folded>,
    v: Option<Folded>,
) -> Option<Folded> {
    match (acc, v) {
        (a, None) => a,
        (None, v) => v,
        (Some(Err(e)), _) | (Some(Ok(_)), Some(Err(e))) => Some(Err(e)),
        (Some(Ok(a)), Some(Ok(b))) => Some(Ok(combine(&a, &b))),
    }
}

pub(super) fn to_folded(v: PointValue) -> Folded {
    match v {
        PointValue::Ok(mut p) if !p.is_empty() => Ok(p.swap_remove(0)),
        PointValue::Ok(_) => Ok(Vec::new()),
        PointValue::Err { message, .. } => Err(message),
    }
}

impl Collector {
    pub(super) fn new(
        view: Arc<ViewIndex>,
        at: Option<usize>,
        id: u64,
        mode: Mode,
        up: Upward,
        pending: Vec<usize>,
        live: Arc<AtomicUsize>,
    ) -> Collector {
        live.fetch_add(1, Ordering::Relaxed);
        Collector {
            view,
            at,
            id,
            mode,
            up,
            st: Mutex::new(CollState {
                pending,
                ..Default::default()
            }),
            live,
        }
    }

    /// A collector below this one (at proc `at`, waiting for `pending`).
    pub(super) fn below(self: &Arc<Self>, at: usize, id: u64, pending: Vec<usize>) -> Collector {
        let mode = match &self.mode {
            Mode::Gather => Mode::Gather,
            Mode::Fold(c) => Mode::Fold(c.clone()),
        };
        Collector::new(
            self.view.clone(),
            Some(at),
            id,
            mode,
            Upward::Parent(self.clone()),
            pending,
            self.live.clone(),
        )
    }

    pub(super) fn merge(&self, st: &mut CollState, batch: Batch) {
        match batch {
            Batch::Values(vals) => match (&self.mode, &self.up) {
                (Mode::Fold(c), _) => {
                    for (_, v) in vals {
                        st.fold = fold_merge(c, st.fold.take(), Some(to_folded(v)));
                    }
                }
                (Mode::Gather, Upward::Root { .. }) => {
                    if st.slots.is_empty() {
                        st.slots = (0..self.view.len()).map(|_| None).collect();
                    }
                    for (slot, v) in vals {
                        if let Some(cell) = st.slots.get_mut(slot as usize) {
                            cell.get_or_insert(v);
                        }
                    }
                }
                (Mode::Gather, Upward::Parent(_)) => {
                    if st.values.is_empty() {
                        st.values = vals;
                    } else {
                        st.values.extend(vals);
                    }
                }
            },
            Batch::Fold(f) => {
                if let Mode::Fold(c) = &self.mode {
                    st.fold = fold_merge(c, st.fold.take(), f);
                }
            }
        }
    }

    /// The batch of hop (or own point) `from` is in.
    pub(super) fn add(&self, sh: &Shared, from: usize, batch: Batch) {
        if matches!(self.up, Upward::Root { .. }) {
            self.add_at_sender(sh, from, batch);
        } else {
            self.take_in(sh, from, batch);
        }
    }

    /// A batch reaching the sender: counted, and its CPU time measured
    /// (`LocalStats`). Not inlined, so profilers can tell it apart.
    #[inline(never)]
    pub(super) fn add_at_sender(&self, sh: &Shared, from: usize, batch: Batch) {
        let t0 = thread_cpu_ns();
        if self.take_in(sh, from, batch) {
            sh.root_batches.fetch_add(1, Ordering::Relaxed);
            sh.gather_cpu_ns
                .fetch_add(thread_cpu_ns().saturating_sub(t0), Ordering::Relaxed);
        }
    }

    /// Merge the batch of hop `from` (false: not expected, dropped); the
    /// last one passes the result up.
    pub(super) fn take_in(&self, sh: &Shared, from: usize, batch: Batch) -> bool {
        let done = {
            let mut st = self.st.lock();
            let Some(i) = (!st.closed)
                .then(|| st.pending.iter().position(|&h| h == from))
                .flatten()
            else {
                return false; // late, duplicate, or its collector is gone
            };
            st.pending.swap_remove(i);
            self.merge(&mut st, batch);
            if st.pending.is_empty() {
                st.closed = true;
                Some(std::mem::take(&mut *st))
            } else {
                None
            }
        };
        if let Some(st) = done {
            self.finish(sh, st);
        }
        true
    }

    /// Hop `hop` was lost before its batch came: every point of its
    /// subtree fails (computed now, from the view and the tree).
    pub(super) fn fail_hop(&self, sh: &Shared, hop: usize, why: &str) {
        let batch = match &self.mode {
            Mode::Fold(_) => Batch::Fold(Some(Err(why.to_string()))),
            Mode::Gather => Batch::Values(
                subtree_slots(hop, sh.fanout, sh.procs.len(), &self.view)
                    .map(|s| (s, PointValue::error(why)))
                    .collect(),
            ),
        };
        self.add(sh, hop, batch);
    }

    /// All batches are in: pass the result up.
    pub(super) fn finish(&self, sh: &Shared, st: CollState) {
        if let Some(at) = self.at {
            sh.procs[at].relays.lock().remove(&self.id);
        }
        match &self.up {
            Upward::Parent(p) => {
                let at = self.at.expect("a forwarder's collector has a proc");
                let batch = match self.mode {
                    Mode::Gather => Batch::Values(st.values),
                    Mode::Fold(_) => Batch::Fold(st.fold),
                };
                p.add(sh, at, batch);
            }
            Upward::Root {
                done,
                shape,
                identity,
            } => {
                let vm = match &self.mode {
                    Mode::Gather => {
                        let mut slots = st.slots;
                        if slots.is_empty() {
                            slots = (0..self.view.len()).map(|_| None).collect();
                        }
                        ValueMesh {
                            shape: shape.clone(),
                            values: slots
                                .into_iter()
                                .map(|v| v.unwrap_or_else(|| PointValue::error("no reply")))
                                .collect(),
                        }
                    }
                    Mode::Fold(combine) => ValueMesh {
                        shape: Shape::dense(Vec::new(), Vec::new()).expect("empty shape is valid"),
                        values: vec![match st.fold {
                            None => PointValue::Ok(vec![identity.clone()]),
                            Some(Ok(a)) => PointValue::Ok(vec![combine(identity, &a)]),
                            Some(Err(e)) => PointValue::error(e),
                        }],
                    },
                };
                done.complete(Ok(vm));
            }
        }
    }
}
