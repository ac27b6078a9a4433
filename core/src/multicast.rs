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
//! the child's points with an error itself. Replies go straight to the
//! sender (or to `reply_to`), not up the tree.

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
}
