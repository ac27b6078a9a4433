//! In-process procs, for scale tests and benchmarks: many procs inside one
//! OS process, so a mesh of thousands of ranks of Rust-native actors fits
//! on a small machine.
//!
//! Each local proc has a mailbox (FIFO) and hosts actors that handle one
//! message at a time; a small pool of worker threads runs whichever procs
//! have mail. A cast is routed exactly like a cast between OS processes
//! (`multicast::route`, the same fixed K-ary tree over base ranks): the
//! sender puts it in the mailboxes of its first hops; each proc forwards it
//! to the first hops below it, recomputing the split, then delivers it to
//! its own actor. The transport is an in-memory mailbox instead of a
//! socket. As with sockets, a gather's replies go back up the tree: each
//! forwarding proc collects its subtree's replies and hands them to its
//! parent in one batch, so the sender receives at most K batches. Per-sender
//! FIFO holds for the same reason as with sockets: one path per sender and
//! proc, FIFO mailboxes, in-order forwarding.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::geometry::Shape;
use crate::multicast::{route, Node, FORWARD_ONLY};
use crate::runtime::Future;
use crate::value::{PointValue, ValueMesh};

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

struct Delivery {
    msg: Arc<CastMsg>,
    /// This proc first, then the nodes below it that the cast concerns.
    nodes: Vec<Node>,
    /// Where this proc's reply (and its subtree's) goes; None: nobody waits.
    up: Option<Up>,
}

/// The next stop of replies on their way up.
#[derive(Clone)]
enum Up {
    Root(Arc<LocalGather>),
    Relay(Arc<LocalRelay>),
    Fold(Arc<FoldNode>),
}

impl Up {
    fn add(&self, values: Vec<(u64, PointValue)>) {
        match self {
            Up::Root(g) => g.fill_batch(values),
            Up::Relay(r) => r.add(values),
            Up::Fold(f) => {
                for (_, v) in values {
                    let v = match v {
                        PointValue::Ok(mut p) if !p.is_empty() => Ok(p.swap_remove(0)),
                        PointValue::Ok(_) => Ok(Vec::new()),
                        PointValue::Err { message, .. } => Err(message),
                    };
                    f.add(v, 1);
                }
            }
        }
    }

    /// What a forwarding proc's children answer to: a collector of the
    /// `expected` points of its subtree that passes them on to `self`.
    fn below(self, expected: usize) -> Up {
        match self {
            Up::Fold(parent) => Up::Fold(Arc::new(FoldNode {
                combine: parent.combine.clone(),
                up: FoldUp::Node(parent),
                st: Mutex::new((None, expected, expected)),
            })),
            up => Up::Relay(Arc::new(LocalRelay {
                up,
                st: Mutex::new((Vec::with_capacity(expected), expected)),
            })),
        }
    }
}

/// A partial fold: the combined value, or the first error met.
type Folded = std::result::Result<Vec<u8>, String>;

/// A native combine function for reductions inside the tree.
pub type Combine = Arc<dyn Fn(&[u8], &[u8]) -> Vec<u8> + Send + Sync>;

enum FoldUp {
    Node(Arc<FoldNode>),
    /// The sender: identity, and the future of the result.
    Root(Vec<u8>, Future),
}

/// A reduction in progress at one proc: the fold of the values of its
/// subtree that are in so far.
struct FoldNode {
    combine: Combine,
    up: FoldUp,
    /// (fold so far, points still missing, points covered in all)
    st: Mutex<(Option<Folded>, usize, usize)>,
}

impl FoldNode {
    fn add_empty(&self) {
        if let FoldUp::Root(identity, done) = &self.up {
            done.complete(Ok(ValueMesh {
                shape: Shape::dense(Vec::new(), Vec::new()).expect("empty shape is valid"),
                values: vec![PointValue::Ok(vec![identity.clone()])],
            }));
        }
    }

    fn add(&self, v: Folded, points: usize) {
        let (acc, covered) = {
            let mut st = self.st.lock().unwrap_or_else(|p| p.into_inner());
            st.0 = Some(match (st.0.take(), v) {
                (None, v) => v,
                (Some(Err(e)), _) | (Some(Ok(_)), Err(e)) => Err(e),
                (Some(Ok(a)), Ok(b)) => Ok((self.combine)(&a, &b)),
            });
            st.1 = st.1.saturating_sub(points);
            if st.1 > 0 {
                return;
            }
            (st.0.take(), st.2)
        };
        match &self.up {
            FoldUp::Node(parent) => {
                parent.add(acc.unwrap_or_else(|| Err("empty fold".into())), covered)
            }
            FoldUp::Root(identity, done) => {
                let value = match acc {
                    None => PointValue::Ok(vec![identity.clone()]),
                    Some(Ok(a)) => PointValue::Ok(vec![(self.combine)(identity, &a)]),
                    Some(Err(e)) => PointValue::error(e),
                };
                done.complete(Ok(ValueMesh {
                    shape: Shape::dense(Vec::new(), Vec::new()).expect("empty shape is valid"),
                    values: vec![value],
                }));
            }
        }
    }
}

/// A forwarding proc's collection of its subtree's replies.
struct LocalRelay {
    up: Up,
    st: Mutex<(Vec<(u64, PointValue)>, usize)>,
}

impl LocalRelay {
    fn add(&self, values: Vec<(u64, PointValue)>) {
        let batch = {
            let mut st = self.st.lock().unwrap_or_else(|p| p.into_inner());
            st.1 = st.1.saturating_sub(values.len());
            st.0.extend(values);
            if st.1 > 0 {
                return;
            }
            std::mem::take(&mut st.0)
        };
        self.up.add(batch);
    }
}

struct LocalProc {
    mailbox: Mutex<VecDeque<Delivery>>,
    scheduled: AtomicBool,
    actors: Mutex<HashMap<String, Box<dyn LocalActor>>>,
}

struct LocalGather {
    shape: Shape,
    values: Mutex<Vec<Option<PointValue>>>,
    remaining: AtomicUsize,
    done: Future,
}

impl LocalGather {
    fn fill_batch(&self, values: Vec<(u64, PointValue)>) {
        let mut filled = 0;
        {
            let mut v = self.values.lock().unwrap_or_else(|p| p.into_inner());
            for (slot, value) in values {
                if let Some(cell) = v.get_mut(slot as usize) {
                    if cell.is_none() {
                        *cell = Some(value);
                        filled += 1;
                    }
                }
            }
        }
        if filled > 0 && self.remaining.fetch_sub(filled, Ordering::AcqRel) == filled {
            let values = self
                .values
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(..)
                .map(|v| v.unwrap_or_else(|| PointValue::error("no reply")))
                .collect();
            self.done.complete(Ok(ValueMesh {
                shape: self.shape.clone(),
                values,
            }));
        }
    }
}

struct Shared {
    procs: Vec<LocalProc>,
    fanout: usize,
    runq: Mutex<VecDeque<usize>>,
    wake: Condvar,
    stop: AtomicBool,
    /// Messages put in mailboxes by the sender itself (its first hops).
    root_sends: AtomicU64,
    /// Messages put in mailboxes by forwarding procs.
    forwards: AtomicU64,
}

/// Statistics of a cluster since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalStats {
    /// Messages the sender put in mailboxes itself.
    pub root_sends: u64,
    /// Messages procs forwarded down the tree.
    pub forwards: u64,
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
                    actors: Mutex::new(HashMap::new()),
                })
                .collect(),
            fanout: fanout.max(2),
            runq: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            root_sends: AtomicU64::new(0),
            forwards: AtomicU64::new(0),
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

    pub fn is_empty(&self) -> bool {
        self.shared.procs.is_empty()
    }

    /// Construct actor `name` on every proc: `make(base_rank)`.
    pub fn spawn(&self, name: &str, make: impl Fn(usize) -> Box<dyn LocalActor>) {
        for (r, p) in self.shared.procs.iter().enumerate() {
            p.actors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.to_string(), make(r));
        }
    }

    pub fn stats(&self) -> LocalStats {
        LocalStats {
            root_sends: self.shared.root_sends.load(Ordering::Relaxed),
            forwards: self.shared.forwards.load(Ordering::Relaxed),
        }
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
        let root = Arc::new(FoldNode {
            combine,
            up: FoldUp::Root(identity, done.clone()),
            st: Mutex::new((None, view.len(), view.len())),
        });
        if view.is_empty() {
            root.add_empty();
            return Ok(done);
        }
        self.send_cast(actor, method, parts, view, Some(Up::Fold(root)))?;
        Ok(done)
    }

    /// Cast `method` to actor `actor` at every point of `view` (a view over
    /// base ranks `0..len()`). With `gather`, the future yields one value
    /// per point in the view's rank order; without, None (broadcast).
    pub fn cast(
        &self,
        actor: &str,
        method: &str,
        parts: Vec<Vec<u8>>,
        view: &Shape,
        gather: bool,
    ) -> Result<Option<Future>> {
        if let Some(max) = view.max_base_rank() {
            if max >= self.len() {
                return Err(Error::invalid(format!(
                    "view {view} reaches base rank {max}, past the {} local procs",
                    self.len()
                )));
            }
        }
        let n = view.len();
        let g = gather.then(|| {
            Arc::new(LocalGather {
                shape: view.clone(),
                values: Mutex::new((0..n).map(|_| None).collect()),
                remaining: AtomicUsize::new(n),
                done: Completion::new(None),
            })
        });
        let fut = g.as_ref().map(|g| g.done.clone());
        if n == 0 {
            if let Some(g) = &g {
                g.done.complete(Ok(ValueMesh {
                    shape: view.clone(),
                    values: Vec::new(),
                }));
            }
            return Ok(fut);
        }
        self.send_cast(actor, method, parts, view, g.map(Up::Root))?;
        Ok(fut)
    }

    fn send_cast(
        &self,
        actor: &str,
        method: &str,
        parts: Vec<Vec<u8>>,
        view: &Shape,
        up: Option<Up>,
    ) -> Result<()> {
        if let Some(max) = view.max_base_rank() {
            if max >= self.len() {
                return Err(Error::invalid(format!(
                    "view {view} reaches base rank {max}, past the {} local procs",
                    self.len()
                )));
            }
        }
        let msg = Arc::new(CastMsg {
            actor: actor.to_string(),
            method: method.to_string(),
            parts,
        });
        let members = view.base_ranks().enumerate().map(|(slot, rank)| Node {
            rank,
            slot: slot as u64,
        });
        let routes = route(None, self.shared.fanout, members, &|_| false, false);
        self.shared
            .root_sends
            .fetch_add(routes.hops.len() as u64, Ordering::Relaxed);
        for nodes in routes.hops {
            self.shared.post(Delivery {
                msg: msg.clone(),
                nodes,
                up: up.clone(),
            });
        }
        Ok(())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _q = self.shared.runq.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.wake.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn post(&self, d: Delivery) {
        let r = d.nodes[0].rank;
        let p = &self.procs[r];
        p.mailbox
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(d);
        if !p.scheduled.swap(true, Ordering::AcqRel) {
            self.runq
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back(r);
            self.wake.notify_one();
        }
    }

    fn work(&self) {
        loop {
            let r = {
                let mut q = self.runq.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Some(r) = q.pop_front() {
                        break r;
                    }
                    q = self.wake.wait(q).unwrap_or_else(|p| p.into_inner());
                }
            };
            self.run_proc(r);
        }
    }

    /// Drain proc `r`'s mailbox in order (one worker at a time per proc).
    fn run_proc(&self, r: usize) {
        let p = &self.procs[r];
        loop {
            let next = p
                .mailbox
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            match next {
                Some(d) => self.handle(r, d),
                None => {
                    p.scheduled.store(false, Ordering::Release);
                    // A post may have raced with us going idle.
                    let more = !p
                        .mailbox
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_empty();
                    if !more || p.scheduled.swap(true, Ordering::AcqRel) {
                        return;
                    }
                }
            }
        }
    }

    fn handle(&self, r: usize, d: Delivery) {
        let me = d.nodes[0];
        let mut up = d.up;
        if d.nodes.len() > 1 {
            let routes = route(
                Some(r),
                self.fanout,
                d.nodes[1..].iter().copied(),
                &|_| false,
                false,
            );
            self.forwards
                .fetch_add(routes.hops.len() as u64, Ordering::Relaxed);
            // Our subtree's replies come to us and go up in one batch.
            if let Some(parent) = up.take() {
                let expected = routes
                    .hops
                    .iter()
                    .flatten()
                    .filter(|n| n.slot != FORWARD_ONLY)
                    .count()
                    + usize::from(me.slot != FORWARD_ONLY);
                up = Some(parent.below(expected));
            }
            for nodes in routes.hops {
                self.post(Delivery {
                    msg: d.msg.clone(),
                    nodes,
                    up: up.clone(),
                });
            }
        }
        if me.slot == FORWARD_ONLY {
            return;
        }
        let msg = &d.msg;
        let result = {
            let mut actors = self.procs[r]
                .actors
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            match actors.get_mut(&msg.actor) {
                Some(a) => a.handle(&msg.method, &msg.parts, me.slot),
                None => Err(format!("no actor '{}' on local proc {r}", msg.actor)),
            }
        };
        if let Some(up) = &up {
            let value = match result {
                Ok(parts) => PointValue::Ok(parts),
                Err(e) => PointValue::error(e),
            };
            up.add(vec![(me.slot, value)]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per base rank: (method, first part as u64) of each message, in order.
    type Log = Arc<Mutex<Vec<Vec<(String, u64)>>>>;

    /// Records every message; answers its point and base rank.
    struct Recorder {
        base: usize,
        log: Log,
    }

    impl LocalActor for Recorder {
        fn handle(
            &mut self,
            method: &str,
            parts: &[Vec<u8>],
            point: u64,
        ) -> std::result::Result<Vec<Vec<u8>>, String> {
            let seq = parts
                .first()
                .map(|p| u64::from_le_bytes(p[..8].try_into().unwrap()))
                .unwrap_or(0);
            self.log.lock().unwrap()[self.base].push((method.to_string(), seq));
            if method == "fail" {
                return Err(format!("rank {} failed", self.base));
            }
            Ok(vec![
                point.to_le_bytes().to_vec(),
                (self.base as u64).to_le_bytes().to_vec(),
            ])
        }
    }

    fn cluster(n: usize, k: usize) -> (LocalCluster, Log) {
        let c = LocalCluster::new(n, 2, k);
        let log = Arc::new(Mutex::new(vec![Vec::new(); n]));
        let l = log.clone();
        c.spawn("rec", move |base| {
            Box::new(Recorder {
                base,
                log: l.clone(),
            })
        });
        (c, log)
    }

    fn u(b: &[u8]) -> u64 {
        u64::from_le_bytes(b.try_into().unwrap())
    }

    #[test]
    fn cast_to_4096_ranks_reaches_each_once_in_rank_order() {
        let (c, log) = cluster(4096, 16);
        let shape = Shape::new(&[("hosts", 64), ("gpus", 64)]).unwrap();
        let f = c
            .cast(
                "rec",
                "ping",
                vec![7u64.to_le_bytes().to_vec()],
                &shape,
                true,
            )
            .unwrap()
            .unwrap();
        assert!(f.wait(Some(std::time::Duration::from_secs(120))));
        let vm = f.take().unwrap().unwrap();
        assert_eq!(vm.values.len(), 4096);
        for (i, v) in vm.values.iter().enumerate() {
            let p = v.parts();
            assert_eq!((u(&p[0]), u(&p[1])), (i as u64, i as u64));
        }
        assert!(log.lock().unwrap().iter().all(|l| l.len() == 1));
        let st = c.stats();
        assert_eq!(st.root_sends, 16, "the sender sends to K first hops only");
        // A strided slice: points renumbered, every 8th gpu of host 3..5.
        let view = shape
            .select("hosts", Some(3), Some(5), 1)
            .unwrap()
            .select("gpus", None, None, 8)
            .unwrap();
        let f = c.cast("rec", "ping", vec![], &view, true).unwrap().unwrap();
        assert!(f.wait(Some(std::time::Duration::from_secs(60))));
        let vm = f.take().unwrap().unwrap();
        let got: Vec<(u64, u64)> = vm
            .values
            .iter()
            .map(|v| (u(&v.parts()[0]), u(&v.parts()[1])))
            .collect();
        let want: Vec<(u64, u64)> = (0..16)
            .map(|i| (i as u64, (3 * 64 + (i / 8) * 64 + (i % 8) * 8) as u64))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn fifo_per_actor_across_casts_slices_and_direct_messages() {
        let (c, log) = cluster(300, 3);
        let all = Shape::new(&[("x", 300)]).unwrap();
        let mut want: Vec<Vec<u64>> = vec![Vec::new(); 300];
        let mut last = None;
        for i in 0..60u64 {
            let view = match i % 3 {
                0 => all.clone(),
                1 => all.select("x", Some(100), None, 7).unwrap(),
                _ => all.at("x", (i as usize * 37) % 300).unwrap(),
            };
            for b in view.base_ranks() {
                want[b].push(i);
            }
            last = c
                .cast("rec", "seq", vec![i.to_le_bytes().to_vec()], &view, i == 59)
                .unwrap();
        }
        let f = last.unwrap();
        assert!(f.wait(Some(std::time::Duration::from_secs(60))));
        // Broadcasts may still be running on other ranks: wait for them.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let got: Vec<Vec<u64>> = log
                .lock()
                .unwrap()
                .iter()
                .map(|l| l.iter().map(|(_, s)| *s).collect())
                .collect();
            if got == want {
                break;
            }
            for (r, g) in got.iter().enumerate() {
                assert!(
                    g.windows(2).all(|w| w[0] < w[1]),
                    "rank {r} out of order: {g:?}"
                );
            }
            assert!(std::time::Instant::now() < deadline, "casts not delivered");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn reduce_inside_the_tree() {
        let (c, _) = cluster(4096, 16);
        let all = Shape::new(&[("x", 4096)]).unwrap();
        // Sum of the points (first reply part), plus the identity.
        let sum: Combine = Arc::new(|a: &[u8], b: &[u8]| (u(a) + u(b)).to_le_bytes().to_vec());
        let f = c
            .cast_reduce(
                "rec",
                "x",
                vec![],
                &all,
                5u64.to_le_bytes().to_vec(),
                sum.clone(),
            )
            .unwrap();
        assert!(f.wait(Some(std::time::Duration::from_secs(60))));
        let vm = f.take().unwrap().unwrap();
        assert_eq!(u(&vm.values[0].parts()[0]), 5 + 4095 * 4096 / 2);
        // On a strided slice, points are renumbered: 0..8 sum to 28.
        let view = all.select("x", Some(1), None, 512).unwrap();
        let f = c
            .cast_reduce("rec", "x", vec![], &view, vec![0; 8], sum.clone())
            .unwrap();
        assert!(f.wait(Some(std::time::Duration::from_secs(60))));
        assert_eq!(u(&f.take().unwrap().unwrap().values[0].parts()[0]), 28);
        // Empty view: the identity. An error anywhere: the error.
        let empty = all.select("x", Some(0), Some(0), 1).unwrap();
        let f = c
            .cast_reduce(
                "rec",
                "x",
                vec![],
                &empty,
                9u64.to_le_bytes().to_vec(),
                sum.clone(),
            )
            .unwrap();
        assert_eq!(u(&f.take().unwrap().unwrap().values[0].parts()[0]), 9);
        let f = c
            .cast_reduce("rec", "fail", vec![], &all, vec![0; 8], sum)
            .unwrap();
        assert!(f.wait(Some(std::time::Duration::from_secs(60))));
        assert!(f.take().unwrap().unwrap().values[0].is_err());
    }

    #[test]
    fn errors_and_empty_views() {
        let (c, _) = cluster(20, 4);
        let all = Shape::new(&[("x", 20)]).unwrap();
        let f = c.cast("rec", "fail", vec![], &all, true).unwrap().unwrap();
        assert!(f.wait(Some(std::time::Duration::from_secs(60))));
        let vm = f.take().unwrap().unwrap();
        assert!(vm.values.iter().all(|v| v.is_err()));
        let f = c.cast("nobody", "x", vec![], &all, true).unwrap().unwrap();
        assert!(f.wait(Some(std::time::Duration::from_secs(60))));
        assert!(f.take().unwrap().unwrap().values[3].is_err());
        let empty = all.select("x", Some(3), Some(3), 1).unwrap();
        let f = c.cast("rec", "x", vec![], &empty, true).unwrap().unwrap();
        assert!(f.take().unwrap().unwrap().values.is_empty());
        let big = Shape::new(&[("x", 21)]).unwrap();
        assert!(c.cast("rec", "x", vec![], &big, true).is_err());
    }
}
