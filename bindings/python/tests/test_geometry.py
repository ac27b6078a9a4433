"""Mesh geometry (slice, flatten, rename, split, sizes), ValueMesh shape and
current_rank()/actor_instance.rank on views: upstream-compatible behaviour."""

import pickle

import pytest
from actors import Caller, Counter

from monarch.actor import ValueMesh, this_host


@pytest.fixture(scope="module")
def grid():
    pm = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 4})
    yield pm
    pm.stop().get(timeout=30)


@pytest.fixture(scope="module")
def actors(grid):
    return grid.spawn("geo", Counter, 0)


def own_ranks(vm):
    """Ranks in the spawned mesh of the actors that answered, in order."""
    return [v[4] for v in vm.values()]


def test_sizes_extent_size(grid, actors):
    for m in (grid, actors):
        assert m.sizes == {"hosts": 2, "gpus": 4}
        assert m.extent == {"hosts": 2, "gpus": 4}
        assert list(m.sizes) == ["hosts", "gpus"]
        assert m.size() == len(m) == 8
        assert m.size("gpus") == 4
        assert m.size(("hosts", "gpus")) == 8


def test_slice_int_removes_slice_keeps_and_composes(grid, actors):
    for m in (grid, actors):
        assert m.slice(hosts=1).sizes == {"gpus": 4}
        assert m.slice(gpus=slice(1, 3)).sizes == {"hosts": 2, "gpus": 2}
        assert m.slice(gpus=slice(None, None, 3)).sizes == {"hosts": 2, "gpus": 2}
        assert m.slice(hosts=0, gpus=2).sizes == {}
        assert m.slice(gpus=slice(1, None)).slice(gpus=slice(1, None)).sizes == {"hosts": 2, "gpus": 2}
        assert m.slice(gpus=slice(5, 9)).size() == 0
    vm = actors.slice(gpus=slice(1, None, 2)).slice(gpus=1).where.call().get()
    assert vm.extent == {"hosts": 2}
    assert own_ranks(vm) == [3, 7]
    vm = actors.slice(gpus=slice(-2, None)).slice(hosts=1).where.call().get()
    assert own_ranks(vm) == [6, 7]


def test_slice_errors_name_dimension_and_range(actors, grid):
    for m in (grid, actors):
        with pytest.raises(ValueError, match=r"no dimension 'gpu'.*'gpus': 4") as e:
            m.slice(gpu=0)
        assert isinstance(e.value, TypeError) and isinstance(e.value, KeyError)  # upstream: TypeError
        with pytest.raises(IndexError, match=r"index 4 .*'gpus' of size 4 \(valid: 0\.\.4\)") as e:
            m.slice(gpus=4)
        assert isinstance(e.value, ValueError)
        with pytest.raises(IndexError, match=r"index -1 .*'gpus'.*negative"):
            m.slice(gpus=-1)  # upstream rejects negative indices too
        with pytest.raises(ValueError, match=r"step .*'gpus'.*got 0"):
            m.slice(gpus=slice(0, 4, 0))
        with pytest.raises(ValueError, match=r"step .*'gpus'.*got -1"):
            m.slice(gpus=slice(None, None, -1))
        with pytest.raises(ValueError, match=r"no dimension 'hosts'"):
            m.slice(hosts=0).slice(hosts=0)
        with pytest.raises(TypeError):
            m.slice(gpus="1")
        with pytest.raises(KeyError, match="'gpu'"):
            m.size("gpu")


def test_flatten(grid, actors):
    assert grid.flatten("all").sizes == {"all": 8}
    vm = actors.flatten("all").where.call().get()
    assert vm.extent == {"all": 8}
    assert own_ranks(vm) == list(range(8))
    assert [v[1] for v in vm.values()] == [{"all": i} for i in range(8)]
    # evenly spaced views flatten too
    assert own_ranks(actors.slice(hosts=1).flatten("x").where.call().get()) == [4, 5, 6, 7]
    assert own_ranks(actors.slice(gpus=slice(1, None, 2)).flatten("x").where.call().get()) == [1, 3, 5, 7]
    assert own_ranks(actors.slice(gpus=3).flatten("x").where.call().get()) == [3, 7]
    with pytest.raises(ValueError, match=r"cannot flatten .*'hosts'"):
        actors.slice(gpus=slice(1, 3)).flatten("x")
    with pytest.raises(ValueError, match="must not be empty"):
        grid.flatten("")


def test_rename(grid, actors):
    assert grid.rename(hosts="dp", gpus="tp").sizes == {"dp": 2, "tp": 4}
    assert grid.rename(hosts="gpus", gpus="hosts").sizes == {"gpus": 2, "hosts": 4}  # a swap
    vm = actors.rename(gpus="tp").where.call().get()
    assert vm.extent == {"hosts": 2, "tp": 4}
    assert vm.item(hosts=1, tp=2)[1] == {"hosts": 1, "tp": 2}
    with pytest.raises(KeyError, match="no dimension 'gpu'"):
        grid.rename(gpu="x")
    with pytest.raises(ValueError, match="'gpus' twice"):
        grid.rename(hosts="gpus")


def test_split(grid, actors):
    assert grid.split(gpus=("node", "local"), local=2).sizes == {"hosts": 2, "node": 2, "local": 2}
    assert grid.split(hosts=("dp", "pp"), gpus=("tp", "cp"), pp=1, cp=2).sizes == {
        "dp": 2,
        "pp": 1,
        "tp": 2,
        "cp": 2,
    }
    m = actors.split(gpus=("a", "b"), a=2)
    vm = m.where.call().get()
    assert vm.extent == {"hosts": 2, "a": 2, "b": 2}
    assert own_ranks(vm) == list(range(8))
    assert vm.item(hosts=1, a=1, b=0)[4] == 6
    # split a strided view: ranks are unchanged, and flatten undoes it
    s = actors.slice(gpus=slice(1, None, 2)).split(hosts=("h",), gpus=("x", "y"), y=1)
    assert s.sizes == {"h": 2, "x": 2, "y": 1}
    assert own_ranks(s.where.call().get()) == [1, 3, 5, 7]
    assert own_ranks(s.flatten("z").where.call().get()) == [1, 3, 5, 7]
    with pytest.raises(ValueError, match=r"'gpus' of size 4 cannot be split into \{'a': 3, 'b': \?\}"):
        grid.split(gpus=("a", "b"), a=3)
    with pytest.raises(ValueError, match="infer"):
        grid.split(gpus=("a", "b"))
    with pytest.raises(ValueError, match="unused size constraints"):
        grid.split(gpus=("a", "b"), a=2, c=3)
    with pytest.raises(ValueError, match="sequence of new dimension names"):
        grid.split(gpus="ab")
    with pytest.raises(ValueError, match="positive int"):
        grid.split(gpus=("a", "b"), a=0)
    with pytest.raises(ValueError, match="'hosts' twice"):
        grid.split(gpus=("hosts", "b"), b=2)


def test_value_mesh_of_strided_slice(actors):
    vm = actors.slice(gpus=slice(1, None, 2)).where.call().get()
    assert isinstance(vm, ValueMesh)
    assert vm.extent == {"hosts": 2, "gpus": 2}
    assert len(vm) == vm.size() == 4
    assert vm.sizes == {"hosts": 2, "gpus": 2} and vm.size("gpus") == 2
    with pytest.raises(KeyError, match="'gpu'"):
        vm.size("gpu")
    assert own_ranks(vm) == [1, 3, 5, 7]  # rank order of the view
    assert [p.rank for p, _ in vm] == [0, 1, 2, 3]
    assert [dict(p) for p, _ in vm.items()] == [
        {"hosts": 0, "gpus": 0},
        {"hosts": 0, "gpus": 1},
        {"hosts": 1, "gpus": 0},
        {"hosts": 1, "gpus": 1},
    ]
    assert vm.item(hosts=1, gpus=0)[4] == 5
    assert vm.get(3)[4] == 7
    with pytest.raises(IndexError):
        vm.get(4)
    with pytest.raises(IndexError):
        vm.get(-1)
    with pytest.raises(IndexError, match="'gpus' of size 2"):
        vm.item(hosts=0, gpus=2)
    with pytest.raises(KeyError):
        vm.item(hosts=0)
    with pytest.raises(KeyError):
        vm.item(hosts=0, gpus=0, x=0)


def test_current_rank_vs_own_rank(actors):
    # current_rank()/message_rank: the point in the mesh the message was
    # sent to; actor_instance.rank: the point in the mesh it was spawned in.
    vm = actors.slice(hosts=1, gpus=slice(2, None)).where.call().get()
    assert [v[:3] for v in vm.values()] == [(0, {"gpus": 0}, {"gpus": 2}), (1, {"gpus": 1}, {"gpus": 2})]
    assert [v[3] for v in vm.values()] == [{"hosts": 1, "gpus": 2}, {"hosts": 1, "gpus": 3}]
    pts = actors.slice(hosts=1, gpus=slice(2, None)).points.call().get()
    assert pts.get(1) == (True, "{'gpus': 1/2}", "{'hosts': 1/2, 'gpus': 3/4}")


def test_spawn_on_view_ranks_in_that_view(grid):
    sub = grid.slice(gpus=slice(1, None, 2)).split(gpus=("g",))
    m = sub.spawn("on_view", Counter, 0)
    try:
        vm = m.where.call().get()
        assert vm.extent == {"hosts": 2, "g": 2}
        assert [v[3] for v in vm.values()] == [{"hosts": h, "g": g} for h in range(2) for g in range(2)]
        assert m.slice(hosts=1, g=1).points.call_one().get()[2] == "{'hosts': 1/2, 'g': 1/2}"
    finally:
        m.stop().get(timeout=30)


def test_pickled_mesh_keeps_its_view(grid, actors):
    view = actors.slice(gpus=slice(1, None, 2)).flatten("odd")
    back = pickle.loads(pickle.dumps(view))
    assert back.sizes == {"odd": 4}
    assert own_ranks(back.where.call().get()) == [1, 3, 5, 7]
    # sent to an actor, which calls it and sends it back
    callers = grid.slice(hosts=0, gpus=slice(0, 1)).spawn("geo_callers", Caller)
    try:
        ranks = callers.slice(gpus=0).call_where.call_one(view).get()
        assert ranks == [1, 3, 5, 7]
        echoed = callers.slice(gpus=0).echo_back.call_one(actors.slice(hosts=1, gpus=slice(None, None, 3))).get()
        assert echoed.sizes == {"gpus": 2}
        assert own_ranks(echoed.where.call().get()) == [4, 7]
    finally:
        callers.stop().get(timeout=30)
