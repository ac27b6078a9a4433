//! Multicast over real `monarch worker` procs with fan-out 2 (so an
//! 8-proc mesh is a tree of three levels: 0 -> {2, 3}, 1 -> {4, 5},
//! 2 -> {6, 7}): forwarding procs free their relay state (the collection
//! of their subtree's replies) once casts complete, also when a proc below
//! them is lost mid-cast; the controller's set of lost procs does not keep
//! the procs of stopped meshes. Timeouts only turn a hang into a failure.

use std::sync::Once;
use std::time::{Duration, Instant};

use monarch_core::{ActorMesh, CallMode, MeshView, ProcMesh, Runtime, Shape};

/// Upper bound for any single wait; only there to turn a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

mod common;
use common::{call, exit_behind_gate, i64_of, wait, worker_argv, Controller};

fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: set once, before any thread of this test binary reads it.
        std::env::set_var("MONARCH_CAST_FANOUT", "2");
    });
}

/// 8 worker procs with an `echo` actor each (casts to them go down a
/// tree of fan-out 2).
fn echo_mesh(c: &Controller) -> (ProcMesh, ActorMesh) {
    init();
    let pm = ProcMesh::spawn(
        &c.rt,
        Shape::new(&[("gpus", 8)]).unwrap(),
        &worker_argv(),
        &[],
    )
    .unwrap();
    let (am, ready) = pm.spawn_actors("echo", "echo", &[]).unwrap();
    assert!(wait(&ready).values.iter().all(|v| !v.is_err()));
    (pm, am)
}

/// Relays in flight at each listed rank (asked one rank at a time, so no
/// query of ours is in flight at the rank that answers).
fn relays(am: &ActorMesh, ranks: &[usize]) -> Vec<i64> {
    ranks
        .iter()
        .map(|&r| i64_of(&call(&am.at("gpus", r).unwrap(), "relays", &[]).values[0]))
        .collect()
}

#[test]
fn relays_are_freed_after_casts_and_losses_and_the_lost_set_is_bounded() {
    init();
    let c = Controller {
        rt: Runtime::new().expect("controller runtime"),
    };
    let argv = worker_argv();
    let pm = ProcMesh::spawn(&c.rt, Shape::new(&[("gpus", 8)]).unwrap(), &argv, &[]).unwrap();
    let (am, ready) = pm.spawn_actors("echo", "echo", &[]).unwrap();
    assert!(wait(&ready).values.iter().all(|v| !v.is_err()));
    let all: Vec<usize> = (0..8).collect();
    for _ in 0..3 {
        let vm = call(&am, "rank", &[]);
        let ranks: Vec<i64> = vm.values.iter().map(i64_of).collect();
        assert_eq!(ranks, (0..8).collect::<Vec<i64>>());
        let strided = am.select("gpus", Some(1), None, 3).unwrap(); // 1, 4, 7
        let vm = call(&strided, "rank", &[]);
        assert_eq!(vm.values.iter().map(i64_of).collect::<Vec<_>>(), [0, 1, 2]);
        let vm = call(&am, "fail", &[]);
        assert!(vm.values.iter().all(|v| v.is_err()));
    }
    assert_eq!(relays(&am, &all), vec![0; 8], "relay state left behind");

    // Rank 7 (below forwarder 2, below 0) exits once the gate file exists:
    // the broadcast below is queued behind its exit, so 2 and 0 hold relays
    // for it when 7 is lost.
    let (gate, exit) = exit_behind_gate(&am, 7, "cast-gate");
    let cast = am.call("rank", &[], CallMode::All).unwrap().unwrap();
    gate.open();
    let vm_exit = wait(&exit);
    let vm = wait(&cast);
    drop(gate);
    assert!(vm_exit.values[0].is_err());
    for (r, v) in vm.values.iter().enumerate() {
        if r == 7 {
            assert!(v.is_err(), "rank 7 should have failed");
        } else {
            assert_eq!(i64_of(v), r as i64);
        }
    }
    // The forwarders let go of both casts' relays.
    let live: Vec<usize> = (0..7).collect();
    let deadline = Instant::now() + HANG;
    loop {
        let left = relays(&am, &live);
        if left == vec![0; 7] {
            break;
        }
        assert!(Instant::now() < deadline, "relays left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The dead proc is remembered (casts route around it) while its mesh
    // lives, and forgotten when the mesh is stopped.
    assert_eq!(c.rt.lost_count(), 1);
    let left = am.select("gpus", None, Some(7), 1).unwrap();
    let vm = call(&left, "rank", &[]);
    assert_eq!(
        vm.values.iter().map(i64_of).collect::<Vec<_>>(),
        (0..7).collect::<Vec<i64>>()
    );
    let _ = wait(&pm.stop());
    assert_eq!(
        c.rt.lost_count(),
        0,
        "the lost set keeps procs of a stopped mesh"
    );

    // Spawning and stopping more meshes does not grow it either.
    for _ in 0..2 {
        let pm = ProcMesh::spawn(&c.rt, Shape::new(&[("gpus", 4)]).unwrap(), &argv, &[]).unwrap();
        let (am, ready) = pm.spawn_actors("echo", "echo", &[]).unwrap();
        wait(&ready);
        assert_eq!(call(&am, "rank", &[]).values.len(), 4);
        let _ = wait(&pm.stop());
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.rt.lost_count(), 0);
}

/// Per rank: casts received carrying the view, and address tables known
/// (asked one rank at a time, in rank order, so that the same questions
/// asked twice add the same counts).
fn view_casts(am: &ActorMesh) -> Vec<(i64, i64)> {
    let num = |p: &Vec<u8>| i64::from_le_bytes(p.as_slice().try_into().expect("8 bytes"));
    (0..8)
        .map(
            |r| match &call(&am.at("gpus", r).unwrap(), "view_casts", &[]).values[0] {
                monarch_core::PointValue::Ok(p) => (num(&p[0]), num(&p[1])),
                e => panic!("view_casts failed: {e:?}"),
            },
        )
        .collect()
}

/// The procs of the 8-proc, fan-out-2 tree a cast to `points` passes
/// through (the points and their ancestors); none when every point is a
/// child of the sender (sent to directly, no tree).
fn on_paths(points: &[usize]) -> [bool; 8] {
    let mut on = [false; 8];
    if points.iter().all(|&p| p < 2) {
        return on;
    }
    for &p in points {
        let mut r = Some(p);
        while let Some(x) = r {
            on[x] = true;
            r = (x >= 2).then(|| (x - 2) / 2);
        }
    }
    on
}

#[test]
fn casts_to_a_mesh_we_spawned_carry_the_view_down_the_tree() {
    let c = Controller {
        rt: Runtime::new().expect("controller runtime"),
    };
    let (pm, am) = echo_mesh(&c);
    let before = view_casts(&am);
    // The spawn's node lists left each forwarder (0, 1, 2) the addresses
    // of its subtree; leaves keep none.
    let tables: Vec<i64> = before.iter().map(|c| c.1).collect();
    assert_eq!(tables, [1, 1, 1, 0, 0, 0, 0, 0]);

    let vm = call(&am, "rank", &[]);
    assert_eq!(
        vm.values.iter().map(i64_of).collect::<Vec<_>>(),
        (0..8).collect::<Vec<i64>>()
    );
    // 1, 4, 7: through 0 and 2 (forward only) to 7, through 1 to 4.
    let strided = am.select("gpus", Some(1), None, 3).unwrap();
    let vm = call(&strided, "rank", &[]);
    assert_eq!(vm.values.iter().map(i64_of).collect::<Vec<_>>(), [0, 1, 2]);
    // 0, 2, 4, 6, and a slice of that slice: 2, 6.
    let even = am.select("gpus", Some(0), None, 2).unwrap();
    let vm = call(&even, "rank", &[]);
    assert_eq!(
        vm.values.iter().map(i64_of).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    let vm = call(&even.select("gpus", Some(1), None, 2).unwrap(), "rank", &[]);
    assert_eq!(vm.values.iter().map(i64_of).collect::<Vec<_>>(), [0, 1]);
    // Every proc on the way got the view (not lists), once per cast:
    // the procs on the paths to the points of each cast above, plus those
    // of one read of every rank (between the two reads of rank r, the
    // first series read ranks after r and the second ranks up to r).
    let mut want = [0i64; 8];
    let casts: [&[usize]; 4] = [
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &[1, 4, 7],
        &[0, 2, 4, 6],
        &[2, 6],
    ];
    let reads: Vec<[usize; 1]> = (0..8).map(|r| [r]).collect();
    for points in casts.into_iter().chain(reads.iter().map(|r| &r[..])) {
        for (w, on) in want.iter_mut().zip(on_paths(points)) {
            *w += i64::from(on);
        }
    }
    let after = view_casts(&am);
    let got: Vec<i64> = after.iter().zip(&before).map(|(a, b)| a.0 - b.0).collect();
    assert_eq!(got, want);
    let _ = wait(&pm.stop());
}

#[test]
fn every_proc_casting_to_its_own_mesh_gets_every_reply() {
    // Each sender is a point of the mesh it casts to, and (but for 0 and
    // 1) below other procs of it in the tree: the cast must not come
    // back to it through them, and its subtree must still be reached.
    let c = Controller {
        rt: Runtime::new().expect("controller runtime"),
    };
    let (pm, am) = echo_mesh(&c);
    let me = am.to_ref();
    let ranks: Vec<u8> = (0..8i64).flat_map(|r| r.to_le_bytes()).collect();
    for _ in 0..3 {
        let vm = call(&am, "cast_rank", &[&me]);
        for (r, v) in vm.values.iter().enumerate() {
            match v {
                monarch_core::PointValue::Ok(p) => {
                    assert_eq!(
                        p,
                        std::slice::from_ref(&ranks),
                        "proc {r} got other replies"
                    )
                }
                e => panic!("proc {r} casting to its own mesh: {e:?}"),
            }
        }
    }
    // Nothing is left waiting in the forwarders.
    assert_eq!(relays(&am, &(0..8).collect::<Vec<_>>()), vec![0; 8]);
    let _ = wait(&pm.stop());
}
