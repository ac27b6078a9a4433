"""Distributed tensors on real procs, the API around the ops: to_mesh between
meshes, show / inspect / fetch_shard of pytrees, mesh.rank over several
dims, no_mesh, get_active_mesh, and send(remote_fn, ..., port=...)."""

import os
import signal

import pytest

torch = pytest.importorskip("torch")

import monarch  # noqa: E402
from monarch import fetch_shard, inspect, no_mesh, remote  # noqa: E402
from monarch.actor import Channel, send, this_host  # noqa: E402

T = 120  # seconds: every wait is bounded


@remote(propagate=lambda t: t)
def _shifted(t):
    return t + 100


@remote
def _coord_sum(t):
    return float(t.sum())


@remote
def _fails(t):
    raise ValueError("remote function failed on purpose")


@remote
def _shard_and_coords(t, scale=1.0):
    return {"shard": t * scale, "pid": os.getpid()}


def _plain_double(t):
    return t * 2


@pytest.fixture(scope="module")
def grid():
    """A 2x2 mesh (hosts x gpus)."""
    pm = this_host().spawn_procs(per_host={"host": 2, "gpu": 2})
    yield pm
    pm.stop().get(timeout=30)


@pytest.fixture(scope="module")
def pair():
    """A 2-proc mesh of its own."""
    pm = this_host().spawn_procs(per_host={"gpu": 2})
    yield pm
    pm.stop().get(timeout=30)


def test_to_mesh_between_meshes_of_the_same_shape(pair, grid):
    other = grid.slice(host=1)  # {"gpu": 2}, other procs
    with pair.activate():
        t = pair.rank("gpu").float() + torch.arange(3.0)
    moved = t.to_mesh(other)
    assert isinstance(moved, monarch.DTensor) and moved.shape == (3,)
    assert moved.mesh is other
    with other.activate():
        doubled = moved * 2  # computes on the destination mesh
    for g in range(2):
        want = torch.arange(3.0) + g
        assert torch.equal(fetch_shard(moved, gpu=g).result(timeout=T), want)
        assert torch.equal(fetch_shard(doubled, gpu=g).result(timeout=T), want * 2)
    # And back, with monarch.to_mesh over a pytree.
    back, n = monarch.to_mesh((doubled, 7), pair)
    assert n == 7
    assert torch.equal(fetch_shard(back, gpu=1).result(timeout=T), (torch.arange(3.0) + 1) * 2)


def test_to_mesh_broadcasts_to_a_dim_only_the_destination_has(pair, grid):
    with pair.activate():
        t = pair.rank("gpu").float() * 10 + torch.zeros(2)
    b = t.to_mesh(grid)
    for h in range(2):
        for g in range(2):
            assert fetch_shard(b, host=h, gpu=g).result(timeout=T).tolist() == [10.0 * g] * 2


def test_to_mesh_with_different_shapes_is_refused(pair, grid):
    with grid.activate():
        t = torch.ones(2)
    with pytest.raises(ValueError, match="does not have dimension"):
        t.to_mesh(pair)  # pair has no "host"
    with pair.activate():
        u = torch.ones(2)
    with pytest.raises(ValueError, match="dimension 'gpu' has size 1"):
        u.to_mesh(grid.slice(gpu=slice(0, 1)))
    with pair.activate():
        w = torch.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="requires grad"):
        w.to_mesh(grid.slice(host=0))


def test_to_mesh_of_a_failed_tensor_fails_at_the_destination(pair, grid):
    with pair.activate():
        bad = torch.ones(2)[torch.tensor([5])]  # index out of range on the workers
    moved = bad.to_mesh(grid.slice(host=0))
    with pytest.raises(Exception, match="out of bounds|out of range"):
        fetch_shard(moved, gpu=1).result(timeout=T)


def test_fetch_shard_and_inspect_of_a_pytree(grid):
    with grid.activate():
        a = grid.rank("gpu").float() + torch.zeros(1)
        b = grid.rank("host").float() + torch.zeros(2)
    got = fetch_shard({"a": a, "b": [b, "x"]}, {"host": 1}, gpu=1).result(timeout=T)
    assert got["a"].tolist() == [1.0] and got["b"][0].tolist() == [1.0, 1.0] and got["b"][1] == "x"
    assert type(got["a"]) is torch.Tensor
    pair_of = inspect((a, b), host=1)
    assert pair_of[0].tolist() == [0.0] and pair_of[1].tolist() == [1.0, 1.0]
    assert inspect(3) == 3  # nothing distributed: the value itself


def test_show_prints_the_shard(grid, capsys):
    with grid.activate():
        t = grid.rank("host").float() * 10 + torch.arange(3.0)
    monarch.show(t, host=1, gpu=0)
    out = capsys.readouterr().out
    assert "host=1, gpu=0" in out and "10., 11., 12." in out


def test_rank_over_several_dims(grid):
    with grid.activate():
        both = grid.rank(("host", "gpu"))
        flipped = grid.rank(["gpu", "host"])
        assert both.dtype == torch.int64 and both.shape == ()
        with pytest.raises(KeyError, match="no dimension 'hosts'"):
            grid.rank("hosts")
    for h in range(2):
        for g in range(2):
            assert inspect(both, host=h, gpu=g).item() == 2 * h + g
            assert inspect(flipped, host=h, gpu=g).item() == 2 * g + h


def test_no_mesh_and_get_active_mesh(grid):
    with pytest.raises(ValueError, match="no device mesh is active"):
        monarch.get_active_mesh()
    with grid.activate():
        assert monarch.get_active_mesh() is grid
        d = torch.ones(2)
        with no_mesh.activate():
            local = torch.ones(2)
            with pytest.raises(ValueError, match="no device mesh is active"):
                monarch.get_active_mesh()
            e = d + 1  # an op on a distributed tensor still runs on its mesh
        assert type(local) is torch.Tensor
        assert isinstance(e, monarch.DTensor)
    assert inspect(e, host=1, gpu=1).tolist() == [2.0, 2.0]


def test_send_a_remote_function_to_a_port(grid):
    port, recv = Channel.open()
    with grid.activate():
        t = grid.rank(("host", "gpu")).float() + torch.zeros(2)
        send(_coord_sum, args=(t,), kwargs={}, port=port)
    got = sorted(recv.recv().get(timeout=T) for _ in range(4))
    assert got == [0.0, 2.0, 4.0, 6.0]
    # Errors reach the port too.
    with grid.activate():
        send(_fails, args=(t,), kwargs={}, port=port, selection="choose")
    with pytest.raises(Exception, match="failed on purpose"):
        recv.recv().get(timeout=T)
    with pytest.raises(ValueError, match="needs an active mesh"):
        send(_coord_sum, args=(1,), kwargs={}, port=port)
    with pytest.raises(TypeError, match="takes a Port"):
        with grid.activate():
            send(_coord_sum, args=(t,), kwargs={}, port=3)


def test_remote_function_results_stay_distributed(grid):
    with grid.activate():
        t = torch.zeros(2)
        s = _shifted(t)
    assert isinstance(s, monarch.DTensor)
    assert inspect(s, host=1, gpu=1).tolist() == [100.0, 100.0]


def test_to_mesh_from_a_proc_that_dies_fails_at_the_destination(grid):
    # The sender at gpu=1 stalls before sending and is killed: the receiver
    # at gpu=1 of the destination (it watches its sender) gives up, and the
    # fetch from it raises instead of waiting.
    from tensor_actors import ShardReader, stalled_on

    src = this_host().spawn_procs(per_host={"gpu": 2})
    try:
        pid = src.spawn("pids", ShardReader).pid.call().get(timeout=T).item(gpu=1)
        with src.activate():
            t = stalled_on(torch.ones(2), 1)
        dst = grid.slice(host=0)
        moved = t.to_mesh(dst)
        assert fetch_shard(moved, gpu=0).result(timeout=T).tolist() == [1.0, 1.0]
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(Exception, match="gone"):
            fetch_shard(moved, gpu=1).result(timeout=T)
        with dst.activate():
            ok = torch.ones(1) * 3  # the destination keeps working
        assert fetch_shard(ok, gpu=1).result(timeout=T).tolist() == [3.0]
    finally:
        try:
            src.stop().get(timeout=30)
        except Exception:  # noqa: BLE001 - the mesh lost a proc
            pass


def test_call_on_shard_and_fetch_runs_on_one_shard(grid):
    with grid.activate():
        t = grid.rank(("host", "gpu")).float() + torch.zeros(2)
        got = monarch.call_on_shard_and_fetch(_shard_and_coords, t, shard={"host": 1, "gpu": 0}, scale=3.0)
    value = got.result(timeout=T)
    assert type(value["shard"]) is torch.Tensor and value["pid"] != os.getpid()
    assert value["shard"].tolist() == [6.0, 6.0]  # rank 2's shard, times 3
    # No shard: coordinate 0 of every dim; the method form; a plain function;
    # the mesh found from a distributed tensor argument without activate().
    first = _shard_and_coords.call_on_shard_and_fetch(t).result(timeout=T)
    assert first["shard"].tolist() == [0.0, 0.0] and first["pid"] != value["pid"]
    assert monarch.call_on_shard_and_fetch(_plain_double, t, shard={"gpu": 1}).result(timeout=T).tolist() == [2.0, 2.0]
    # Errors: the worker's at .result(); bad coordinates and no mesh at the call.
    with grid.activate():
        with pytest.raises(Exception, match="failed on purpose"):
            monarch.call_on_shard_and_fetch(_fails, t).result(timeout=T)
        with pytest.raises(IndexError, match="gpu=5 is out of range"):
            monarch.call_on_shard_and_fetch(_coord_sum, t, shard={"gpu": 5})
        with pytest.raises(ValueError, match="no dimension gpus"):
            monarch.call_on_shard_and_fetch(_coord_sum, t, shard={"gpus": 0})
    with pytest.raises(ValueError, match="needs an active mesh"):
        monarch.call_on_shard_and_fetch(_coord_sum, 1)
    # The mesh keeps working.
    assert inspect(t, host=1, gpu=1).tolist() == [3.0, 3.0]
