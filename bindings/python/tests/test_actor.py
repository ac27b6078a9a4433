import asyncio
import pickle
import time

import pytest
from actors import Caller, Cleanup, Counter, Failing
from session_guards import bootstrap_children

from monarch.actor import (
    ActorError,
    Point,
    SupervisionError,
    ValueMesh,
    context,
    current_rank,
    this_host,
    this_proc,
)


def test_call_gathers_value_mesh(procs):
    c = procs.spawn("c", Counter, 10)
    vm = c.incr.call(2).get()
    assert isinstance(vm, ValueMesh)
    assert len(vm) == 4
    assert list(vm.values()) == [12, 12, 12, 12]
    items = list(vm.items())
    assert [p.rank for p, _ in items] == [0, 1, 2, 3]
    assert [dict(p) for p, _ in items] == [{"gpus": i} for i in range(4)]
    assert list(vm) == items  # iterates (Point, value) pairs like upstream
    assert vm.get(3) == 12
    with pytest.raises(IndexError):
        vm.get(4)
    with pytest.raises(IndexError):
        vm.get(-1)
    assert vm.item(gpus=1) == 12
    with pytest.raises(KeyError):
        vm.item(hosts=0)
    with pytest.raises(ValueError):
        vm.item()
    assert "{'gpus': 1/4}: 12" in repr(vm)
    assert str(items[1][0]) == "{'gpus': 1/4}"


def test_identical_answers_and_mixed_ones(procs):
    """A gather where every rank answers the same bytes is decoded once;
    mutable values still come back as one object per rank."""
    c = procs.spawn("c", Counter, 0)
    vals = list(c.echo.call([1, 2]).get().values())
    assert vals == [[1, 2]] * 4
    vals[0].append(3)
    assert [len(v) for v in vals] == [3, 2, 2, 2]
    assert list(c.echo.call("x").get().values()) == ["x"] * 4
    assert list(c.echo.call(None).get().values()) == [None] * 4
    # Some ranks answer what rank 0 did, some do not.
    c.slice(gpus=2).incr.broadcast(5)
    assert list(c.get.call().get().values()) == [0, 0, 5, 0]
    c.slice(gpus=0).incr.broadcast(5)
    assert list(c.get.call().get().values()) == [5, 0, 5, 0]
    # Identical answers with an error among them.
    with pytest.raises(ActorError) as ei:
        c.slice(gpus=slice(1, 3)).boom.call("kaput").get()
    assert [r for r, _, _ in ei.value.failures] == [0, 1]


def test_call_one_choose_broadcast(procs):
    c = procs.spawn("c", Counter, 0)
    assert c.slice(gpus=1).incr.call_one(5).get() == 5
    c.incr.broadcast(1)
    assert list(c.get.call().get().values()) == [1, 6, 1, 1]
    chosen = {c.get.choose().get() for _ in range(8)}
    assert chosen <= {1, 6} and 6 in chosen
    assert c.slice(gpus=2).incr.call(1).get().item() == 2


def test_call_one_on_mesh_of_four(procs):
    c = procs.spawn("c", Counter, 0)
    with pytest.raises(ValueError, match="exactly one"):
        c.incr.call_one()
    assert c.slice(gpus=0).get.call_one().get() == 0  # still works


def test_slicing(procs):
    c = procs.spawn("c", Counter, 0)
    assert c.extent == {"gpus": 4}
    assert c.slice(gpus=slice(1, 3)).extent == {"gpus": 2}
    assert c.slice(gpus=slice(None, None, 2)).extent == {"gpus": 2}
    assert c.slice(gpus=slice(-1, None)).extent == {"gpus": 1}
    assert c.slice(gpus=2).extent == {}
    ranks = c.slice(gpus=slice(1, None, 2)).where.call().get()
    assert [v[4] for v in ranks.values()] == [1, 3]  # own ranks in the full mesh
    assert [v[0] for v in ranks.values()] == [0, 1]  # ranks in the slice
    with pytest.raises(ValueError):
        c.slice(gpus=slice(0, 4, 0))
    with pytest.raises(ValueError):
        c.slice(gpus=slice(0, 4, -1))
    with pytest.raises(ValueError):
        c.slice(hosts=0)
    with pytest.raises(ValueError):
        c.slice(gpus=4)
    with pytest.raises(ValueError):
        c.slice(gpus=-1)
    with pytest.raises(TypeError):
        c.slice(gpus="0")
    sub = procs.slice(gpus=slice(2, 4))
    assert sub.extent == {"gpus": 2}
    s = sub.spawn("s", Counter, 1)
    assert list(s.where.call().get().values())[1][3] == {"gpus": 1}


def test_current_rank_and_context(procs):
    c = procs.spawn("c", Counter, 0)
    full = c.where.call().get()
    for p, (rank, coords, size, own, own_rank) in full:
        assert rank == p.rank == own_rank
        assert coords == dict(p) == own
        assert size == {"gpus": 4}
    one = c.slice(gpus=3).where.call_one().get()
    assert one == (0, {}, {}, {"gpus": 3}, 3)
    # in the controller, outside any actor
    assert current_rank().rank == 0 and dict(current_rank()) == {}
    assert context().actor_instance.rank.rank == 0


def test_two_dimensional_mesh():
    pm = this_host().spawn_procs(per_host={"x": 2, "y": 2})
    try:
        c = pm.spawn("c", Counter, 0)
        assert c.extent == {"x": 2, "y": 2}
        vm = c.where.call().get()
        assert vm.item(x=1, y=0)[1] == {"x": 1, "y": 0}
        row = c.slice(x=1).where.call().get()
        assert row.extent == {"y": 2}
        assert [v[3] for v in row.values()] == [{"x": 1, "y": 0}, {"x": 1, "y": 1}]
        assert [(v[0], v[1], v[2]) for v in row.values()] == [(0, {"y": 0}, {"y": 2}), (1, {"y": 1}, {"y": 2})]
        col = c.slice(y=slice(1, 2)).where.call().get()
        assert col.extent == {"x": 2, "y": 1}
        assert [v[4] for v in col.values()] == [1, 3]
        assert str(next(iter(col))[0]) == "{'x': 0/2, 'y': 0/1}"
    finally:
        pm.stop().get(timeout=30)


def test_endpoint_error_has_remote_traceback(procs):
    c = procs.spawn("c", Counter, 0)
    with pytest.raises(ActorError) as ei:
        c.slice(gpus=1).boom.call_one("kaput").get()
    err = ei.value
    assert isinstance(err.exception, ValueError)
    assert str(err.exception) == "kaput"
    assert "Traceback" in err.message and "in boom" in err.message and "kaput" in err.message
    # the actor lives on, with its state
    assert c.slice(gpus=1).incr.call_one().get() == 1
    with pytest.raises(ActorError) as ei:
        c.boom.call().get()
    assert len(ei.value.failures) == 4
    with pytest.raises(ActorError) as ei:
        c.slice(gpus=0).boom_unpicklable.call_one().get()
    assert ei.value.exception is None and "local failure" in ei.value.message
    assert list(c.get.call().get().values()) == [0, 1, 0, 0]


def test_bad_inputs(procs):
    c = procs.spawn("c", Counter, 0)
    with pytest.raises(AttributeError):
        _ = c.nope
    with pytest.raises(AttributeError, match="as_endpoint"):
        _ = c.not_an_endpoint.call  # a plain method: only through as_endpoint(), as upstream
    with pytest.raises(TypeError, match="cannot send"):
        c.echo.call(pickle_me_not())
    with pytest.raises(TypeError):
        c.incr(1)
    with pytest.raises(ActorError, match="cannot be sent"):
        c.slice(gpus=0).lock.call_one().get()
    with pytest.raises(ActorError):
        c.slice(gpus=0).incr.call_one("x").get()  # TypeError remotely
    with pytest.raises(TypeError):
        procs.spawn("x", object)
    assert list(c.incr.call().get().values()) == [1, 1, 1, 1]


def pickle_me_not():
    import threading

    return threading.Lock()


def test_constructor_raises(procs, monkeypatch):
    # As upstream: spawn returns at once; a raising constructor is a
    # supervision failure (here: the program's unhandled-fault hook) and
    # calls to the mesh raise SupervisionError naming the exception.
    import monarch.actor as ma

    heard = []
    monkeypatch.setattr(ma, "unhandled_fault_hook", heard.append)
    f = procs.spawn("f", Failing)
    with pytest.raises(SupervisionError, match="constructor failed on purpose"):
        f.ok.call().get(timeout=30)
    f2 = procs.spawn("f2", Failing, 2)
    with pytest.raises(SupervisionError) as ei:
        f2.ok.call().get(timeout=30)
    assert "RuntimeError: constructor failed on purpose" in str(ei.value)
    assert "The actor f2{'gpus': 2/4} and all its descendants have failed" in str(ei.value)
    # the other points answer
    assert f2.slice(gpus=1).ok.call_one().get(timeout=30) is True
    deadline = time.monotonic() + 30
    while len(heard) < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted((m.mesh_name, m.ranks[0], m.cause) for m in heard) == sorted(
        [("f", r, "spawn_failed") for r in range(4)] + [("f2", 2, "spawn_failed")]
    )
    # the runtime and the procs keep working
    c = procs.spawn("c", Counter, 3)
    assert list(c.get.call().get().values()) == [3, 3, 3, 3]


def test_future_timeout(procs):
    c = procs.spawn("c", Counter, 0)
    fut = c.slice(gpus=0).sleep.call_one(0.5)
    with pytest.raises(TimeoutError):
        fut.get(timeout=0.05)
    assert not fut.done()
    assert fut.get() == 0.5
    assert fut.get() == 0.5
    assert c.slice(gpus=0).incr.call_one().get(timeout=10) == 1


def test_await(procs):
    from actors import AsyncEcho

    c = procs.spawn("c", Counter, 0)
    e = procs.spawn("e", AsyncEcho)

    async def main():
        a = await c.slice(gpus=0).incr.call_one(2)
        vm = await c.incr.call(1)
        both = await asyncio.gather(e.slice(gpus=1).aecho.call_one("x"), c.slice(gpus=2).sleep.call_one(0.05))
        return a, list(vm.values()), both

    assert asyncio.run(main()) == (2, [3, 1, 1, 1], ["x", 0.05])


def test_await_after_a_blocking_get_in_the_same_loop(procs):
    # A blocking get() reads the sockets itself and ends the fd's watch;
    # the next await asks for the fd again, and its reply still arrives.
    c = procs.spawn("c", Counter, 0).slice(gpus=0)

    async def main():
        first = await c.incr.call_one(1)
        blocking = c.incr.call_one(1).get(timeout=30)
        pending = c.sleep.call_one(0.05)
        later = await asyncio.wait_for(asyncio.gather(pending, c.incr.call_one(1)), timeout=30)
        return first, blocking, later

    assert asyncio.run(main()) == (1, 2, [0.05, 3])


def test_actor_to_actor_across_proc_meshes(procs, counters):
    other = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        callers = other.spawn("callers", Caller, counters.slice(gpus=slice(2, 4)))
        before = list(counters.get.call().get().values())
        got = callers.slice(gpus=0).call_other.call_one(counters, 5).get()
        assert got == [b + 5 for b in before]
        assert list(callers.call_slice.call(counters, 3).get().values()) == [before[3] + 5] * 2
        assert set(callers.call_stored.call().get().values()) <= {before[2] + 5, before[3] + 5}
        # a mesh sent to an actor and back is still usable here
        back = callers.slice(gpus=1).echo_back.call_one(counters.slice(gpus=0)).get()
        assert back.incr.call_one(0).get() == before[0] + 5
    finally:
        other.stop().get(timeout=30)


def test_this_proc_actors(procs):
    local = this_proc().spawn("local", Counter, 0)
    assert local.incr.call_one(5).get() == 5
    assert local.where.call_one().get() == (0, {}, {}, {}, 0)
    with pytest.raises(ActorError):
        local.boom.call_one().get()
    assert local.incr.call().get().item() == 6
    # a remote actor can call the controller-hosted actor
    callers = procs.slice(gpus=slice(0, 2)).spawn("callers", Caller)
    assert callers.slice(gpus=0).call_other.call_one(local, 1).get() == [7]


def test_stop_actors_runs_cleanup(procs, tmp_path):
    path = tmp_path / "cleanup.txt"
    m = procs.slice(gpus=slice(0, 2)).spawn("cl", Cleanup, str(path))
    assert list(m.ping.call().get().values()) == ["pong", "pong"]
    sub = m.slice(gpus=1)
    copy = pickle.loads(pickle.dumps(m))  # knows nothing of the stop
    m.stop().get(timeout=10)
    assert sorted(path.read_text().splitlines()) == ["cleanup 0", "cleanup 1"]
    with pytest.raises(SupervisionError, match="stopped"):
        m.ping.call()
    with pytest.raises(SupervisionError, match="stopped"):
        sub.ping.call_one()
    # the runtime refuses messages to stopped actors too
    with pytest.raises(ActorError, match="no actor"):
        copy.ping.call().get(timeout=10)
    # the procs keep running
    assert procs.slice(gpus=slice(0, 2)).spawn("again", Counter, 1).get.call().get().item(gpus=1) == 1


def test_stopped_proc_mesh():
    before = set(bootstrap_children())
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    c = pm.spawn("c", Counter, 0)
    assert list(c.incr.call().get().values()) == [1, 1]
    mine = set(bootstrap_children()) - before
    assert len(mine) == 2
    pm.stop().get(timeout=30)
    assert not (set(bootstrap_children()) & mine)
    with pytest.raises(SupervisionError, match="stopped"):
        c.incr.call()
    with pytest.raises(SupervisionError):
        pm.spawn("d", Counter)
    assert pm.stop().get() is None  # idempotent


def test_point_is_a_mapping():
    p = Point(5, {"x": 2, "y": 3})
    assert p.rank == 5 and dict(p) == {"x": 1, "y": 2}
    assert p.extent == {"x": 2, "y": 3}
    assert str(p) == "{'x': 1/2, 'y': 2/3}"
    assert pickle.loads(pickle.dumps(p)) == p
