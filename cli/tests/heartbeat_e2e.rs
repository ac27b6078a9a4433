//! Heartbeats against real `monarch worker` procs: a proc whose actor is
//! busy keeps answering; a hung proc (SIGSTOP) is declared failed after the
//! timeout, killed, and handled like a death. Its own test binary, because
//! the timeout is read from the environment once per process.

use std::time::{Duration, Instant};

use monarch_core::{CallMode, ErrorKind, FailureCause, MeshView, ProcMesh, Runtime, Shape};

const HANG: Duration = Duration::from_secs(30);

mod common;
use common::{i64_of, wait, worker_argv};

#[test]
fn a_hung_proc_is_declared_failed_after_the_timeout() {
    // Set before the first runtime of this process reads it.
    std::env::set_var("MONARCH_HEARTBEAT_TIMEOUT_MS", "1000");
    let rt = Runtime::new().unwrap();
    let argv = worker_argv();
    let pm = ProcMesh::spawn(&rt, Shape::new(&[("gpus", 2)]).unwrap(), &argv, &[]).unwrap();
    let (am, ready) = pm.spawn_actors("hb", "echo", &[]).unwrap();
    assert!(ready.wait(Some(HANG)));
    let f = am.call("pid", &[], CallMode::All).unwrap().unwrap();
    assert!(f.wait(Some(HANG)));
    let pids: Vec<i32> = wait(&f).values.iter().map(|v| i64_of(v) as i32).collect();

    // Busy for 3 timeouts: still alive (the proc's I/O thread answers).
    let busy = am
        .call("sleep", &[&3000i64.to_le_bytes()], CallMode::All)
        .unwrap()
        .unwrap();
    assert!(busy.wait(Some(HANG)));
    let vm = busy.take().unwrap().unwrap();
    assert!(vm.values.iter().all(|v| !v.is_err()), "{vm:?}");
    match rt.next_supervision_event(Some(Duration::from_millis(10))) {
        Err(e) => assert_eq!(e.kind, ErrorKind::Timeout),
        Ok(ev) => panic!("a busy proc was declared failed: {ev:?}"),
    }

    // Hung: SIGSTOP rank 1 while a call to it is in flight.
    let inflight = am
        .at("gpus", 1)
        .unwrap()
        .call("sleep", &[&200i64.to_le_bytes()], CallMode::One)
        .unwrap()
        .unwrap();
    // SAFETY: plain syscall on our child.
    unsafe { libc::kill(pids[1], libc::SIGSTOP) };
    let stopped = Instant::now();
    let ev = rt.next_supervision_event(Some(HANG)).expect("an event");
    let took = stopped.elapsed();
    assert_eq!(ev.cause, FailureCause::HeartbeatLost, "{ev:?}");
    assert_eq!(ev.ranks, vec![1]);
    assert!(ev.report.contains("heartbeats"), "{}", ev.report);
    // Silence is counted from the proc's last answer, which can precede the
    // stop by up to one probe interval (a quarter of the timeout) plus
    // scheduling delay, so only half the timeout is certain to elapse after
    // SIGSTOP. The busy phase above is what proves a slow proc is not
    // declared failed early.
    assert!(
        took >= Duration::from_millis(500),
        "declared failed after only {took:?}"
    );
    assert!(inflight.wait(Some(HANG)));
    let _ = inflight.take();
    let e = am
        .call("rank", &[], CallMode::All)
        .err()
        .expect("fails at once");
    assert_eq!(e.kind, ErrorKind::ProcFailed);
    assert!(e.message.contains("heartbeats"), "{e}");
    // Rank 0 still works; the hung process is gone.
    let f = am
        .at("gpus", 0)
        .unwrap()
        .call("rank", &[], CallMode::One)
        .unwrap()
        .unwrap();
    assert!(f.wait(Some(HANG)));
    assert!(!f.take().unwrap().unwrap().values[0].is_err());
    let deadline = Instant::now() + HANG;
    while std::path::Path::new(&format!("/proc/{}", pids[1])).exists() && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!std::path::Path::new(&format!("/proc/{}", pids[1])).exists());
    assert!(pm.stop().wait(Some(HANG)));
    rt.shutdown();
}
