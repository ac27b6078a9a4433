//! Soak: 200 rounds of spawn -> call -> kill a random rank -> observe the
//! failure (the call in flight fails, the owner gets one event, later calls
//! fail at once) -> stop. Afterwards no child process is left, and this
//! process's threads and file descriptors have not grown round over round.

use std::time::Duration;

use monarch_core::{CallMode, FailureCause, MeshView, ProcMesh, Runtime, Shape};

const HANG: Duration = Duration::from_secs(30);
const ROUNDS: usize = 200;
const PROCS: usize = 3;

mod common;
use common::{i64_of, wait, worker_argv};

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn children() -> usize {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            stat.rfind(')')
                .and_then(|i| stat[i + 2..].split(' ').nth(1))
                .is_some_and(|ppid| ppid == me)
        })
        .count()
}

#[test]
fn spawn_kill_stop_200_rounds_leaks_nothing() {
    let rt = Runtime::new().unwrap();
    let argv = worker_argv();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut baseline = None;
    for round in 0..ROUNDS {
        let pm = ProcMesh::spawn(&rt, Shape::new(&[("gpus", PROCS)]).unwrap(), &argv, &[]).unwrap();
        let (am, ready) = pm.spawn_actors("soak", "echo", &[]).unwrap();
        assert!(ready.wait(Some(HANG)), "round {round}: spawn hung");
        let f = am.call("pid", &[], CallMode::All).unwrap().unwrap();
        assert!(f.wait(Some(HANG)), "round {round}: call hung");
        let pids: Vec<i32> = wait(&f).values.iter().map(|v| i64_of(v) as i32).collect();
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let victim = (seed >> 33) as usize % PROCS;
        let inflight = am
            .at("gpus", victim)
            .unwrap()
            .call("sleep", &[&10_000i64.to_le_bytes()], CallMode::One)
            .unwrap()
            .unwrap();
        // SAFETY: plain syscall on our child.
        unsafe { libc::kill(pids[victim], libc::SIGKILL) };
        assert!(
            inflight.wait(Some(HANG)),
            "round {round}: in-flight call hung"
        );
        assert!(inflight.take().unwrap().unwrap().values[0].is_err());
        let ev = rt.next_supervision_event(Some(HANG)).expect("event");
        assert_eq!(ev.cause, FailureCause::Signal, "round {round}");
        assert_eq!(ev.ranks, vec![victim as u64], "round {round}");
        assert!(am.call("echo", &[b"x"], CallMode::All).is_err());
        let stop = pm.stop();
        assert!(stop.wait(Some(HANG)), "round {round}: stop hung");
        if round == 10 {
            // After warm-up (lazily started threads, cached descriptors).
            std::thread::sleep(Duration::from_millis(200));
            baseline = Some((count("/proc/self/task"), count("/proc/self/fd")));
        }
    }
    assert!(
        rt.next_supervision_event(Some(Duration::from_millis(100)))
            .is_err(),
        "stopping produced supervision events"
    );
    // Reaper and stop threads end shortly after their procs.
    let (threads0, fds0) = baseline.unwrap();
    let mut last = (0, 0, 0);
    for _ in 0..100 {
        last = (children(), count("/proc/self/task"), count("/proc/self/fd"));
        if last.0 == 0 && last.1 <= threads0 + 2 && last.2 <= fds0 + 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (kids, threads, fds) = last;
    assert_eq!(kids, 0, "child processes left after {ROUNDS} rounds");
    assert!(
        threads <= threads0 + 2,
        "threads grew: {threads0} after warm-up, {threads} at the end"
    );
    assert!(
        fds <= fds0 + 2,
        "descriptors grew: {fds0} after warm-up, {fds} at the end"
    );
    rt.shutdown();
}
