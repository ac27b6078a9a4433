//! Tests of `multicast`.

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
fn lazy_relays_leave_out_points_the_sender_delivered_itself() {
    // A sender that is a proc of the mesh is routed around like a lost
    // proc and delivers its own point itself: no forwarder's loss fails it.
    for v in views() {
        let bases: Vec<usize> = v.base_ranks().collect();
        let n = bases.iter().max().map_or(1, |m| m + 1) + 3;
        let idx = ViewIndex::new(&v).unwrap();
        for k in [2, 3] {
            for (own, &me) in bases.iter().enumerate() {
                let is_me = |r: usize| r == me;
                let eager = route(None, k, members(&bases), &is_me, true);
                assert_eq!(
                    eager.lost,
                    [Node {
                        rank: me,
                        slot: own as u64
                    }]
                );
                let lazy = LazyRelays::new(
                    idx.clone(),
                    k,
                    n,
                    Vec::new(),
                    Box::new(|p: &str| vec![p.parse().unwrap()]),
                )
                .delivered_here(vec![own as u64]);
                for r in (0..n).filter(|&r| r != me) {
                    let mut want = eager.relays.get(&r).cloned().unwrap_or_default();
                    want.sort();
                    let mut got = lazy.slots_through(&r.to_string());
                    got.sort();
                    assert_eq!(got, want, "{v} k={k} me={me} r={r}");
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

/// A random view: a 1- to 3-d mesh of up to ~1,500 procs, sliced with
/// random starts and steps, sometimes a fixed index.
fn random_view(seed: &mut u64) -> crate::Shape {
    let mut next = |m: usize| {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed % m as u64) as usize
    };
    let dims = 1 + next(3);
    let labels = ["a", "b", "c"];
    let sizes: Vec<(&str, usize)> = (0..dims).map(|d| (labels[d], 1 + next(12))).collect();
    let mut v = crate::Shape::new(&sizes).unwrap();
    for &(label, size) in &sizes {
        match next(4) {
            0 => {}
            1 if v.labels().len() > 1 => v = v.at(label, next(size)).unwrap(),
            _ => {
                let start = next(size) as i64;
                let step = 1 + next(4) as i64;
                v = v.select(label, Some(start), None, step).unwrap();
            }
        }
    }
    v
}

#[test]
fn a_forwarders_subtree_from_the_view_is_the_list_it_was_sent() {
    // What each node of the tree receives as explicit node lists (`route`
    // at every level) is exactly what it computes from the view itself
    // (`subtree_nodes`): a cast carrying the view reaches the same nodes
    // with the same points.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..300 {
        let v = random_view(&mut seed);
        let bases: Vec<usize> = v.base_ranks().collect();
        let n = bases.iter().max().map_or(1, |m| m + 1) + (seed % 20) as usize;
        let idx = ViewIndex::new(&v).unwrap();
        for k in [2, 3, 16] {
            let mut queue = route(None, k, members(&bases), &|_| false, false).hops;
            let mut nodes_seen = 0;
            while let Some(nodes) = queue.pop() {
                let me = nodes[0].rank;
                assert_eq!(
                    subtree_nodes(me, k, n, &idx),
                    nodes,
                    "{v} k={k} n={n} at {me}"
                );
                nodes_seen += 1;
                let below = route(Some(me), k, nodes[1..].iter().copied(), &|_| false, false);
                queue.extend(below.hops);
            }
            assert!(nodes_seen >= usize::from(!bases.is_empty()));
        }
    }
}

#[test]
fn table_ids_name_the_address_list() {
    let a: Vec<String> = (0..20).map(|i| format!("tcp:10.0.0.{i}:1")).collect();
    let mut b = a.clone();
    assert_eq!(table_id(&a), table_id(&b));
    b.swap(3, 4);
    assert_ne!(table_id(&a), table_id(&b));
    // Address boundaries count: ["ab", "c"] is not ["a", "bc"].
    assert_ne!(
        table_id(&["ab".to_string(), "c".to_string()]),
        table_id(&["a".to_string(), "bc".to_string()])
    );
    assert_ne!(table_id(&[]), 0);
}
