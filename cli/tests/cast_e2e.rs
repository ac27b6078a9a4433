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
