//! Supervision end to end, against real `monarch worker` procs: failures
//! are caused for real (SIGKILL, SIGSEGV, an endpoint raising under
//! broadcast, a message to a stopped actor) and must show up as supervision
//! events at the controller, fail calls in flight promptly, and make later
//! calls to views holding the failed rank fail at once. Deadlines here only
//! turn a hang into a failure; they are generous for a loaded machine.

use std::time::{Duration, Instant};

use monarch_core::{
    ActorMesh, CallMode, ErrorKind, FailureCause, MeshView, ProcMesh, Shape, SupervisionEvent,
};

/// Upper bound for any single wait; only there to turn a hang into a failure.
const HANG: Duration = Duration::from_secs(30);

mod common;
use common::{call, err_msg, i64_of, wait, worker_argv, Controller};

impl Controller {
    fn procs(&self, n: usize) -> ProcMesh {
        let shape = Shape::new(&[("gpus", n)]).unwrap();
        ProcMesh::spawn(&self.rt, shape, &worker_argv(), &[]).expect("spawn procs")
    }

    fn event(&self) -> SupervisionEvent {
        self.rt
            .next_supervision_event(Some(HANG))
            .expect("a supervision event")
    }

    fn no_event(&self, wait: Duration) {
        match self.rt.next_supervision_event(Some(wait)) {
            Err(e) => assert_eq!(e.kind, ErrorKind::Timeout, "{e}"),
            Ok(ev) => panic!("unexpected supervision event: {ev:?}"),
        }
    }
}

fn spawn(pm: &ProcMesh, name: &str) -> ActorMesh {
    let (am, ready) = pm.spawn_actors(name, "echo", &[]).expect("spawn actors");
    for v in wait(&ready).values {
        assert!(!v.is_err(), "{v:?}");
    }
    am
}

fn pids(am: &ActorMesh) -> Vec<i32> {
    call(am, "pid", &[])
        .values
        .iter()
        .map(|v| i64_of(v) as i32)
        .collect()
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: plain syscall on a child of this test.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z"))
        .unwrap_or(false)
}

#[test]
fn killed_proc_fails_calls_in_flight_and_reaches_the_owner() {
    for (sig, name) in [(libc::SIGKILL, "SIGKILL"), (libc::SIGSEGV, "SIGSEGV")] {
        let c = Controller::new();
        let pm = c.procs(4);
        let am = spawn(&pm, "workers");
        let other = spawn(&pm.select("gpus", Some(0), Some(2), 1).unwrap(), "others");
        let pids = pids(&am);

        // A long call to the victim and a short call to every rank (for
        // SIGSEGV the victim crashes on its next message instead).
        let victim = am.at("gpus", 2).unwrap();
        let ms: i64 = if sig == libc::SIGKILL { 20_000 } else { 300 };
        let long = victim
            .call("sleep", &[&ms.to_le_bytes()], CallMode::One)
            .unwrap()
            .unwrap();
        let all = am
            .call("sleep", &[&300i64.to_le_bytes()], CallMode::All)
            .unwrap()
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let killed = Instant::now();
        if sig == libc::SIGKILL {
            kill(pids[2], sig);
        } else {
            // A real crash (a signal sent with kill() would only reach
            // Rust's stack-overflow handler, which ignores it).
            am.at("gpus", 2)
                .unwrap()
                .call("segv", &[], CallMode::Broadcast)
                .unwrap();
        }
        let vm = wait(&long);
        let took = killed.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "in-flight call took {took:?} to fail"
        );
        if sig == libc::SIGKILL {
            let m = err_msg(&vm.values[0]);
            assert!(m.contains(name), "{m}");
        }
        // The other ranks' replies still arrive.
        let vm = wait(&all);
        for (r, v) in vm.values.iter().enumerate() {
            // (With SIGSEGV, rank 2 crashes only after answering `all`, an
            // answer that may or may not have left before the crash.)
            if r != 2 || sig == libc::SIGKILL {
                assert_eq!(v.is_err(), r == 2, "rank {r}: {v:?}");
            }
        }

        // The owner (this controller's top level) gets one event.
        let ev = c.event();
        assert_eq!(ev.cause, FailureCause::Signal);
        assert_eq!(ev.code, sig);
        assert_eq!(ev.ranks, vec![2]);
        assert!(ev.mesh.starts_with("procs."), "{ev:?}");
        assert!(
            ev.report.contains(name) && ev.report.contains("'workers'"),
            "{}",
            ev.report
        );
        c.no_event(Duration::from_millis(300));

        // Later calls to any view holding rank 2 fail at once.
        for view in [am.clone(), am.select("gpus", Some(1), None, 1).unwrap()] {
            let e = view.call("rank", &[], CallMode::All).err().expect("fails");
            assert_eq!(e.kind, ErrorKind::ProcFailed);
            assert!(
                e.message.contains("'workers'") && e.message.contains(name),
                "{e}"
            );
        }
        let e = am
            .call("rank", &[], CallMode::Broadcast)
            .err()
            .expect("fails");
        assert_eq!(e.kind, ErrorKind::ProcFailed);
        // Views without it, and other meshes, keep working.
        let rest = am.select("gpus", Some(0), Some(2), 1).unwrap();
        assert_eq!(call(&rest, "rank", &[]).values.len(), 2);
        assert_eq!(
            call(&am.at("gpus", 3).unwrap(), "rank", &[]).values.len(),
            1
        );
        assert_eq!(call(&other, "rank", &[]).values.len(), 2);

        // Stopping a mesh with a dead proc does not hang, raises no event.
        let stop = pm.stop();
        assert!(stop.wait(Some(HANG)), "stop hung");
        c.no_event(Duration::from_millis(200));
        for pid in pids {
            assert!(!alive(pid), "pid {pid} outlived stop");
        }
    }
}

#[test]
fn exit_code_is_reported() {
    let c = Controller::new();
    let pm = c.procs(2);
    let am = spawn(&pm, "e");
    let f = am
        .at("gpus", 1)
        .unwrap()
        .call("exit", &[], CallMode::One)
        .unwrap()
        .unwrap();
    let m = err_msg(&wait(&f).values[0]).to_string();
    assert!(m.contains("exited with code 3"), "{m}");
    let ev = c.event();
    assert_eq!(
        (ev.cause, ev.code, ev.ranks.clone()),
        (FailureCause::ExitCode, 3, vec![1])
    );
    assert!(wait(&pm.stop()).values.len() == 2);
}

#[test]
fn endpoint_error_under_broadcast_fails_the_actor() {
    let c = Controller::new();
    let pm = c.procs(3);
    let am = spawn(&pm, "bcast");
    let other = spawn(&pm, "fine");
    // Raising while the caller waits: an error point, the actor lives on.
    let vm = call(&am.at("gpus", 1).unwrap(), "fail", &[]);
    assert!(err_msg(&vm.values[0]).contains("as requested"));
    assert_eq!(call(&am, "rank", &[]).values.len(), 3);
    c.no_event(Duration::from_millis(200));

    // Raising with nobody waiting: the actor fails, its owner hears.
    am.at("gpus", 1)
        .unwrap()
        .call("fail", &[], CallMode::Broadcast)
        .unwrap();
    let ev = c.event();
    assert_eq!(ev.cause, FailureCause::EndpointError);
    assert_eq!(ev.mesh, "bcast");
    assert_eq!(ev.ranks, vec![1]);
    assert!(ev.actor.starts_with("bcast."), "{ev:?}");
    assert!(ev.report.contains("as requested"), "{}", ev.report);
    let e = am.call("rank", &[], CallMode::All).err().expect("fails");
    assert_eq!(e.kind, ErrorKind::ProcFailed);
    assert!(e.message.contains("rank 1"), "{e}");
    // Its proc and the other ranks and meshes are fine.
    assert_eq!(
        call(&am.at("gpus", 2).unwrap(), "rank", &[]).values.len(),
        1
    );
    assert_eq!(call(&other, "rank", &[]).values.len(), 3);
    // A failed actor can be stopped.
    let vm = wait(&am.stop().unwrap());
    assert!(vm.values.iter().all(|v| !v.is_err()), "{vm:?}");
    wait(&pm.stop());
    c.no_event(Duration::from_millis(200));
}

#[test]
fn undeliverable_broadcast_comes_back_to_the_sender() {
    let c = Controller::new();
    let pm = c.procs(2);
    let am = spawn(&pm, "gone");
    wait(&am.stop().unwrap());
    am.call("echo", &[b"x"], CallMode::Broadcast).unwrap();
    let mut causes = Vec::new();
    for _ in 0..2 {
        let ev = c.event();
        assert!(ev.report.contains("undeliverable"), "{}", ev.report);
        assert_eq!(ev.mesh, "gone");
        causes.push(ev.cause);
    }
    assert_eq!(causes, [FailureCause::Undeliverable; 2]);
    wait(&pm.stop());
}

#[test]
fn supervision_next_times_out_and_stops() {
    let c = Controller::new();
    let t = Instant::now();
    c.no_event(Duration::from_millis(50));
    assert!(t.elapsed() >= Duration::from_millis(50));
    let rt = c.rt.clone();
    let waiter = std::thread::spawn(move || rt.next_supervision_event(None));
    std::thread::sleep(Duration::from_millis(50));
    c.rt.shutdown();
    let e = waiter.join().unwrap().expect_err("stopped");
    assert_eq!(e.kind, ErrorKind::Stopped);
}
