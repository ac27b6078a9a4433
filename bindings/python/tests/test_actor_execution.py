"""Each actor is its own sequential worker (upstream's execution model),
and upstream's failure semantics, on real procs: actors of one proc call
each other from blocking and async endpoints, a long endpoint does not
starve its neighbours, thread-locals from __init__ are seen by endpoints,
concurrent endpoint tasks are cancelled before __cleanup__, async
endpoints share the proc's event loop across messages (timers, tasks and
queues started by one are run for the next) and finish in order whether
they suspend or not, and constructor failures, BaseExceptions and
explicit-port raises kill the actor (a BaseException in an async endpoint
not the proc's loop). Timeouts only turn hangs into failures."""

import os
import re
import threading
import time

import pytest
from exec_actors import (
    AsyncTrainer,
    BadInit,
    Crawler,
    DataLoader,
    Killable,
    LoopState,
    Ordered,
    Owner,
    Queue,
    Sleeper,
    SlowInit,
    Tasks,
    Trainer,
)

import monarch.actor as ma
from monarch.actor import ActorError, SupervisionError, concurrent_endpoint, endpoint, this_host, this_proc


@pytest.fixture(scope="module")
def procs2():
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    yield pm
    pm.stop().get(timeout=60)


class Heard:
    """An unhandled-fault hook that records what it hears."""

    def __init__(self):
        self.failures = []
        self.cv = threading.Condition()

    def __call__(self, failure):
        with self.cv:
            self.failures.append(failure)
            self.cv.notify_all()

    def wait(self, n, timeout=30):
        with self.cv:
            assert self.cv.wait_for(lambda: len(self.failures) >= n, timeout), self.failures
        return self.failures


@pytest.fixture
def heard(monkeypatch):
    h = Heard()
    monkeypatch.setattr(ma, "unhandled_fault_hook", h)
    return h


def test_trainer_calls_dataloader_on_the_same_procs(procs2):
    loader = procs2.spawn("loader", DataLoader)
    trainer = procs2.spawn("trainer", Trainer, loader)
    # Same procs: each trainer's data loader is an actor of its own proc.
    assert list(trainer.pid.call().get(timeout=60).values()) == list(loader.pid.call().get(timeout=60).values())
    assert list(trainer.step.call().get(timeout=60).values()) == [[0, 0, 1], [1, 0, 1]]
    assert list(trainer.step.call().get(timeout=60).values()) == [[0, 0, 2], [1, 0, 2]]
    atrainer = procs2.spawn("atrainer", AsyncTrainer, loader)
    assert list(atrainer.step.call().get(timeout=60).values()) == [[0, 0, 3], [1, 0, 3]]


def test_actors_of_this_proc_call_each_other():
    loader = this_proc().spawn("loader", DataLoader)
    trainer = this_proc().spawn("trainer", Trainer, loader)
    assert trainer.step.call_one().get(timeout=60) == [0, 0, 1]
    atrainer = this_proc().spawn("atrainer", AsyncTrainer, loader)
    assert atrainer.step.call_one().get(timeout=60) == [0, 0, 2]


def test_crawler_and_queue_on_one_proc(procs2):
    one = procs2.slice(gpus=0)
    queue = one.spawn("queue", Queue, ["a", "b", "c"])
    crawler = one.spawn("crawler", Crawler, queue)
    assert crawler.crawl.call_one().get(timeout=60) == 3
    assert queue.results.call_one().get(timeout=60) == ["A", "B", "C"]


def test_thread_locals_from_init_are_seen_by_endpoints(procs2):
    loader = procs2.spawn("loader2", DataLoader)
    trainers = [procs2.spawn(f"t{i}", Trainer, loader) for i in range(3)]
    for t in trainers:
        assert list(t.thread_state.call().get(timeout=60).values()) == [("set in __init__", True)] * 2
    local = this_proc().spawn("tl", Trainer, loader)
    assert local.thread_state.call_one().get(timeout=60) == ("set in __init__", True)


def test_a_long_endpoint_does_not_starve_its_neighbour(procs2, tmp_path):
    one = procs2.slice(gpus=1)
    busy = one.spawn("busy", Sleeper)
    other = one.spawn("other", Sleeper)
    gate = str(tmp_path / "gate")
    long_call = busy.sleep_until.call_one(gate, 60)
    # The neighbour answers while the busy actor's endpoint still runs.
    assert other.ping.call_one().get(timeout=30) == "pong"
    assert not long_call.done()
    open(gate, "w").close()
    assert long_call.get(timeout=60) is True


def test_messages_to_one_actor_run_in_order(procs2):
    o = procs2.slice(gpus=0).spawn("ordered", Ordered)
    futs = [o.add.call_one(i) for i in range(200)]
    for f in futs:
        f.get(timeout=60)
    assert o.seen_list.call_one().get(timeout=60) == list(range(200))


def test_concurrent_endpoint_tasks_are_cancelled_before_cleanup(procs2, tmp_path):
    log = str(tmp_path / "cleanup")
    t = procs2.slice(gpus=0).spawn("tasks", Tasks, log)
    futs = [t.forever.call_one() for _ in range(3)]
    deadline = time.monotonic() + 30
    while t.count.call_one().get(timeout=30) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    t.stop().get(timeout=60)
    with open(log) as f:
        assert f.read() == "3 3"
    for f in futs:
        with pytest.raises(ActorError, match="Cancelled"):
            f.get(timeout=30)


def test_async_endpoints_share_the_proc_loop_across_messages(procs2):
    # Each of these returns, or suspends, before what it started on the
    # loop has run: the loop must still run it (a timer, a new task, a
    # waiter woken by a later message), whichever thread ran the step.
    s = procs2.slice(gpus=0).spawn("loop_state", LoopState)
    s.arm_timer.call_one(0.05).get(timeout=30)
    assert s.wait_event.call_one().get(timeout=30) == "set"
    s.start_background.call_one().get(timeout=30)
    assert s.background_result.call_one().get(timeout=30) == "background done"
    taken = s.take.call_one(2)
    s.put.call_one("x").get(timeout=30)
    s.put.call_one("y").get(timeout=30)
    assert taken.get(timeout=30) == ["x", "y"]
    assert s.task_scoped.call_one().get(timeout=30) == (True, "slept")


def test_async_endpoints_finish_in_order_whether_they_suspend_or_not(procs2):
    s = procs2.slice(gpus=1).spawn("loop_order", LoopState)
    futs = [
        s.record.call_one("a", 0.05),
        s.record.call_one("b", None),
        s.record.call_one("c", 0),
        s.record.call_one("d", None),
    ]
    for f in futs:
        f.get(timeout=30)
    assert s.get_log.call_one().get(timeout=30) == [(e, t) for t in "abcd" for e in ("start", "end")]
    # A raise is answered to the caller as from a sync endpoint; the actor lives on.
    for suspend in (False, True):
        with pytest.raises(ActorError, match=f"ValueError: failed, suspended: {suspend}"):
            s.fail.call_one(suspend).get(timeout=30)
    assert len(s.get_log.call_one().get(timeout=30)) == 8


@pytest.mark.parametrize("suspend", [False, True])
def test_a_base_exception_kills_the_async_actor_not_the_proc_loop(procs2, heard, suspend):
    one = procs2.slice(gpus=0)
    doomed = one.spawn(f"doomed_{suspend}", LoopState)
    other = one.spawn(f"bystander_{suspend}", LoopState)
    with pytest.raises(SupervisionError) as ei:
        doomed.exit.call_one(suspend).get(timeout=30)
    assert f"SystemExit: exit, suspended: {suspend}" in str(ei.value)
    heard.wait(1)
    # The proc's event loop serves on: a neighbour's endpoint suspends there.
    other.record.call_one("x", 0.01).get(timeout=30)
    assert other.get_log.call_one().get(timeout=30) == [("start", "x"), ("end", "x")]


def test_concurrent_endpoint_rejects_sync_functions_and_chaining():
    with pytest.raises(ValueError, match="async def"):

        class A(ma.Actor):
            @concurrent_endpoint
            def f(self):
                pass

    with pytest.raises(ValueError, match="another endpoint decorator"):

        class B(ma.Actor):
            @concurrent_endpoint
            @endpoint
            async def f(self):
                pass

    with pytest.raises(ValueError, match="another endpoint decorator"):

        class C(ma.Actor):
            @endpoint
            @concurrent_endpoint
            async def f(self):
                pass


def test_constructor_failure_is_a_supervision_failure(procs2, heard):
    t = time.monotonic()
    bad = procs2.spawn("bad", BadInit)
    assert time.monotonic() - t < 30  # returned without waiting for the constructor
    with pytest.raises(SupervisionError) as ei:
        bad.ping.call().get(timeout=60)
    text = str(ei.value)
    # Upstream's shape: "Endpoint call <mesh>.<method>() failed, <why>".
    assert text.startswith("Endpoint call bad.ping() failed, "), text
    assert ei.value.endpoint == "bad.ping()"
    assert "ValueError: no GPU on this point" in text
    # The point whose failure reached this process first.
    assert re.search(r"The actor bad\{'gpus': [01]/2\} and all its descendants have failed:", text), text
    failures = heard.wait(2)
    assert sorted(f.ranks[0] for f in failures) == [0, 1]
    assert {f.cause for f in failures} == {"spawn_failed"}
    assert all("no GPU on this point" in f.report() for f in failures)
    # Later calls fail at once, before reaching the procs.
    with pytest.raises(SupervisionError, match="and all its descendants have failed") as ei:
        bad.ping.call().get(timeout=60)
    assert str(ei.value).startswith("Endpoint call bad.ping() failed, The actor bad{"), str(ei.value)
    time.sleep(0.2)
    assert len(heard.failures) == 2  # heard once per actor


def test_spawn_returns_before_the_constructor_finishes(procs2, tmp_path):
    # The constructor cannot finish before the gate opens, and only this
    # test opens it, after spawn returned: a spawn that waited would come
    # back (after the constructor's 60 s) with gate.done already there.
    gate = str(tmp_path / "gate")
    slow = procs2.slice(gpus=0).spawn("slow_init", SlowInit, gate)
    assert not os.path.exists(gate + ".done")
    call = slow.saw_gate.call_one()
    deadline = time.monotonic() + 60
    while not os.path.exists(gate + ".started"):
        assert time.monotonic() < deadline, "the constructor never started"
        time.sleep(0.01)
    # The constructor runs; a call waits for it.
    assert not call.done()
    open(gate, "w").close()
    assert call.get(timeout=60) is True
    assert os.path.exists(gate + ".done")


def test_constructor_failure_goes_to_the_owners_supervise(heard):
    owner = this_proc().spawn("owner", Owner)
    owner.spawn_bad.call_one().get(timeout=60)
    deadline = time.monotonic() + 30
    while not (reports := owner.heard.call_one().get(timeout=60)):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    owner.stop_procs.call_one().get(timeout=60)
    assert len(reports) == 1
    report, cause = reports[0]
    assert cause == "spawn_failed" and "no GPU on this point" in report
    assert heard.failures == []


def test_an_owner_hears_once_of_a_child_killed_by_a_base_exception(heard):
    owner = this_proc().spawn("owner_of_killed", Owner)
    try:
        raised = owner.kill_child.call_one().get(timeout=60)
        assert "SystemExit: base exception" in raised, raised
        deadline = time.monotonic() + 30
        while not (reports := owner.heard.call_one().get(timeout=60)):
            assert time.monotonic() < deadline, "the owner never heard of its child's death"
            time.sleep(0.02)
        # A later call to the dead child fails without a second report.
        assert "and all its descendants have failed" in owner.call_child_again.call_one().get(timeout=60)
        time.sleep(0.2)
        reports = owner.heard.call_one().get(timeout=60)
    finally:
        owner.stop_procs.call_one().get(timeout=60)
    assert len(reports) == 1, reports
    report, cause = reports[0]
    assert cause == "endpoint_error" and "SystemExit: base exception" in report, report
    assert heard.failures == []


def test_plain_exception_leaves_the_actor_alive(procs2, heard):
    k = procs2.slice(gpus=0).spawn("k1", Killable)
    with pytest.raises(ActorError, match="plain failure") as ei:
        k.plain.call_one().get(timeout=60)
    assert not isinstance(ei.value, SupervisionError)
    assert k.ping.call_one().get(timeout=60) == "pong"
    time.sleep(0.2)
    assert heard.failures == []


@pytest.mark.parametrize(
    "method,cause",
    [("base", "SystemExit: base exception"), ("ported", "raised in an explicit-port endpoint")],
)
def test_base_exception_and_explicit_port_raise_kill_the_actor(procs2, heard, method, cause):
    k = procs2.slice(gpus=1).spawn(f"k_{method}", Killable)
    with pytest.raises(SupervisionError) as ei:
        k.endpoint(method).call_one().get(timeout=60)
    assert str(ei.value).startswith(f"Endpoint call k_{method}.{method}() failed, "), str(ei.value)
    assert cause in str(ei.value)
    # A one-point slice has no dimensions: the actor's name has no point.
    assert f"The actor k_{method} and all its descendants have failed:" in str(ei.value)
    with pytest.raises(SupervisionError, match="and all its descendants have failed"):
        k.ping.call_one().get(timeout=60)
    failures = heard.wait(1)
    time.sleep(0.2)
    assert len(heard.failures) == 1
    assert failures[0].mesh_name == f"k_{method}" and failures[0].cause == "endpoint_error"
    assert cause in failures[0].report()


def test_ctrl_c_interrupts_get_in_the_controller_and_in_its_actors(tmp_path):
    # SIGINT while the controller's main thread waits on an actor of its own
    # proc, itself blocked in get() on a worker's 60 s endpoint: both gets
    # raise KeyboardInterrupt at once, the controller exits, its procs too.
    # (`gate`: the file the slow endpoint touches when it starts.)
    import signal
    import subprocess
    import sys
    import textwrap

    from pids import wait_gone

    gate = str(tmp_path / "gate")
    here = os.path.dirname(os.path.abspath(__file__))
    script = """
        import sys
        import monarch.actor as ma
        from monarch.actor import this_host, this_proc
        from exec_actors import Interruptible
        from hardening_actors import Slow
        ma.unhandled_fault_hook = lambda failure: None  # the interrupted actor fails
        pm = this_host().spawn_procs(per_host={"b": 1})
        slow = pm.spawn("slow", Slow)
        waiter = this_proc().spawn("waiter", Interruptible)
        print(slow.pid.call_one().get(timeout=60), flush=True)
        try:
            waiter.wait_on.call_one(slow, sys.argv[1]).get()
        except KeyboardInterrupt:
            print("main interrupted", flush=True)
            raise
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, *sys.path]))
    p = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), gate],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        proc_pid = int(p.stdout.readline())
        # The worker's endpoint has started: the actor's thread waits in get().
        deadline = time.monotonic() + 60
        while not os.path.exists(gate):
            assert time.monotonic() < deadline, "the slow endpoint never started"
            time.sleep(0.01)
        p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"controller still running 30 s after SIGINT:\n{out}\n{err}") from None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "main interrupted" in out, (out, err)
    assert "KeyboardInterrupt" in err
    assert p.returncode != 0
    with open(gate + ".actor") as f:
        assert f.read() == "interrupted"
    assert wait_gone([proc_pid], 10) == []
