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
//! A sender that is itself a proc of the mesh (a worker casting to its own
//! mesh) delivers its own points in-process, and every node routes around
//! it as around a lost node (the sender's address is in every cast): a
//! peer never relays a proc its own cast, which it would refuse (no peer
//! may name a proc as the sender to that proc, `runtime::trust`).
//!
//! Replies: a gather's replies travel back **up** the tree: each forwarding
//! proc collects its subtree's replies (its own actor's included) and sends
//! them to its parent in one batch (`runtime/cast.rs`, `local.rs`), so the
//! sender takes in at most K batches per cast. `stream()` and port replies
//! go straight to the port's proc (or `reply_to`).
//!
//! Two ways to describe a cast's points to a node:
//! - [`route`]: explicit node lists (base rank, slot, address per node).
//!   Between OS processes a forwarder needs its descendants' addresses:
//!   the SpawnActor cast of an actor mesh carries such lists, and each proc
//!   keeps the addresses of its subtree under the proc mesh's
//!   [`table_id`]. Lists are also what is sent while a proc is lost (they
//!   route around it) and to meshes not spawned by the sender. The
//!   sender's work is then O(N) (it lists every point once, in K messages).
//! - [`view_hops`] with a [`ViewIndex`]: the cast carries the view itself;
//!   a node's subtree is `depth` contiguous ranges of base ranks
//!   ([`levels`]), so each node, the sender included, finds its first hops
//!   in O(K · depth · dims) without looking at the points, and the points
//!   below a lost node are computed only when it is lost
//!   ([`subtree_slots`]). Used by in-process procs (`local.rs`), and
//!   between OS processes for casts to a mesh the sender spawned: each
//!   receiving proc lists its own subtree ([`subtree_nodes`]) and takes
//!   the addresses from its table.

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
#[cfg(test)]
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
    /// Slots the sender delivered itself (its own points: the tree routes
    /// around the sender), never through a forwarder.
    delivered_here: Vec<u64>,
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
            delivered_here: Vec::new(),
        }
    }

    /// The same, for a cast whose sender delivered `slots` itself.
    pub fn delivered_here(mut self, slots: Vec<u64>) -> LazyRelays {
        self.delivered_here = slots;
        self
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
            out.extend(
                subtree_slots(r, self.k, self.n, &self.view)
                    .filter(|s| Some(*s) != own && !self.delivered_here.contains(s)),
            );
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
    #[cfg(test)]
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
    #[cfg(test)]
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
#[cfg(test)]
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
/// nodes on their paths), `h` first, then by rank (empty when the subtree
/// holds no point). A proc that receives a cast carrying the view lists
/// its own part of it with this.
pub fn subtree_nodes(h: usize, k: usize, n: usize, view: &ViewIndex) -> Vec<Node> {
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

/// The id of a proc mesh's address table: a hash of its proc addresses
/// (FNV-1a, the same in every process), never 0. The same id names the
/// same address list, whoever spawned on it, so tables learned from
/// different senders merge consistently.
pub fn table_id(procs: &[String]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in procs {
        for &b in p.as_bytes().iter().chain(std::iter::once(&0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h.max(1)
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
mod tests;
