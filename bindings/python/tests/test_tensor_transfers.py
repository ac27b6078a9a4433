"""Moving distributed tensors on real procs: fetch_shard of every dtype,
small (in the answer) and large (written into the controller's memory over
the data plane), byte-exact; a fetch sees the value at the point it was
issued; collectives across dtypes and reductions."""

import gc
import os
import signal
import time

import pytest

torch = pytest.importorskip("torch")

from monarch import fetch_shard, remote  # noqa: E402
from monarch._src.tensor import memory  # noqa: E402
from monarch.actor import SupervisionError, this_host  # noqa: E402

T = 120  # seconds: every wait is bounded
MiB = 1 << 20


@pytest.fixture(scope="module")
def mesh():
    pm = this_host().spawn_procs(per_host={"gpu": 4})
    yield pm
    pm.stop().get(timeout=30)


def _local(dtype, n, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(n, generator=g, dtype=dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), (n,), generator=g, dtype=dtype)


DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.bool,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fetch_small_and_large_is_byte_exact(mesh, dtype):
    for n in (0, 7, (3 * MiB) // dtype.itemsize + 5):
        x = _local(dtype, n, seed=n)
        with mesh.activate():
            d = x.clone()  # the controller's tensor, shipped with the op
            shape = (n // 5, 5) if n % 5 == 0 and n else (n,)
            d = d.reshape(shape)
        got = [fetch_shard(d, gpu=i).result(timeout=T) for i in (0, 3)]
        for g in got:
            assert type(g) is torch.Tensor and g.dtype == dtype and tuple(g.shape) == shape
            assert torch.equal(g.reshape(-1).view(torch.uint8), x.view(torch.uint8))


def test_fetch_zero_dim_and_non_contiguous(mesh):
    with mesh.activate():
        s = torch.tensor(2.5) * 2
        big = torch.arange(1024 * 1024, dtype=torch.int64).reshape(1024, 1024)
        tr = big.T  # a non-contiguous view, 8 MiB
    got = fetch_shard(s).result(timeout=T)
    assert got.shape == () and got.item() == 5.0
    expect = torch.arange(1024 * 1024, dtype=torch.int64).reshape(1024, 1024).T
    assert torch.equal(fetch_shard(tr, gpu=1).result(timeout=T), expect)


def test_fetch_and_reduce_of_lazy_conjugates(mesh):
    with mesh.activate():
        z = torch.complex(torch.ones(MiB // 8 + 1), torch.ones(MiB // 8 + 1))
        c = z.conj()  # a view with the conjugate bit set
        small = z[:3].conj()
        r = c.reduce("gpu", "sum")
    want = torch.complex(torch.ones(MiB // 8 + 1), -torch.ones(MiB // 8 + 1))
    assert torch.equal(fetch_shard(c).result(timeout=T), want)
    assert torch.equal(fetch_shard(small).result(timeout=T), want[:3])
    assert torch.equal(fetch_shard(r, gpu=1).result(timeout=T), want * 4)


def test_large_fetch_sees_the_value_when_it_was_issued(mesh):
    with mesh.activate():
        t = torch.zeros(MiB)  # 4 MiB
        before = fetch_shard(t, gpu=2)
        t.add_(1)
        after = fetch_shard(t, gpu=2)
        small = torch.zeros(3)
        small_before = fetch_shard(small, gpu=1)
        small.add_(1)
    assert before.result(timeout=T).sum().item() == 0
    assert after.result(timeout=T).sum().item() == MiB
    assert small_before.result(timeout=T).tolist() == [0.0, 0.0, 0.0]


def test_fetched_shards_keep_their_memory_while_alive(mesh):
    with mesh.activate():
        a = torch.full((MiB,), 1.0)
        b = torch.full((MiB,), 2.0)
    fa = fetch_shard(a).result(timeout=T)
    fb = fetch_shard(b).result(timeout=T)
    assert fa.eq(1.0).all() and fb.eq(2.0).all()
    view = fa[10:20]
    del fa
    gc.collect()
    fb2 = fetch_shard(b, gpu=1).result(timeout=T)  # may reuse memory no tensor holds
    assert view.eq(1.0).all() and fb2.eq(2.0).all() and fb.eq(2.0).all()
    assert fb.requires_grad is False


def _bigger(x):
    return torch.ones(x.numel() * 2)


def test_large_fetch_of_a_shard_unlike_its_metadata_travels_in_the_answer(mesh):
    # propagate says the result has x's shape; the worker's value is twice as long.
    f = remote(_bigger, propagate=lambda x: torch.empty_like(x))
    with mesh.activate():
        x = torch.zeros(MiB)
        y = f(x)
    assert y.shape == (MiB,)
    got = fetch_shard(y).result(timeout=T)
    assert got.shape == (2 * MiB,) and got.eq(1.0).all()


def test_requires_grad_survives_a_fetch(mesh):
    with mesh.activate():
        w = torch.ones(4, requires_grad=True)
        big = torch.ones(MiB, requires_grad=True)
    assert fetch_shard(w).result(timeout=T).requires_grad
    assert fetch_shard(big).result(timeout=T).requires_grad


def test_memory_pool_keeps_a_bounded_amount():
    pool = memory.Pool()
    pool.KEEP = 3 * MiB
    ms = [pool.take(MiB) for _ in range(5)]
    for m in ms:
        pool.give(m)
    assert pool._bytes == 3 * MiB
    assert pool.take(MiB) in ms


def _rank_data(r, dtype_name, n):
    """On a worker: this rank's data for the collective tests."""
    return _local(getattr(torch, dtype_name), n, seed=1000 + int(r))


def _expected(op, dtype, n, ranks):
    parts = [_local(dtype, n, seed=1000 + i) for i in ranks]
    acc = parts[0].clone()
    for p in parts[1:]:
        if op in ("sum", "avg"):
            acc.add_(p)
        elif op == "max":
            torch.maximum(acc, p, out=acc)
        elif op == "min":
            torch.minimum(acc, p, out=acc)
        elif op == "band":
            acc.bitwise_and_(p)
        elif op == "bor":
            acc.bitwise_or_(p)
        elif op == "bxor":
            acc.bitwise_xor_(p)
        else:
            acc.mul_(p)
    if op == "avg":
        if dtype.is_floating_point or dtype.is_complex:
            acc.div_(len(ranks))
        else:
            acc = torch.div(acc, len(ranks), rounding_mode="trunc")
    return acc


def _ops_for(dtype):
    if dtype == torch.bool:
        return ("sum", "max", "min", "product", "band", "bor", "bxor")
    if dtype.is_complex:
        return ("sum", "avg", "product")
    if dtype.is_floating_point:
        return ("sum", "avg", "max", "min", "product")
    return ("sum", "avg", "max", "min", "product", "band", "bor", "bxor")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reduce_every_op_and_dtype_small_and_large(mesh, dtype):
    make = remote(_rank_data, propagate=lambda r, d, n: torch.empty(n, dtype=getattr(torch, d)))
    name = str(dtype).split(".")[-1]
    for n in (5, MiB // dtype.itemsize + 3):  # a few bytes; over 1 MiB, uneven chunks
        with mesh.activate():
            x = make(mesh.rank("gpu"), name, n)
            outs = {op: x.reduce("gpu", op) for op in _ops_for(dtype)}
        for op, r in outs.items():
            want = _expected(op, dtype, n, range(4))
            for i in (0, 3):
                got = fetch_shard(r, gpu=i).result(timeout=T)
                assert got.dtype == dtype, (op, n)
                if dtype.is_complex and op == "product":
                    # Complex products round differently in vectorized and
                    # scalar kernels (chunks of different lengths).
                    assert torch.allclose(got, want, rtol=1e-5), (op, n, i)
                else:
                    assert torch.equal(got, want), (op, n, i)


def test_reduce_scatter_and_in_place_large(mesh):
    make = remote(_rank_data, propagate=lambda r, d, n: torch.empty(n, dtype=getattr(torch, d)))
    n = 4 * (MiB // 4)  # 4 MiB of float32, dim 0 divisible by 4
    with mesh.activate():
        x = make(mesh.rank("gpu"), "float32", n).reshape(n // 4, 4)
        s = x.view(4, n // 16, 4).reduce("gpu", "sum", scatter=True)  # member i: row i
        y = x.clone()
        y.reduce_("gpu", "max")
    want_sum = _expected("sum", torch.float32, n, range(4)).reshape(n // 4, 4)
    want_max = _expected("max", torch.float32, n, range(4)).reshape(n // 4, 4)
    q = n // 16
    for i in range(4):
        assert torch.equal(fetch_shard(s, gpu=i).result(timeout=T), want_sum[i * q : (i + 1) * q])
    assert torch.equal(fetch_shard(y, gpu=2).result(timeout=T), want_max)
    assert torch.equal(fetch_shard(x, gpu=1).result(timeout=T).reshape(-1), _local(torch.float32, n, seed=1001))


def test_large_reduce_over_one_dim_of_a_2d_mesh():
    pm = this_host().spawn_procs(per_host={"host": 2, "gpu": 2})
    try:
        make = remote(_rank_data, propagate=lambda r, d, n: torch.empty(n, dtype=getattr(torch, d)))
        n = MiB // 4 + 1
        with pm.activate():
            # Global rank: host * 2 + gpu.
            x = make(pm.rank("host") * 2 + pm.rank("gpu"), "float32", n)
            r = x.reduce("gpu", "sum")
        for h in range(2):
            want = _expected("sum", torch.float32, n, [2 * h, 2 * h + 1])
            for gpu in range(2):
                assert torch.equal(fetch_shard(r, host=h, gpu=gpu).result(timeout=T), want)
    finally:
        pm.stop().get(timeout=30)


def _paths(pm, n):
    """Per proc: (same-host reduces, data-plane-only reduces, reduces that
    wrote their chunk into same-host peers' results) so far."""
    from tensor_actors import reduce_paths

    with pm.activate():
        got = reduce_paths.call().get(timeout=T)
    out = []
    for i in range(n):
        d = got.item(gpu=i)
        out.append((d.get("same_host", 0), d.get("data_plane", 0), d.get("pushed", 0)))
    return out


def _every_op_large(pm, n_procs):
    """Every reduction of a large float32 tensor (uneven chunks) and a
    reduce_ (in place), checked against torch on the same random shards."""
    make = remote(_rank_data, propagate=lambda r, d, n: torch.empty(n, dtype=getattr(torch, d)))
    n = 3 * MiB // 4 + 5
    with pm.activate():
        x = make(pm.rank("gpu"), "float32", n)
        outs = {op: x.reduce("gpu", op) for op in REDUCTIONS}
        y = x.clone()
        y.reduce_("gpu", "sum")
    ranks = range(n_procs)
    for op, r in outs.items():
        for i in (0, n_procs - 1):
            assert torch.equal(fetch_shard(r, gpu=i).result(timeout=T), _expected(op, torch.float32, n, ranks)), op
    for i in range(n_procs):
        assert torch.equal(fetch_shard(y, gpu=i).result(timeout=T), _expected("sum", torch.float32, n, ranks))
        assert torch.equal(fetch_shard(x, gpu=i).result(timeout=T), _local(torch.float32, n, seed=1000 + i))
    return len(REDUCTIONS) + 1


REDUCTIONS = ("sum", "avg", "max", "min", "product")


def test_large_reduce_reads_same_host_peers_straight(mesh):
    # Every member reads its chunk of the others straight and writes the
    # reduced chunk into their results (also for reduce_, in place).
    before = _paths(mesh, 4)
    count = _every_op_large(mesh, 4)
    after = _paths(mesh, 4)
    for (s0, d0, p0), (s1, d1, p1) in zip(before, after):
        assert (s1 - s0, d1 - d0, p1 - p0) == (count, 0, count)


def test_large_reduce_falls_back_to_the_data_plane(mesh):
    # With the data plane forced onto TCP (as between hosts), no peer is
    # read straight: every chunk travels through the data plane.
    from tensor_actors import set_rdma_backend

    with mesh.activate():
        set_rdma_backend.call("tcp").get(timeout=T)
    try:
        before = _paths(mesh, 4)
        count = _every_op_large(mesh, 4)
        after = _paths(mesh, 4)
    finally:
        with mesh.activate():
            set_rdma_backend.call(None).get(timeout=T)
    for (s0, d0, p0), (s1, d1, p1) in zip(before, after):
        assert (s1 - s0, d1 - d0, p1 - p0) == (0, count, 0)


def _vm_flags(addr: int) -> list[str]:
    """The VmFlags of this process's mapping holding ``addr``."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {addr:#x}")


def test_pool_memory_is_private_and_asks_for_huge_pages(mesh):
    # Shared anonymous memory would be shmem, which gets no transparent huge
    # pages (shmem_enabled=never): peers would read it 4 KiB page by page.
    from monarch._src.tensor.memory import POOL

    t = POOL.empty(torch.float32, (MiB,))
    flags = _vm_flags(t.data_ptr())
    assert "hg" in flags and "sh" not in flags, flags
    # Worker procs' torch puts large tensors on huge pages too.
    with mesh.activate():
        got = remote("os.getenv").call("THP_MEM_ALLOC_ENABLE").get(timeout=T)
    assert [v for _, v in got.items()] == ["1"] * 4


def _uneven(r):
    """On a worker: rank 1's shard is longer than the others'."""
    n = MiB // 4 + (1000 if int(r) == 1 else 0)
    return torch.ones(n)


def test_large_reduce_of_shards_that_differ_fails_on_every_member(mesh):
    f = remote(_uneven, propagate=lambda r: torch.empty(MiB // 4))
    with mesh.activate():
        x = f(mesh.rank("gpu"))
        r = x.reduce("gpu", "sum")
        ok = torch.ones(3).reduce("gpu", "sum")
    for i in range(4):
        with pytest.raises(Exception, match="the shards must match"):
            fetch_shard(r, gpu=i).result(timeout=T)
    assert fetch_shard(ok, gpu=2).result(timeout=T).tolist() == [4.0, 4.0, 4.0]


def _running(pm, gpu):
    """What the streams of the tensor worker at ``gpu`` run now."""
    stats = pm._tensor_controller.worker_at({"gpu": gpu}).stats.call_one().get(timeout=T)
    return stats["running"]


def _wait_until(cond, what, bound=90.0):
    deadline = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < deadline, f"still not {what} after {bound} s"
        time.sleep(0.05)


def test_failed_input_aborts_a_large_reduce_and_the_mesh_keeps_working(mesh):
    from tensor_actors import failing_on

    with mesh.activate():
        r = failing_on(torch.ones(MiB), 2).reduce("gpu", "sum")
        ok = torch.ones(MiB).reduce("gpu", "sum")
    for i in range(4):
        with pytest.raises(Exception, match="on purpose|aborted"):
            fetch_shard(r, gpu=i).result(timeout=T)
    assert fetch_shard(ok, gpu=3).result(timeout=T).eq(4.0).all()


@pytest.mark.parametrize(
    "reduction, size",
    [("sum", MiB), ("stack", 16), ("stack", MiB)],
    ids=["reduce-large", "stack-small", "stack-large"],
)
def test_proc_dying_mid_collective_frees_the_live_peer(reduction, size):
    # gpu=0 enters the collective and waits for gpu=1's part (its buffers,
    # or its message when small); gpu=1 stalls before it and is killed.
    from tensor_actors import ShardReader, stalled_on

    pm = this_host().spawn_procs(per_host={"gpu": 2})
    try:
        pid = pm.spawn("pids", ShardReader).pid.call().get(timeout=T).item(gpu=1)
        with pm.activate():
            r = stalled_on(torch.ones(size), 1).reduce("gpu", reduction)
        pm._tensor_controller.flush()
        _wait_until(lambda: _running(pm, 0).get("main") == "reduce", "in the collective on gpu=0")
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


_OWNER = (
    "import pickle, time\n"
    "from monarch.rdma import RDMABuffer\n"
    "mem = bytearray(b'monarch' * 100)\n"
    "buf = RDMABuffer(memoryview(mem))\n"
    "print(pickle.dumps(buf).hex(), flush=True)\n"
    "time.sleep(600)\n"
)


def test_a_peer_read_straight_is_known_gone_once_it_died(monkeypatch):
    # What a worker relies on when a same-host peer dies while it is read
    # (the tensor plane's direct reads): its pidfd says so (a read of its
    # pid could reach another process), and the read fails clearly.
    import pickle
    import subprocess
    import sys

    from monarch._lib import SupervisionError as Gone
    from monarch._src.tensor import plane

    monkeypatch.delenv("MONARCH_RDMA_BACKEND", raising=False)
    child = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE)
    try:
        buf = pickle.loads(bytes.fromhex(child.stdout.readline().decode().strip()))
        got = torch.empty(700, dtype=torch.uint8)
        assert plane.read_member(buf, 0, got) is True
        assert bytes(got.numpy()) == b"monarch" * 100
        child.kill()
        child.wait(timeout=T)
        with pytest.raises(Gone, match="gone"):
            plane.read_member(buf, 0, got)
    finally:
        child.kill()
        child.wait(timeout=T)
        child.stdout.close()
