//! Multicast routing: a cast to N procs travels down a tree of procs
//! instead of N sends from the sender.
//!
//! The tree is fixed for a proc mesh: a K-ary heap over its **base ranks**
//! (K = the fan-out, `MONARCH_CAST_FANOUT`, default 16). The sender is the
//! root; base ranks `0..K` are its children, and base rank `r` has children
//! `K + r*K .. K + r*K + K`. A cast to a view (any slice) is sent to the
//! first hops of the paths to its points; each node delivers to its own
//! actor when it is a point of the view and forwards the rest to its
//! children, recomputing the split itself. Nodes on a path that are not
//! points of the view only forward.
//!
//! Because the path from a sender to a proc depends only on the proc mesh
//! (not on the slice), every message from one sender to one actor, whether
//! cast or direct, travels the same chain of FIFO links and is forwarded in
//! order: per-sender FIFO holds without sequence numbers. The price: in a
//! mesh of more than K procs, a direct call to base rank r >= K goes through
//! its ancestors (one extra hop per level). Meshes of at most K procs are
//! sent to directly, as before.
//!
//! A node known to be lost (its connection ended) is bypassed: its children
//! are reached directly. Points whose path went through a node that is lost
//! while the cast is in flight are failed by the sender (see
//! [`Routes::relays`]); a forwarding node that cannot reach a child answers
//! the child's points with an error itself.
//!
//! Replies: a gather's replies travel back **up** the tree: each forwarding
//! proc collects its subtree's replies (its own actor's included) and sends
//! them to its parent in one batch (`runtime/cast.rs`, `local.rs`), so the
//! sender takes in at most K batches per cast. `stream()` and port replies
//! go straight to the port's proc (or `reply_to`).
//!
//! Two ways to describe a cast's points to a node:
//! - [`route`]: explicit node lists (base rank, slot, address per node),
//!   used between OS processes, where a forwarder also needs its
//!   descendants' addresses. The sender's work is O(N) (it lists every
//!   point once, in K messages).
//! - [`view_hops`] with a [`ViewIndex`]: the cast carries the view itself;
//!   a node's subtree is `depth` contiguous ranges of base ranks
//!   ([`levels`]), so each node, the sender included, finds its first hops
//!   in O(K · depth · dims) without looking at the points, and the points
//!   below a lost node are computed only when it is lost
//!   ([`subtree_slots`]). Used by in-process procs (`local.rs`).

use std::collections::{BTreeMap, HashMap};

/// `cast_slots` value of a node that only forwards.
pub const FORWARD_ONLY: u64 = u64::MAX;

/// Default fan-out of the multicast tree.
pub const DEFAULT_FANOUT: usize = 16;

/// The fan-out in use: `MONARCH_CAST_FANOUT` (at least 2), else 16.
pub fn fanout() -> usize {
    static K: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *K.get_or_init(|| {
        std::env::var("MONARCH_CAST_FANOUT")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map(|k| k.max(2))
            .unwrap_or(DEFAULT_FANOUT)
    })
}

/// Parent of base rank `r` (None: the sender, the root).
pub fn parent(r: usize, k: usize) -> Option<usize> {
    (r >= k).then(|| (r - k) / k)
}

/// Children of base rank `r` among `n` ranks.
pub fn children(r: usize, k: usize, n: usize) -> std::ops::Range<usize> {
    let first = (k + r * k).min(n);
    first..(first + k).min(n)
}

/// One node of a cast: base rank, and the slot (point of the view) it
/// delivers as, or `FORWARD_ONLY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    pub rank: usize,
    pub slot: u64,
}

/// Where a cast goes from one node.
#[derive(Debug, Default)]
pub struct Routes {
    /// Per first hop: the nodes to send it (the hop first, then the nodes
    /// below it, by rank).
    pub hops: Vec<Vec<Node>>,
    /// Points that cannot be reached (their proc is lost).
    pub lost: Vec<Node>,
    /// With `relays` asked for: for each node that forwards to points
    /// below it, the slots of those points (fail them if it is lost).
    pub relays: HashMap<usize, Vec<u64>>,
}

/// Split the points `members` below `at` (None: we are the root) into
/// first hops. `lost(rank)` tells which procs are known to be gone.
pub fn route(
    at: Option<usize>,
    k: usize,
    members: impl IntoIterator<Item = Node>,
    lost: &dyn Fn(usize) -> bool,
    want_relays: bool,
) -> Routes {
    let mut out = Routes::default();
    let mut groups: BTreeMap<usize, BTreeMap<usize, u64>> = BTreeMap::new();
    let mut chain: Vec<usize> = Vec::with_capacity(8);
    for m in members {
        if m.slot == FORWARD_ONLY || Some(m.rank) == at {
            continue;
        }
        if lost(m.rank) {
            out.lost.push(m);
            continue;
        }
        // The ancestors of m strictly below `at`, top first.
        chain.clear();
        let mut p = m.rank;
        let mut below_at = true;
        loop {
            chain.push(p);
            match parent(p, k) {
                q if q == at => break,
                Some(q) => p = q,
                None => {
                    below_at = false;
                    break;
                }
            }
        }
        if !below_at {
            // Not in our subtree (a malformed cast): reach it directly.
            chain.clear();
            chain.push(m.rank);
        }
        chain.reverse();
        // Bypass lost forwarders: the first hop is the topmost live node.
        let top = chain
            .iter()
            .position(|&r| r == m.rank || !lost(r))
            .unwrap_or(chain.len() - 1);
        let hop = chain[top];
        let g = groups.entry(hop).or_default();
        for &r in &chain[top..] {
            if r == m.rank {
                g.insert(r, m.slot);
            } else {
                g.entry(r).or_insert(FORWARD_ONLY);
                if want_relays {
                    out.relays.entry(r).or_default().push(m.slot);
                }
            }
        }
    }
    for (hop, nodes) in groups {
        let mut v = Vec::with_capacity(nodes.len());
        v.push(Node {
            rank: hop,
            slot: nodes[&hop],
        });
        v.extend(
            nodes
                .into_iter()
                .filter(|(r, _)| *r != hop)
                .map(|(rank, slot)| Node { rank, slot }),
        );
        out.hops.push(v);
    }
    out
}

/// The base ranks of a proc address in a proc mesh.
pub type RanksOf = Box<dyn Fn(&str) -> Vec<usize> + Send + Sync>;

/// Which points of a cast went through which forwarding proc, worked out
/// only when a proc is lost (instead of recording, for every forwarder, the
/// slots below it each time a cast is sent).
pub struct LazyRelays {
    view: ViewIndex,
    k: usize,
    n: usize,
    /// Procs already lost when the cast was sent (routed around, so
    /// nothing went through them).
    lost_before: Vec<String>,
    /// The base ranks of a proc address.
    ranks_of: RanksOf,
}

impl LazyRelays {
    pub fn new(
        view: ViewIndex,
        k: usize,
        n: usize,
        lost_before: Vec<String>,
        ranks_of: RanksOf,
    ) -> LazyRelays {
        LazyRelays {
            view,
            k,
            n,
            lost_before,
            ranks_of,
        }
    }

    /// The slots whose path went through proc `peer` (its own point not
    /// included): the points of its subtree, unless it was routed around.
    pub fn slots_through(&self, peer: &str) -> Vec<u64> {
        let mut out = Vec::new();
        if self.lost_before.iter().any(|p| p == peer) {
            return out;
        }
        for r in (self.ranks_of)(peer) {
            if r >= self.n {
                continue;
            }
            let own = self.view.slot_of(r);
            out.extend(subtree_slots(r, self.k, self.n, &self.view).filter(|&s| Some(s) != own));
        }
        out
    }
}

impl std::fmt::Debug for LazyRelays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyRelays")
            .field("k", &self.k)
            .field("n", &self.n)
            .field("lost_before", &self.lost_before)
            .finish_non_exhaustive()
    }
}

/// The points of a view, looked up by base rank without listing them: a
/// cast that carries the view (not a list of nodes) lets every node of the
/// tree find the points of its own subtree, so the sender only works out
/// its first hops (O(K · depth) instead of O(N)).
///
/// Views built by slicing, splitting, renaming or flattening are "ordered"
/// (each stride is larger than the span of the dimensions inside it), so a
/// base rank's point, the next point at or after a base rank, and the number
/// of points below a base rank are all found in O(dimensions). Other views
/// (raw strides from the wire) fall back to a sorted table built once.
#[derive(Debug, Clone)]
pub struct ViewIndex {
    offset: usize,
    sizes: Vec<usize>,
    strides: Vec<usize>,
    /// Points below each dimension: `inner[i]` = product of `sizes[i+1..]`.
    inner: Vec<usize>,
    len: usize,
    /// For views that are not ordered: (base rank, slot), sorted by rank.
    table: Option<Vec<(usize, u64)>>,
}

impl ViewIndex {
    /// Index `view`. Err if two points of the view share a base rank (a
    /// cast could not deliver to both).
    pub fn new(view: &crate::Shape) -> Result<ViewIndex, String> {
        let sizes = view.sizes().to_vec();
        let strides = view.strides().to_vec();
        let nd = sizes.len();
        let mut inner = vec![1usize; nd];
        for i in (0..nd.saturating_sub(1)).rev() {
            inner[i] = inner[i + 1].saturating_mul(sizes[i + 1]);
        }
        let len = view.len();
        // Ordered: every dimension of size > 1 has a stride larger than the
        // largest offset the dimensions inside it can add.
        let mut span = 0usize;
        let mut ordered = true;
        for i in (0..nd).rev() {
            if sizes[i] > 1 {
                if strides[i] <= span {
                    ordered = false;
                    break;
                }
                span = span.saturating_add((sizes[i] - 1).saturating_mul(strides[i]));
            }
        }
        let table = if ordered || len == 0 {
            None
        } else {
            let mut t: Vec<(usize, u64)> = view
                .base_ranks()
                .enumerate()
                .map(|(slot, b)| (b, slot as u64))
                .collect();
            t.sort_unstable();
            if t.windows(2).any(|w| w[0].0 == w[1].0) {
                return Err(format!("view {view} names a base rank twice"));
            }
            Some(t)
        };
        Ok(ViewIndex {
            offset: view.offset(),
            sizes,
            strides,
            inner,
            len,
            table,
        })
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The point (slot) at base rank `b`, if `b` is in the view.
    pub fn slot_of(&self, b: usize) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        if let Some(t) = &self.table {
            return t.binary_search_by_key(&b, |e| e.0).ok().map(|i| t[i].1);
        }
        let mut rel = b.checked_sub(self.offset)?;
        let mut slot = 0usize;
        for i in 0..self.sizes.len() {
            if self.sizes[i] <= 1 {
                continue;
            }
            let c = rel / self.strides[i];
            if c >= self.sizes[i] {
                return None;
            }
            rel -= c * self.strides[i];
            slot += c * self.inner[i];
        }
        (rel == 0).then_some(slot as u64)
    }

    /// Smallest base rank of a point that is `>= from`.
    pub fn next_at_or_after(&self, from: usize) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        if let Some(t) = &self.table {
            let i = t.partition_point(|e| e.0 < from);
            return t.get(i).map(|e| e.0);
        }
        if from <= self.offset {
            return Some(self.offset);
        }
        self.next_rel(from - self.offset, 0)
            .map(|r| r + self.offset)
    }

    /// Smallest sum over dimensions `i..` that is `>= rel` (ordered views).
    fn next_rel(&self, rel: usize, i: usize) -> Option<usize> {
        if rel == 0 {
            return Some(0);
        }
        let Some(d) = (i..self.sizes.len()).find(|&d| self.sizes[d] > 1) else {
            return None; // only the all-zero point is left, and rel > 0
        };
        let st = self.strides[d];
        let c = rel / st;
        if c >= self.sizes[d] {
            return None;
        }
        if let Some(sub) = self.next_rel(rel - c * st, d + 1) {
            return Some(c * st + sub);
        }
        (c + 1 < self.sizes[d]).then(|| (c + 1) * st)
    }

    /// Number of points whose base rank is `< x`.
    pub fn count_below(&self, x: usize) -> usize {
        if self.len == 0 {
            return 0;
        }
        if let Some(t) = &self.table {
            return t.partition_point(|e| e.0 < x);
        }
        if x <= self.offset {
            return 0;
        }
        let mut rel = x - self.offset;
        let mut count = 0usize;
        for i in 0..self.sizes.len() {
            if self.sizes[i] <= 1 {
                continue;
            }
            let c = rel / self.strides[i];
            if c >= self.sizes[i] {
                return count + self.sizes[i] * self.inner[i];
            }
            count += c * self.inner[i];
            rel -= c * self.strides[i];
        }
        // What is left: the point at offset `rel == 0` is not below x.
        count + usize::from(rel > 0)
    }

    /// Number of points with base rank in `range`.
    pub fn count_in(&self, range: std::ops::Range<usize>) -> usize {
        if range.start >= range.end {
            return 0;
        }
        self.count_below(range.end) - self.count_below(range.start)
    }

    /// Whether a point has its base rank in `range`.
    pub fn any_in(&self, range: std::ops::Range<usize>) -> bool {
        range.start < range.end
            && self
                .next_at_or_after(range.start)
                .is_some_and(|b| b < range.end)
    }

    /// The points with base rank in `range`, as (base rank, slot).
    pub fn points_in(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl Iterator<Item = (usize, u64)> + '_ {
        let mut at = range.start;
        std::iter::from_fn(move || {
            if at >= range.end {
                return None;
            }
            let b = self.next_at_or_after(at).filter(|&b| b < range.end)?;
            at = b + 1;
            Some((b, self.slot_of(b).expect("a point of the view")))
        })
    }
}

/// The base ranks below `at` (None: the root, i.e. all of them), one range
/// per tree level, top first, among `n` ranks. In the heap, the
/// descendants of a node at any one level are contiguous, so a subtree is
/// `depth` ranges.
pub fn levels(
    at: Option<usize>,
    k: usize,
    n: usize,
) -> impl Iterator<Item = std::ops::Range<usize>> {
    // Heap index h = base rank + 1 (the root is 0); level l below h starts
    // at f(l+1) = f(l)·k + 1 and is k^l wide.
    let mut first = at.map_or(0, |r| r + 1);
    let mut width = 1usize;
    std::iter::from_fn(move || {
        first = first.checked_mul(k)?.checked_add(1)?;
        width = width.checked_mul(k)?;
        let lo = first - 1;
        (lo < n).then(|| lo..lo.saturating_add(width).min(n))
    })
}

/// The subtree of base rank `r`: `r` itself, then its descendants by level.
pub fn subtree(r: usize, k: usize, n: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    std::iter::once(r..(r + 1).min(n)).chain(levels(Some(r), k, n))
}

/// Whether the subtree of `r` holds a point of `view`.
pub fn subtree_has_point(r: usize, k: usize, n: usize, view: &ViewIndex) -> bool {
    subtree(r, k, n).any(|lv| view.any_in(lv))
}

/// Number of points of `view` in the subtree of `r`.
pub fn subtree_count(r: usize, k: usize, n: usize, view: &ViewIndex) -> usize {
    subtree(r, k, n).map(|lv| view.count_in(lv)).sum()
}

/// The slots of `view` in the subtree of `r` (computed only when needed,
/// e.g. when `r` is lost while a cast through it is in flight).
pub fn subtree_slots<'a>(
    r: usize,
    k: usize,
    n: usize,
    view: &'a ViewIndex,
) -> impl Iterator<Item = u64> + 'a {
    subtree(r, k, n).flat_map(move |lv| view.points_in(lv).map(|(_, s)| s))
}

/// The node lists `route(None, k, <every point of the view>, no proc lost)`
/// gives, built level by level from the view's subtrees (sorted vectors,
/// no maps): one list per first hop, the hop first, then the nodes below
/// it by rank, each with its slot or `FORWARD_ONLY`. Still O(N) (every
/// point is listed), but several times cheaper than `route`.
pub fn view_node_lists(k: usize, n: usize, view: &ViewIndex) -> Vec<Vec<Node>> {
    view_hops(None, k, n, view, &|_| false)
        .hops
        .into_iter()
        .map(|h| subtree_nodes(h, k, n, view))
        .collect()
}

/// The nodes of `h`'s subtree a cast to `view` concerns (points, and the
/// nodes on their paths), `h` first, then by rank.
fn subtree_nodes(h: usize, k: usize, n: usize, view: &ViewIndex) -> Vec<Node> {
    let lv: Vec<std::ops::Range<usize>> = subtree(h, k, n).collect();
    let mut per_level: Vec<Vec<Node>> = vec![Vec::new(); lv.len()];
    let mut below: Vec<usize> = Vec::new();
    for (i, range) in lv.iter().enumerate().rev() {
        // Points at this level, and the parents of the nodes listed at the
        // level below (both ascending), merged.
        let mut points = view.points_in(range.clone()).peekable();
        let mut parents = below
            .iter()
            .map(|&c| parent(c, k).expect("below the hop"))
            .peekable();
        let mut out: Vec<Node> = Vec::new();
        loop {
            let p = points.peek().map(|&(b, _)| b);
            let q = parents.peek().copied();
            let next = match (p, q) {
                (None, None) => break,
                (Some(b), Some(r)) => b.min(r),
                (Some(b), None) => b,
                (None, Some(r)) => r,
            };
            let mut slot = FORWARD_ONLY;
            if p == Some(next) {
                slot = points.next().expect("peeked").1;
            }
            while parents.peek() == Some(&next) {
                parents.next();
            }
            out.push(Node { rank: next, slot });
        }
        below = out.iter().map(|m| m.rank).collect();
        per_level[i] = out;
    }
    per_level.concat()
}

/// Where a cast of a whole view goes from one node.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ViewHops {
    /// The first hops: each covers the points of its own subtree.
    pub hops: Vec<usize>,
    /// Points that cannot be reached (their proc is lost), as (rank, slot).
    pub lost: Vec<(usize, u64)>,
}

/// The first hops below `at` (None: the sender) of a cast to `view` over
/// `n` base ranks: the children whose subtree holds a point; a lost child
/// is bypassed (its children are considered instead, and its own point is
/// reported lost). O(K · depth · dims) without lost nodes, independent of
/// the number of points.
pub fn view_hops(
    at: Option<usize>,
    k: usize,
    n: usize,
    view: &ViewIndex,
    lost: &dyn Fn(usize) -> bool,
) -> ViewHops {
    let mut out = ViewHops {
        hops: Vec::with_capacity(k),
        lost: Vec::new(),
    };
    let mut todo: Vec<std::ops::Range<usize>> = Vec::with_capacity(4);
    todo.extend(levels(at, k, n).take(1));
    while let Some(range) = todo.pop() {
        for c in range.rev() {
            if !subtree_has_point(c, k, n, view) {
                continue;
            }
            if lost(c) {
                if let Some(slot) = view.slot_of(c) {
                    out.lost.push((c, slot));
                }
                todo.extend(levels(Some(c), k, n).take(1));
            } else {
                out.hops.push(c);
            }
        }
    }
    out.hops.sort_unstable();
    out.lost.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(ranks: &[usize]) -> Vec<Node> {
        ranks
            .iter()
            .enumerate()
            .map(|(slot, &rank)| Node {
                rank,
                slot: slot as u64,
            })
            .collect()
    }

    /// Deliver a cast by simulating every node; returns slot -> number of
    /// deliveries and the number of messages sent by the root.
    fn simulate(n: usize, k: usize, ranks: &[usize], lost: &[usize]) -> (Vec<u32>, usize, usize) {
        let is_lost = |r: usize| lost.contains(&r);
        let mut got = vec![0u32; ranks.len()];
        let root = route(None, k, members(ranks), &is_lost, false);
        let root_sends = root.hops.len();
        let mut queue: Vec<Vec<Node>> = root.hops;
        let mut max_depth = 0;
        let mut depth_q: Vec<usize> = vec![1; queue.len()];
        while let Some(nodes) = queue.pop() {
            let d = depth_q.pop().unwrap();
            max_depth = max_depth.max(d);
            let me = nodes[0];
            assert!(me.rank < n);
            assert!(!is_lost(me.rank), "sent to a lost node");
            if me.slot != FORWARD_ONLY {
                got[me.slot as usize] += 1;
            }
            let r = route(
                Some(me.rank),
                k,
                nodes[1..].iter().copied(),
                &is_lost,
                false,
            );
            for h in r.hops {
                // Every hop is a child of me, or below a lost child.
                let mut p = parent(h[0].rank, k);
                while p != Some(me.rank) {
                    let q = p.expect("hop is below the sender");
                    assert!(is_lost(q), "skipped a live node");
                    p = parent(q, k);
                }
                queue.push(h);
                depth_q.push(d + 1);
            }
        }
        (got, root_sends, max_depth)
    }

    #[test]
    fn every_point_exactly_once_and_root_sends_at_most_k() {
        for &(n, k) in &[(1, 16), (16, 16), (17, 16), (100, 4), (4096, 16), (1000, 2)] {
            let all: Vec<usize> = (0..n).collect();
            let (got, root_sends, depth) = simulate(n, k, &all, &[]);
            assert!(got.iter().all(|&c| c == 1), "n={n} k={k}");
            assert!(root_sends <= k);
            let mut levels = 0;
            let mut cap = 0;
            let mut width = 1;
            while cap < n {
                width *= k;
                cap += width;
                levels += 1;
            }
            assert!(depth <= levels, "n={n} k={k} depth={depth}");
        }
        // A strided slice: every 3rd rank of 300, fan-out 4.
        let ranks: Vec<usize> = (0..300).step_by(3).collect();
        let (got, _, _) = simulate(300, 4, &ranks, &[]);
        assert!(got.iter().all(|&c| c == 1));
    }

    #[test]
    fn path_to_a_rank_does_not_depend_on_the_slice() {
        // Rank 100 with k=4 is reached via the same first hop whatever
        // else is in the cast (FIFO per sender relies on this).
        let alone = route(None, 4, members(&[100]), &|_| false, false);
        let with = route(None, 4, members(&[1, 2, 100, 7]), &|_| false, false);
        let hop_of = |r: &Routes| {
            r.hops
                .iter()
                .find(|h| h.iter().any(|n| n.rank == 100))
                .unwrap()[0]
                .rank
        };
        assert_eq!(hop_of(&alone), hop_of(&with));
        assert_eq!(hop_of(&alone), 0); // 100 -> 24 -> 5 -> 0
        assert_eq!(children(5, 4, 1000), 24..28);
        assert_eq!(parent(24, 4), Some(5));
    }

    #[test]
    fn lost_nodes_are_bypassed_and_their_points_reported() {
        let all: Vec<usize> = (0..50).collect();
        let (got, _, _) = simulate(50, 3, &all, &[0, 4]);
        for (slot, &c) in got.iter().enumerate() {
            assert_eq!(c, u32::from(slot != 0 && slot != 4), "slot {slot}");
        }
        let r = route(None, 3, members(&all), &|x| x == 0 || x == 4, false);
        let mut lost: Vec<usize> = r.lost.iter().map(|n| n.rank).collect();
        lost.sort();
        assert_eq!(lost, vec![0, 4]);
    }

    #[test]
    fn relays_cover_the_subtree() {
        let all: Vec<usize> = (0..40).collect();
        let r = route(None, 3, members(&all), &|_| false, true);
        // Rank 0's subtree: 3,4,5, then 12..=20, then 39 (child of 12).
        let mut under0 = r.relays[&0].clone();
        under0.sort();
        let mut want = vec![3, 4, 5];
        want.extend(12..=20);
        want.push(39);
        want.sort();
        assert_eq!(under0, want.iter().map(|&x| x as u64).collect::<Vec<_>>());
    }

    /// Views to check the index against: dense, sliced, strided, split,
    /// one point, empty, and raw strides that are not ordered.
    fn views() -> Vec<crate::Shape> {
        use crate::Shape;
        let d = Shape::new(&[("a", 6), ("b", 10)]).unwrap();
        vec![
            d.clone(),
            d.select("b", Some(1), None, 3).unwrap(),
            d.select("a", Some(1), Some(5), 2)
                .unwrap()
                .select("b", Some(2), Some(9), 4)
                .unwrap(),
            d.at("a", 3).unwrap(),
            d.at("a", 5).unwrap().at("b", 9).unwrap(),
            d.select("b", Some(4), Some(4), 1).unwrap(),
            d.flatten("r")
                .unwrap()
                .split("r", &[("x", None), ("y", Some(4))])
                .unwrap(),
            Shape::new(&[("x", 1), ("y", 7), ("z", 1)]).unwrap(),
            // Transposed: strides increase inward.
            Shape::from_parts(vec!["a".into(), "b".into()], 2, vec![3, 4], vec![1, 3]).unwrap(),
        ]
    }

    #[test]
    fn view_index_matches_listing_the_points() {
        for v in views() {
            let idx = ViewIndex::new(&v).unwrap();
            let pts: Vec<(usize, u64)> = {
                let mut p: Vec<(usize, u64)> = v
                    .base_ranks()
                    .enumerate()
                    .map(|(s, b)| (b, s as u64))
                    .collect();
                p.sort();
                p
            };
            assert_eq!(idx.len(), pts.len());
            for b in 0..80 {
                let want = pts.iter().find(|p| p.0 == b).map(|p| p.1);
                assert_eq!(idx.slot_of(b), want, "{v} slot_of {b}");
                let next = pts.iter().find(|p| p.0 >= b).map(|p| p.0);
                assert_eq!(idx.next_at_or_after(b), next, "{v} next {b}");
                let below = pts.iter().filter(|p| p.0 < b).count();
                assert_eq!(idx.count_below(b), below, "{v} below {b}");
                for e in b..b + 9 {
                    let inr: Vec<(usize, u64)> = pts
                        .iter()
                        .copied()
                        .filter(|p| (b..e).contains(&p.0))
                        .collect();
                    assert_eq!(idx.count_in(b..e), inr.len());
                    assert_eq!(idx.any_in(b..e), !inr.is_empty());
                    assert_eq!(idx.points_in(b..e).collect::<Vec<_>>(), inr);
                }
            }
        }
        let dup = crate::Shape::from_parts(vec!["a".into()], 0, vec![3], vec![0]).unwrap();
        assert!(ViewIndex::new(&dup).is_err());
    }

    #[test]
    fn levels_are_the_subtree() {
        for &(n, k) in &[(1000, 3), (4096, 16), (50, 2)] {
            for r in [0, 1, 2, 7, 20] {
                let mut want: Vec<usize> = Vec::new();
                let mut todo = vec![r];
                while let Some(x) = todo.pop() {
                    want.push(x);
                    todo.extend(children(x, k, n));
                }
                want.sort();
                let got: Vec<usize> = subtree(r, k, n).flatten().collect();
                assert_eq!(got, want, "n={n} k={k} r={r}");
            }
            let all: Vec<usize> = levels(None, k, n).flatten().collect();
            assert_eq!(all, (0..n).collect::<Vec<_>>());
        }
    }

    /// Deliver a cast of a view by simulating every node with `view_hops`;
    /// returns slot -> deliveries, the root's sends, slots reported lost.
    fn simulate_view(
        n: usize,
        k: usize,
        v: &crate::Shape,
        lost: &[usize],
    ) -> (Vec<u32>, usize, Vec<u64>) {
        let idx = ViewIndex::new(v).unwrap();
        let is_lost = |r: usize| lost.contains(&r);
        let mut got = vec![0u32; idx.len()];
        let root = view_hops(None, k, n, &idx, &is_lost);
        let mut lost_slots: Vec<u64> = root.lost.iter().map(|l| l.1).collect();
        let sends = root.hops.len();
        let mut queue = root.hops;
        while let Some(at) = queue.pop() {
            assert!(!is_lost(at));
            if let Some(s) = idx.slot_of(at) {
                got[s as usize] += 1;
            }
            let h = view_hops(Some(at), k, n, &idx, &is_lost);
            lost_slots.extend(h.lost.iter().map(|l| l.1));
            for hop in &h.hops {
                // A child of `at`, or below a lost child.
                let mut p = parent(*hop, k);
                while p != Some(at) {
                    assert!(is_lost(p.unwrap()));
                    p = parent(p.unwrap(), k);
                }
            }
            queue.extend(h.hops);
        }
        lost_slots.sort();
        (got, sends, lost_slots)
    }

    #[test]
    fn view_casts_reach_every_point_once_along_the_same_paths() {
        for v in views() {
            let n = v.max_base_rank().map_or(1, |m| m + 1) + 5;
            for k in [2, 3, 16] {
                let (got, sends, lost) = simulate_view(n, k, &v, &[]);
                assert!(got.iter().all(|&c| c == 1), "{v} k={k}");
                assert!(sends <= k);
                assert!(lost.is_empty());
                // The first hop of every point is the one `route` picks
                // (so direct calls and casts share paths: FIFO).
                let idx = ViewIndex::new(&v).unwrap();
                let hops = view_hops(None, k, n, &idx, &|_| false).hops;
                for (slot, b) in v.base_ranks().enumerate() {
                    let r = route(
                        None,
                        k,
                        [Node {
                            rank: b,
                            slot: slot as u64,
                        }],
                        &|_| false,
                        false,
                    );
                    let first = r.hops[0][0].rank;
                    assert!(hops.contains(&first));
                    assert!(subtree(first, k, n).any(|lv| lv.contains(&b)));
                }
            }
        }
        // Lost nodes: their own points are reported, the rest reached.
        let all = crate::Shape::new(&[("x", 50)]).unwrap();
        let (got, _, lost) = simulate_view(50, 3, &all, &[0, 4, 13]);
        assert_eq!(lost, vec![0, 4, 13]);
        for (slot, &c) in got.iter().enumerate() {
            assert_eq!(c, u32::from(![0, 4, 13].contains(&slot)), "slot {slot}");
        }
        // A lost node's subtree, computed when it is lost.
        let idx = ViewIndex::new(&all).unwrap();
        let mut sub: Vec<u64> = subtree_slots(4, 3, 50, &idx).collect();
        sub.sort();
        assert_eq!(sub, vec![4, 15, 16, 17, 48, 49]);
        assert_eq!(subtree_count(4, 3, 50, &idx), 6);
    }

    #[test]
    fn the_root_looks_at_first_hops_not_points() {
        // 16 million points: issuing must not walk them (this would take
        // seconds if it did; it must finish at once whatever the load).
        let n = 1 << 24;
        let big = crate::Shape::new(&[("a", 4096), ("b", 4096)]).unwrap();
        let idx = ViewIndex::new(&big).unwrap();
        let h = view_hops(None, 16, n, &idx, &|_| false);
        assert_eq!(h.hops, (0..16).collect::<Vec<_>>());
        let total: usize = h.hops.iter().map(|&r| subtree_count(r, 16, n, &idx)).sum();
        assert_eq!(total, n);
    }

    #[test]
    fn lazy_relays_match_the_recorded_ones() {
        for v in views() {
            let bases: Vec<usize> = v.base_ranks().collect();
            let n = bases.iter().max().map_or(1, |m| m + 1) + 3;
            for k in [2, 3] {
                for lost in [vec![], vec![0], vec![1, 4]] {
                    let is_lost = |r: usize| lost.contains(&r);
                    let eager = route(None, k, members(&bases), &is_lost, true);
                    let lazy = LazyRelays::new(
                        ViewIndex::new(&v).unwrap(),
                        k,
                        n,
                        lost.iter().map(|r| r.to_string()).collect(),
                        Box::new(|p: &str| vec![p.parse().unwrap()]),
                    );
                    for r in 0..n {
                        if is_lost(r) {
                            assert!(lazy.slots_through(&r.to_string()).is_empty());
                            continue;
                        }
                        let mut want = eager.relays.get(&r).cloned().unwrap_or_default();
                        want.sort();
                        // Points on lost procs were failed when sent; the
                        // lazy set may name them again (harmless: filled).
                        let mut got: Vec<u64> = lazy
                            .slots_through(&r.to_string())
                            .into_iter()
                            .filter(|&s| !is_lost(bases[s as usize]))
                            .collect();
                        got.sort();
                        assert_eq!(got, want, "{v} k={k} lost={lost:?} r={r}");
                    }
                }
            }
        }
    }

    #[test]
    fn view_node_lists_are_what_route_gives() {
        for v in views() {
            let bases: Vec<usize> = v.base_ranks().collect();
            let n = bases.iter().max().map_or(1, |m| m + 1) + 7;
            for k in [2, 3, 16] {
                let idx = ViewIndex::new(&v).unwrap();
                let want = route(None, k, members(&bases), &|_| false, false).hops;
                assert_eq!(view_node_lists(k, n, &idx), want, "{v} k={k}");
            }
        }
        let big = crate::Shape::new(&[("a", 64), ("b", 64)]).unwrap();
        for v in [big.clone(), big.select("b", Some(5), None, 9).unwrap()] {
            let bases: Vec<usize> = v.base_ranks().collect();
            let idx = ViewIndex::new(&v).unwrap();
            let want = route(None, 16, members(&bases), &|_| false, false).hops;
            assert_eq!(view_node_lists(16, 4096, &idx), want, "{v}");
        }
    }
}
