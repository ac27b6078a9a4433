"""Distributed tensors on real procs: ops under mesh.activate(), fetch_shard,
reduce (also over one dim of a 2-d mesh), errors, actors receiving shards,
remote functions, streams, nn training and a proc dying mid-op."""

import os
import signal
import time

import pytest

torch = pytest.importorskip("torch")

import monarch  # noqa: E402
from monarch import RemoteTensorError, Stream, fetch_shard, inspect, no_mesh  # noqa: E402
from monarch.actor import SupervisionError, this_host  # noqa: E402

T = 120  # seconds: every wait is bounded


@pytest.fixture(scope="module")
def mesh():
    pm = this_host().spawn_procs(per_host={"gpu": 4})
    yield pm
    pm.stop().get(timeout=30)


def shards(t, n=4, dim="gpu"):
    return [fetch_shard(t, **{dim: i}).result(timeout=T) for i in range(n)]


def test_ops_run_on_every_proc_and_fetch(mesh):
    with mesh.activate():
        t = torch.rand(3, 4)
        u = t @ t.T + 1
        assert isinstance(t, monarch.DTensor) and t.shape == (3, 4) and u.shape == (3, 3)
        assert t.dtype == torch.float32
        inside = fetch_shard(u, gpu=0).result(timeout=T)  # a local tensor, also under activate()
        assert type(inside) is torch.Tensor
    ts, us = shards(t), shards(u)
    for a, b in zip(ts, us):
        assert torch.allclose(a @ a.T + 1, b)
    assert torch.equal(inside, us[0])
    # Independent random shards per proc.
    assert not torch.equal(ts[0], ts[1])
    assert torch.equal(fetch_shard(u, gpu=2).get(timeout=T), us[2])
    assert torch.equal(inspect(u, gpu=3), us[3])


def test_ops_outside_activate_use_the_tensor_mesh(mesh):
    with mesh.activate():
        t = torch.ones(2, 2)
    v = (t * 3).sum()
    assert isinstance(v, monarch.DTensor)
    assert fetch_shard(v, gpu=1).result(timeout=T).item() == 12.0


def test_shape_error_is_raised_when_issued(mesh):
    with mesh.activate():
        a = torch.zeros(3, 4)
        with pytest.raises(RuntimeError, match="same reduction dim|cannot be multiplied"):
            a @ torch.zeros(5, 6)
        ok = a + 1
    assert fetch_shard(ok).result(timeout=T).sum().item() == 12.0


def test_reduce_sum_avg_max_min(mesh):
    with mesh.activate():
        r = mesh.rank("gpu").float() + torch.zeros(5)
        s = r.reduce("gpu", "sum")
        a = r.reduce("gpu", "avg")
        hi = r.reduce("gpu", "max")
        lo = r.reduce("gpu", "min")
    for i in range(4):
        assert fetch_shard(r, gpu=i).result(timeout=T).tolist() == [float(i)] * 5
        assert fetch_shard(s, gpu=i).result(timeout=T).tolist() == [6.0] * 5
        assert fetch_shard(a, gpu=i).result(timeout=T).tolist() == [1.5] * 5
        assert fetch_shard(hi, gpu=i).result(timeout=T).tolist() == [3.0] * 5
        assert fetch_shard(lo, gpu=i).result(timeout=T).tolist() == [0.0] * 5


def test_reduce_matches_local_sum_of_random_shards(mesh):
    with mesh.activate():
        t = torch.randn(37, 3)  # not divisible by 4: uneven chunks
        s = t.reduce("gpu", "sum")
    want = sum(shards(t))
    for got in shards(s):
        assert torch.allclose(got, want, atol=1e-5)
    # Every proc holds the same bits (combined in the same order).
    assert all(torch.equal(shards(s)[0], x) for x in shards(s))


def test_reduce_in_place_and_scatter(mesh):
    with mesh.activate():
        t = mesh.rank("gpu").float() + torch.arange(8.0)
        # As upstream: dim 0 is the group's size, member i gets row i.
        sc = t.view(4, 2).reduce("gpu", "sum", scatter=True)
        assert sc.shape == (2,)
        t.reduce_("gpu", "sum")
        with pytest.raises(TypeError, match="must be the size"):
            torch.zeros(8).reduce("gpu", scatter=True)
        with pytest.raises(ValueError, match="dimensions"):
            t.reduce("hosts")
    full = torch.arange(8.0) * 4 + 6
    for i in range(4):
        assert torch.equal(fetch_shard(t, gpu=i).result(timeout=T), full)
        assert torch.equal(fetch_shard(sc, gpu=i).result(timeout=T), full[2 * i : 2 * i + 2])


def test_reduce_over_one_dim_of_a_2d_mesh():
    pm = this_host().spawn_procs(per_host={"host": 2, "gpu": 2})
    try:
        with pm.activate():
            v = pm.rank("host").float() * 10 + pm.rank("gpu").float()
            by_gpu = v.reduce("gpu", "sum")
            by_host = v.reduce("host", "sum")
            both = v.reduce(("host", "gpu"), "sum")
        for h in range(2):
            for g in range(2):
                at = {"host": h, "gpu": g}
                assert fetch_shard(v, at).result(timeout=T).item() == h * 10 + g
                assert fetch_shard(by_gpu, at).result(timeout=T).item() == 20 * h + 1
                assert fetch_shard(by_host, at).result(timeout=T).item() == 10 + 2 * g
                assert fetch_shard(both, at).result(timeout=T).item() == 22
    finally:
        pm.stop().get(timeout=30)


def test_worker_error_surfaces_at_fetch_and_mesh_keeps_working(mesh):
    with mesh.activate():
        t = torch.ones(4)
        bad = t.new_empty(0).view(-1).reshape(0)
        idx = torch.tensor([7])
        broken = t[idx]  # index out of range: only the worker finds out
        after = broken + 1
        fine = t * 2
    with pytest.raises(Exception, match="out of bounds|out of range") as e:
        fetch_shard(after, gpu=1).result(timeout=T)
    assert "Traceback" in str(e.value) or isinstance(e.value, RemoteTensorError)
    assert fetch_shard(fine, gpu=1).result(timeout=T).tolist() == [2.0] * 4
    assert fetch_shard(bad).result(timeout=T).numel() == 0


def test_a_worker_error_before_a_reduce_fails_it_on_every_member(mesh):
    # gpu=2 has no input for the reduce: it tells the other members, which
    # would otherwise wait for its chunks; the mesh keeps working.
    from tensor_actors import failing_on

    with mesh.activate():
        r = failing_on(torch.ones(3), 2).reduce("gpu", "sum")
    for g in range(4):
        with pytest.raises(Exception, match="failed on gpu 2 on purpose"):
            fetch_shard(r, gpu=g).result(timeout=T)
    with mesh.activate():
        ok = torch.ones(3).reduce("gpu", "sum")
    assert fetch_shard(ok, gpu=3).result(timeout=T).tolist() == [4.0] * 3


def test_values_need_a_fetch(mesh):
    with mesh.activate():
        t = torch.ones(1)
        with pytest.raises(RuntimeError, match="fetch_shard"):
            t.item()


def test_actors_receive_their_local_shard_and_rref(mesh):
    from tensor_actors import ShardReader

    readers = mesh.spawn("shard_readers", ShardReader)
    with mesh.activate():
        t = mesh.rank("gpu").float() + torch.ones(3)
    totals = readers.total.call(t).get(timeout=T)
    assert [v for _, v in totals.items()] == [3.0, 6.0, 9.0, 12.0]
    with mesh.activate():
        d = readers.doubled.rref(t)
        assert d.shape == (3,)
        e = d + 1
    assert fetch_shard(e, gpu=2).result(timeout=T).tolist() == [7.0] * 3


def test_remote_functions(mesh):
    from tensor_actors import local_sum, plus_one

    with mesh.activate():
        t = mesh.rank("gpu").float() + torch.zeros(2)
        p = plus_one(t)
        sums = local_sum.call(p).get(timeout=T)
    assert fetch_shard(p, gpu=3).result(timeout=T).tolist() == [4.0, 4.0]
    assert [v for _, v in sums.items()] == [2.0, 4.0, 6.0, 8.0]


def test_no_mesh_runs_locally(mesh):
    with mesh.activate():
        with no_mesh():
            local = torch.ones(2)
        assert type(local) is torch.Tensor
        remote_t = torch.ones(2) + local
        assert isinstance(remote_t, monarch.DTensor)
    assert fetch_shard(remote_t).result(timeout=T).tolist() == [2.0, 2.0]


def test_streams(mesh):
    comms = Stream("comms")
    with mesh.activate():
        t = torch.ones(6)
        with comms.activate():
            r = t.reduce("gpu", "sum")
            assert monarch.get_active_stream() is comms
        u = r * 2  # main reads a tensor of the comms stream
    assert fetch_shard(r, gpu=1).result(timeout=T).tolist() == [4.0] * 6
    assert fetch_shard(u, gpu=0).result(timeout=T).tolist() == [8.0] * 6


def test_nn_training_with_averaged_gradients(mesh):
    torch.manual_seed(0)
    with mesh.activate():
        model = torch.nn.Linear(4, 1)
        x = torch.randn(8, 4)
        y = torch.randn(8, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        g = model.weight.grad.reduce("gpu", "avg")
        with torch.no_grad():
            model.weight -= 0.1 * g
    assert model.weight.shape == (1, 4)
    gs = shards(model.weight.grad)
    ws = shards(model.weight)
    avg = sum(gs) / 4
    assert torch.allclose(fetch_shard(g).result(timeout=T), avg, atol=1e-6)
    # Each proc initialised its own weights; each moved by the same averaged step.
    assert not torch.equal(ws[0], ws[1])


def test_proc_dying_mid_op_gives_supervision_error():
    from tensor_actors import ShardReader

    pm = this_host().spawn_procs(per_host={"gpu": 2})
    try:
        pid = pm.spawn("pids", ShardReader).pid.call().get(timeout=T).item(gpu=1)
        with pm.activate():
            t = torch.ones(2)
            os.kill(pid, signal.SIGKILL)
            u = t + 1
        with pytest.raises((SupervisionError, monarch.actor.ActorError)):
            fetch_shard(u, gpu=1).result(timeout=T)
    finally:
        try:
            pm.stop().get(timeout=30)
        except Exception:  # noqa: BLE001 - the mesh lost a proc
            pass


def _running(pm, gpu):
    """What the streams of the tensor worker at ``gpu`` run now (a call its
    actor thread answers while the streams run ops)."""
    stats = pm._tensor_controller.worker_at({"gpu": gpu}).stats.call_one().get(timeout=T)
    return stats["running"]


def _wait_until(cond, what, bound=90.0):
    deadline = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < deadline, f"still not {what} after {bound} s"
        time.sleep(0.05)


def test_proc_dying_mid_reduce_frees_the_live_peer_and_fails_the_fetch():
    # gpu=0 enters the reduce and waits for the chunk of gpu=1, which stalls
    # before its reduce and is killed. The live gpu=0 gives up on its own
    # (it watches its peers: its stream is free again, long before the
    # reduce's own 300 s bound), and the fetch from it raises the loss.
    from tensor_actors import ShardReader, stalled_on

    pm = this_host().spawn_procs(per_host={"gpu": 2})
    try:
        pid = pm.spawn("pids", ShardReader).pid.call().get(timeout=T).item(gpu=1)
        with pm.activate():
            t = torch.ones(4)
            r = stalled_on(t, 1).reduce("gpu", "sum")
        pm._tensor_controller.flush()
        _wait_until(lambda: _running(pm, 0).get("main") == "reduce", "in the reduce on gpu=0")
        _wait_until(lambda: _running(pm, 1).get("main") == "op", "stalled on gpu=1")
        os.kill(pid, signal.SIGKILL)
        _wait_until(lambda: _running(pm, 0).get("main") is None, "free on gpu=0")
        with pytest.raises(SupervisionError):
            fetch_shard(r, gpu=0).result(timeout=T)
    finally:
        try:
            pm.stop().get(timeout=30)
        except Exception:  # noqa: BLE001 - the mesh lost a proc
            pass
