"""Supervision from Python: failures caused for real (os._exit, SIGKILL,
SIGSEGV, a raise under broadcast, SIGSTOP, a killed controller) must reach
the caller or the owner, promptly, once, and leave nothing behind.
Deadlines only turn hangs into failures; they are generous for a loaded
machine."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from pids import alive, wait_gone
from sup_actors import AsyncSupervisor, Supervisor, Worker

import monarch.actor as ma
from monarch.actor import ActorError, MeshFailure, SupervisionError, this_host, this_proc

HERE = os.path.dirname(os.path.abspath(__file__))


class Recorder:
    def __init__(self):
        self.failures = []
        self.cv = threading.Condition()

    def __call__(self, failure):
        with self.cv:
            self.failures.append(failure)
            self.cv.notify_all()

    def wait(self, n=1, timeout=30):
        with self.cv:
            ok = self.cv.wait_for(lambda: len(self.failures) >= n, timeout)
        assert ok, f"expected {n} unhandled failures, got {self.failures}"
        return self.failures[n - 1]


@pytest.fixture
def hook():
    rec = Recorder()
    old = ma.unhandled_fault_hook
    ma.unhandled_fault_hook = rec
    yield rec
    time.sleep(0.1)
    ma.unhandled_fault_hook = old


def test_endpoint_error_while_waiting_is_an_actor_error(hook):
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        w = pm.spawn("w", Worker)
        with pytest.raises(ActorError) as ei:
            w.boom.call().get(timeout=30)
        assert not isinstance(ei.value, SupervisionError)
        assert "boom on rank" in str(ei.value) and "Traceback" in str(ei.value)
        assert isinstance(ei.value.exception, ValueError)
        assert list(w.rank.call().get(timeout=30).values()) == [0, 1]
        time.sleep(0.3)
        assert hook.failures == []
    finally:
        pm.stop().get(timeout=30)


def test_raise_under_broadcast_fails_the_actor_and_reaches_the_hook(hook):
    pm = this_host().spawn_procs(per_host={"gpus": 3})
    try:
        w = pm.spawn("bw", Worker)
        other = pm.spawn("other", Worker)
        w.slice(gpus=1).boom.broadcast()
        f = hook.wait()
        assert isinstance(f, MeshFailure)
        assert f.mesh_name == "bw" and f.ranks == [1] and f.cause == "endpoint_error"
        assert "boom on rank 0" in f.report()  # rank within the slice it was sent to
        assert isinstance(f.exception, ValueError)
        with pytest.raises(SupervisionError, match="rank 1"):
            w.rank.call()
        assert w.slice(gpus=2).rank.call_one().get(timeout=30) == 0
        assert list(other.rank.call().get(timeout=30).values()) == [0, 1, 2]
        assert len(hook.failures) == 1
    finally:
        pm.stop().get(timeout=30)


@pytest.mark.parametrize(
    "how,cause,needle", [("kill", "signal", "SIGKILL"), ("segv", "signal", "SIGSEGV"), ("exit", "exit_code", "code 7")]
)
def test_proc_death_during_a_call(hook, how, cause, needle, tmp_path):
    pm = this_host().spawn_procs(per_host={"gpus": 4})
    try:
        w = pm.spawn("dw", Worker)
        other = pm.spawn("dother", Worker)
        pids = list(w.pid.call().get(timeout=30).values())
        slow = w.sleep.call(0.5)
        if how == "exit":
            # The actor itself exits (after its share of `slow`).
            stamp = tmp_path / "died-at"
            victim = w.slice(gpus=2).die.call_one("exit", str(stamp))
        else:
            victim = w.slice(gpus=2).sleep.call_one(30)
            time.sleep(0.1)
            os.kill(pids[2], signal.SIGKILL if how == "kill" else signal.SIGSEGV)
        t0 = time.monotonic()
        with pytest.raises(SupervisionError) as ei:
            victim.get(timeout=30)
        if how == "exit":
            # Timed from the exit itself, not from when it was asked for:
            # on a loaded machine the proc may run `slow` late.
            t0 = float(stamp.read_text())
        took = time.monotonic() - t0
        assert took < 5, f"in-flight call took {took:.2f}s to fail"
        msg = str(ei.value)
        assert "rank 0" in msg and needle in msg, msg
        # The other ranks' replies still arrive.
        # (With "exit", rank 2's own reply to `slow` may or may not have left
        # the proc before it exited: batched replies die with the process.)
        try:
            vals = list(slow.get(timeout=30).values())
            assert how == "exit" and vals == [0, 1, 2, 3], vals
        except SupervisionError as e:
            assert [r for r, _, _ in e.failures] == [2]
        # The owner (the controller's top level) hears once.
        f = hook.wait()
        assert f.cause == cause and f.ranks == [2] and needle in f.report(), f.report()
        # Later calls to any view holding rank 2 fail at once.
        for view in (w, w.slice(gpus=slice(1, 3)), other):
            with pytest.raises(SupervisionError, match="rank"):
                view.rank.call()
        # Views without it keep working.
        assert list(w.slice(gpus=slice(0, 2)).rank.call().get(timeout=30).values()) == [0, 1]
        assert w.slice(gpus=3).rank.call_one().get(timeout=30) == 0
        time.sleep(0.2)
        assert len(hook.failures) == 1
    finally:
        t0 = time.monotonic()
        pm.stop().get(timeout=30)
        assert time.monotonic() - t0 < 15


def test_supervise_handles_escalates_and_chains(hook):
    host = this_host().spawn_procs(per_host={"s": 1})
    try:
        # Handled: the controller never hears of it.
        s = host.spawn("handler", Supervisor, "handle")
        s.kill_worker.call_one(1)
        deadline = time.time() + 30
        while not s.seen.call_one().get(timeout=30) and time.time() < deadline:
            time.sleep(0.05)
        seen = s.seen.call_one().get(timeout=30)
        assert len(seen) == 1 and seen[0][1] == [1] and seen[0][2] == "signal", seen
        time.sleep(0.3)
        assert hook.failures == []

        # Not handled: the supervisor fails; its owner (us) gets a chained failure.
        e = host.spawn("escalator", Supervisor, "escalate")
        e.kill_worker.call_one(0, "exit")
        f = hook.wait()
        assert f.mesh_name == "escalator" and f.cause == "supervisor_failed", f.report()
        assert f.caused_by is not None and f.caused_by.cause == "exit_code" and f.caused_by.code == 7
        assert "code 7" in f.report()
        with pytest.raises(SupervisionError):
            e.seen.call_one()

        # Raising: the exception becomes the new failure's cause.
        r = host.spawn("raiser", Supervisor, "raise")
        r.kill_worker.call_one(1)
        f = hook.wait(2)
        assert f.mesh_name == "raiser" and "supervisor gives up" in f.report()
        assert isinstance(f.exception, RuntimeError)
        assert f.caused_by.ranks == [1]
        # The one that handled its failure still answers.
        assert len(s.seen.call_one().get(timeout=30)) == 1
    finally:
        host.stop().get(timeout=60)


def test_a_supervisor_can_replace_failed_workers(hook):
    host = this_host().spawn_procs(per_host={"s": 1})
    try:
        s = host.spawn("respawner", Supervisor, "respawn", 2)
        assert s.compute.call_one([1, 2, 3]).get(timeout=30) == 2 * (1 + 4 + 9)
        old = s.worker_pids.call_one().get(timeout=30)
        s.kill_worker.call_one(0)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                pids = s.worker_pids.call_one().get(timeout=30)
                if not set(pids) & set(old):
                    break
            except ActorError:
                pass
            time.sleep(0.1)
        assert s.compute.call_one([1, 2, 3]).get(timeout=30) == 2 * (1 + 4 + 9)
        assert hook.failures == []
        assert wait_gone(old, 10) == []
    finally:
        host.stop().get(timeout=60)


def test_stop_runs_cleanup_children_first_and_never_hangs(hook, tmp_path):
    host = this_host().spawn_procs(per_host={"s": 1})
    s = host.spawn("cleaner", Supervisor, "handle", 2, str(tmp_path))
    pids = s.nested_pids.call_one().get(timeout=30)
    s.kill_worker.call_one(1)  # one nested proc already dead when we stop
    time.sleep(0.5)
    t0 = time.monotonic()
    host.stop().get(timeout=60)
    assert time.monotonic() - t0 < 20
    assert wait_gone(pids, 10) == []
    names = os.listdir(tmp_path)
    assert f"sup-cleanup-{pids[0]}" in names, names
    assert f"cleanup-{pids[1]}" in names, names  # the surviving worker cleaned up
    # Children first: the worker's cleanup ran before its owner's.
    mt = {n: os.stat(tmp_path / n).st_mtime_ns for n in names}
    assert mt[f"cleanup-{pids[1]}"] <= mt[f"sup-cleanup-{pids[0]}"], mt
    assert hook.failures == []


def test_actor_stop_runs_cleanup_and_then_messages_are_undeliverable(hook, tmp_path):
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        w = pm.spawn("gone", Worker, str(tmp_path))
        pids = list(w.pid.call().get(timeout=30).values())
        w.stop().get(timeout=30)
        assert sorted(os.listdir(tmp_path)) == sorted(f"cleanup-{p}" for p in pids)
        # Bypass the binding's own stopped check: a reference rebuilt from
        # pickling knows nothing of the stop.
        import pickle

        again = pickle.loads(pickle.dumps(w))
        again.rank.broadcast()
        f = hook.wait(2)
        assert {x.cause for x in hook.failures} == {"undeliverable"}
        assert f.mesh_name == "gone" and "undeliverable" in f.report()
    finally:
        pm.stop().get(timeout=30)


def test_future_get_timeout_leaves_things_consistent():
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        w = pm.spawn("t", Worker)
        f = w.sleep.call_one(0.5)
        with pytest.raises(TimeoutError):
            f.get(timeout=0.05)
        assert f.get(timeout=30) == 0
        assert w.rank.call_one().get(timeout=30) == 0
    finally:
        pm.stop().get(timeout=30)


def _run(script, env=None, timeout=120):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([HERE, *sys.path])
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=e, capture_output=True, text=True, timeout=timeout
    )


def test_default_hook_exits_the_controller_nonzero():
    r = _run(
        """
        from monarch.actor import this_host
        from sup_actors import Worker
        pm = this_host().spawn_procs(per_host={"gpus": 2})
        w = pm.spawn("w", Worker)
        w.slice(gpus=0).boom.broadcast()
        import time; time.sleep(60)
        print("not reached")
        """
    )
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "unhandled failure" in r.stderr and "boom on rank 0" in r.stderr
    assert "not reached" not in r.stdout


def test_hung_proc_is_declared_failed():
    r = _run(
        """
        import os, signal, time
        import monarch.actor as ma
        from monarch.actor import this_host, SupervisionError
        from sup_actors import Worker
        got = []
        ma.unhandled_fault_hook = got.append
        pm = this_host().spawn_procs(per_host={"gpus": 2})
        w = pm.spawn("w", Worker)
        pids = list(w.pid.call().get(timeout=30).values())
        assert list(w.sleep.call(2.5).get(timeout=30).values()) == [0, 1]  # busy is not hung
        assert got == []
        os.kill(pids[1], signal.SIGSTOP)
        t0 = time.monotonic()
        while not got and time.monotonic() - t0 < 30:
            time.sleep(0.02)
        took = time.monotonic() - t0
        assert got and got[0].cause == "heartbeat_lost" and got[0].ranks == [1], got
        # The last answered probe may precede the SIGSTOP by up to one probe
        # interval (a quarter of the timeout), so the failure can come as
        # early as 0.75 s after it; well before that would mean no timeout.
        assert took >= 0.5, took
        try:
            w.rank.call()
            raise AssertionError("call to a hung rank did not fail")
        except SupervisionError as e:
            assert "heartbeats" in str(e)
        assert w.slice(gpus=0).rank.call_one().get(timeout=30) == 0
        pm.stop().get(timeout=30)
        print("OK", took)
        """,
        env={"MONARCH_HEARTBEAT_TIMEOUT_MS": "1000"},
    )
    assert r.returncode == 0 and "OK" in r.stdout, (r.stdout, r.stderr)


def test_killed_controller_leaves_no_procs():
    script = """
        import sys, time
        from monarch.actor import this_host
        from sup_actors import Supervisor
        host = this_host().spawn_procs(per_host={"s": 2})
        s = host.spawn("s", Supervisor, "handle")
        pids = [p for ps in s.nested_pids.call().get(timeout=60).values() for p in ps]
        print(" ".join(map(str, pids)), flush=True)
        time.sleep(120)
        """
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([HERE, *sys.path])
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], env=e, stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        pids = [int(x) for x in line.split()]
        assert len(pids) == 6, line
        assert all(alive(x) for x in pids)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        t0 = time.monotonic()
        left = wait_gone(pids, 2.0)
        assert left == [], f"procs alive {time.monotonic() - t0:.2f}s after the controller was killed: {left}"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_this_proc_supervisor(hook):
    # An actor on the controller's own proc owns a mesh; it handles failures
    # in the controller's this_proc server thread.
    s = this_proc().spawn("local_sup", Supervisor, "handle")
    try:
        s.kill_worker.call_one(0)
        deadline = time.time() + 30
        while not s.seen.call_one().get(timeout=30) and time.time() < deadline:
            time.sleep(0.05)
        assert s.seen.call_one().get(timeout=30)[0][1] == [0]
        assert hook.failures == []
    finally:
        s.stop().get(timeout=60)


def test_meshes_spawned_from_async_endpoints_are_owned_by_the_actor(hook):
    host = this_host().spawn_procs(per_host={"s": 1})
    try:
        s = host.spawn("async_sup", AsyncSupervisor)
        pids = s.start.call_one().get(timeout=60)
        os.kill(pids[1], signal.SIGKILL)
        deadline = time.time() + 30
        while not s.seen.call_one().get(timeout=30) and time.time() < deadline:
            time.sleep(0.05)
        seen = s.seen.call_one().get(timeout=30)
        assert len(seen) == 1 and seen[0][1] == [1] and seen[0][2] == "signal", seen
        time.sleep(0.3)
        assert hook.failures == []
    finally:
        host.stop().get(timeout=60)
