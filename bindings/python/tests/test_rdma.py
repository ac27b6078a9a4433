"""monarch.rdma: RDMABuffer between real procs, on each backend that runs
here, and the data plane under large pickled arguments."""

import os
import time

import numpy as np
import pytest
from rdma_actors import Owner, Reader, pattern

from monarch import rdma
from monarch._src.actor import pickle as message_pickle
from monarch._src.rdma import payload
from monarch.actor import ActorError, SupervisionError, this_host
from monarch.rdma import RDMABuffer, get_rdma_backend

N = 3 * (1 << 20) + 5  # not a multiple of anything


@pytest.fixture(scope="module")
def pm():
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    yield pm
    pm.stop().get(timeout=30)


@pytest.fixture(scope="module")
def owner(pm):
    return pm.slice(gpus=0).spawn("owner", Owner, N, 3)


@pytest.fixture(scope="module")
def reader(pm):
    return pm.slice(gpus=1).spawn("reader", Reader)


def test_default_backend_and_ibverbs_probe(monkeypatch):
    assert get_rdma_backend() == "same_host"
    monkeypatch.setenv("MONARCH_RDMA_BACKEND", "tcp")
    assert get_rdma_backend() == "tcp"
    monkeypatch.setenv("MONARCH_RDMA_BACKEND", "ibverbs")
    assert get_rdma_backend() == "same_host"  # absent: falls back
    assert rdma.is_rdma_available() is False
    avail, why = rdma.ibverbs_status()
    assert not avail and why


@pytest.mark.parametrize("backend", ["same_host", "tcp", "ibverbs"])
def test_controller_reads_and_writes_an_actor_buffer(owner, backend, monkeypatch):
    monkeypatch.setenv("MONARCH_RDMA_BACKEND", backend)
    buf = owner.buffer.call_one().get()
    assert isinstance(buf, RDMABuffer) and buf.size() == N
    dst = np.full(N + 100, 0xEE, dtype=np.uint8)
    assert buf.read_into(dst, timeout=60).get() is None
    assert np.array_equal(dst[:N], pattern(N, 3))
    assert (dst[N:] == 0xEE).all()  # a larger destination: the rest untouched
    assert buf.backend() == ("tcp" if backend == "tcp" else "same_host")
    # Offsets: the buffer's bytes from `offset` land at the start of dst.
    part = np.zeros(1000, dtype=np.uint8)
    buf.read_into(part, offset=N - 1000).get()
    assert np.array_equal(part, pattern(N, 3)[N - 1000 :])
    # Write a slice, check it in the owner, then restore.
    src = np.full(4096, 9, dtype=np.uint8)
    buf.write_from(src, offset=100).get()
    assert owner.checksum.call_one(100, 4196).get() == 9 * 4096
    buf.write_from(pattern(N, 3)).get()
    assert owner.checksum.call_one().get() == int(pattern(N, 3).sum(dtype=np.uint64))


def test_read_part_reads_exactly_the_destination(owner):
    buf = owner.buffer.call_one().get()
    part = np.full(1000, 0xEE, dtype=np.uint8)
    buf.read_part(part, offset=12345, timeout=60).get()
    assert np.array_equal(part, pattern(N, 3)[12345:13345])
    buf.read_part(part, offset=N - 1000).get()
    assert np.array_equal(part, pattern(N, 3)[N - 1000 :])
    with pytest.raises(ValueError, match="outside"):
        buf.read_part(part, offset=N - 999)
    with pytest.raises(ValueError, match="read-only"):
        buf.read_part(memoryview(bytes(10)))


@pytest.mark.parametrize("backend", ["same_host", "tcp"])
def test_buffer_returned_by_one_actor_used_by_another(owner, reader, backend):
    buf = owner.buffer.call_one().get()
    total, used = reader.pull.call_one(buf, backend).get(timeout=120)
    assert total == int(pattern(N, 3).sum(dtype=np.uint64))
    assert used == backend
    assert reader.push.call_one(buf, 5, backend).get(timeout=120) == backend
    assert owner.checksum.call_one().get() == 5 * N
    buf.write_from(pattern(N, 3)).get()


def test_semantics_smaller_destination_and_use_after_drop(reader):
    mem = np.arange(1 << 16, dtype=np.uint8)
    buf = RDMABuffer(mem)
    with pytest.raises(ValueError, match="smaller"):
        buf.read_into(np.empty(100, dtype=np.uint8))
    with pytest.raises(ValueError, match="do not fit"):
        buf.write_from(np.empty((1 << 16) + 1, dtype=np.uint8))
    # Accepted inputs: memoryview, bytearray, numpy of any dtype (as bytes).
    out = bytearray(1 << 16)
    buf.read_into(memoryview(out)).get()
    assert bytes(out) == mem.tobytes()
    f64 = np.zeros(1 << 13, dtype=np.float64)
    buf.read_into(f64).get()
    assert f64.tobytes() == mem.tobytes()
    # Bad inputs are refused at construction.
    with pytest.raises(ValueError, match="empty"):
        RDMABuffer(bytearray())
    with pytest.raises(ValueError, match="contiguous"):
        RDMABuffer(np.zeros((10, 10), dtype=np.uint8)[:, ::2])
    with pytest.raises(TypeError):
        RDMABuffer(12)
    # Read-only memory: readable, not writable.
    ro = RDMABuffer(b"x" * 1000)
    with pytest.raises(ValueError, match="read-only"):
        ro.write_from(b"y" * 10).get()
    # A handle used after the owner dropped the buffer: a clear error.
    total, _ = reader.pull.call_one(buf).get(timeout=60)
    assert total == int(mem.sum(dtype=np.uint64))
    buf.drop()
    with pytest.raises(ValueError, match="dropped"):
        buf.read_into(np.empty(1 << 16, dtype=np.uint8))
    with pytest.raises(ValueError, match="dropped"):
        buf.drop()


def test_dropped_by_owner_is_refused(pm, reader):
    o = pm.slice(gpus=0).spawn("owner_drop", Owner, 1 << 20)
    buf = o.buffer.call_one().get()
    o.drop.call_one().get()
    with pytest.raises(ValueError, match="not registered"):
        buf.read_into(np.empty(1 << 20, dtype=np.uint8)).get()
    with pytest.raises(ActorError, match="not registered"):
        reader.pull.call_one(buf).get(timeout=60)


def test_many_concurrent_transfers(owner):
    buf = owner.buffer.call_one().get()
    want = pattern(N, 3)
    dsts = [np.empty(N, dtype=np.uint8) for _ in range(16)]
    futs = [buf.read_into(d, timeout=120) for d in dsts]
    for f, d in zip(futs, dsts):
        f.get()
        assert np.array_equal(d, want)


@pytest.mark.parametrize("backend", ["same_host", "tcp"])
def test_dead_owner_fails_cleanly(backend, monkeypatch):
    monkeypatch.setenv("MONARCH_RDMA_BACKEND", backend)
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        o = pm.spawn("doomed", Owner, 64 << 20)
        buf = o.buffer.call_one().get()
        dst = np.empty(64 << 20, dtype=np.uint8)
        buf.read_into(dst, timeout=60).get()
        # Kill the owner while transfers are running.
        futs = [buf.read_into(np.empty(64 << 20, dtype=np.uint8), timeout=60) for _ in range(4)]
        with pytest.raises(SupervisionError):
            o.die.call_one().get(timeout=30)
        t = time.monotonic()
        errors = 0
        for f in futs:
            try:
                f.get()
            except SupervisionError as e:
                assert "proc" in str(e)
                errors += 1
        # Afterwards every read fails, promptly, with a clear error.
        with pytest.raises(SupervisionError, match="proc"):
            buf.read_into(dst, timeout=60).get()
        assert time.monotonic() - t < 60
    finally:
        pm.stop().get(timeout=30)


def test_large_argument_travels_on_the_data_plane(pm, reader):
    arr = np.random.default_rng(1).integers(0, 256, size=64 << 20, dtype=np.uint8)
    parts = message_pickle.dumps_call((arr,), {})
    # The control message carries a descriptor, not 64 MiB.
    assert sum(memoryview(p).nbytes for p in parts) < 4096
    with payload._pending_lock:
        payload._pending.clear()  # releases that registration (nobody will pull it)
    total, shape = reader.checksum.call_one(arr).get(timeout=120)
    assert total == int(arr.sum(dtype=np.uint64)) and shape == arr.shape
    # Broadcast-style call to two actors: both pull, then it is released.
    both = pm.spawn("readers2", Reader)
    vm = both.checksum.call(arr).get(timeout=120)
    assert [v[0] for v in vm.values()] == [int(arr.sum(dtype=np.uint64))] * 2
    # The sender lets go of the array soon after both released it.
    deadline = time.monotonic() + 30
    while payload._pending and time.monotonic() < deadline:
        time.sleep(0.05)
    assert payload._pending == []
    # Replies too: a large array returned by an actor comes back intact.
    from actors import Buffers

    b = pm.slice(gpus=1).spawn("bufs", Buffers)
    back = b.roundtrip.call_one(arr).get(timeout=120)
    assert np.array_equal(back, arr)


def test_large_bytes_travel_on_the_data_plane(pm):
    from actors import Buffers

    data = os.urandom(1 << 20) * 5
    parts = message_pickle.dumps_call((data,), {"k": data})
    assert sum(memoryview(p).nbytes for p in parts) < 4096
    with payload._pending_lock:
        payload._pending.clear()
    b = pm.slice(gpus=0).spawn("bytes_rt", Buffers)
    back = b.roundtrip.call_one(data).get(timeout=120)
    assert type(back) is bytes and back == data
    # Small bytes stay in the stream.
    assert len(message_pickle.dumps_call((b"x" * 100,), {})) == 1


def test_threshold_keeps_small_buffers_in_band():
    arr = np.arange(1000, dtype=np.uint8)
    parts = message_pickle.dumps_call((arr,), {})
    assert len(parts) == 2 and memoryview(parts[1]).nbytes == 1000


def test_torch_tensor_if_available():
    torch = pytest.importorskip("torch")
    t = torch.arange(1000, dtype=torch.float32)
    buf = RDMABuffer(t.view(torch.uint8).flatten())
    out = torch.zeros(1000, dtype=torch.float32)
    buf.read_into(out.view(torch.uint8).flatten()).get()
    assert torch.equal(out, t)


def test_env_var_is_checked(monkeypatch, owner):
    monkeypatch.setenv("MONARCH_RDMA_BACKEND", "carrier-pigeon")
    with pytest.raises(ValueError, match="MONARCH_RDMA_BACKEND"):
        get_rdma_backend()
    os.environ.pop("MONARCH_RDMA_BACKEND")
