import pickle

import numpy as np
import pytest
from actors import Buffers


@pytest.fixture(scope="module")
def buf(procs):
    return procs.slice(gpus=slice(0, 2)).spawn("buf", Buffers)


def test_large_numpy_round_trip(buf):
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 256, size=64 * 1024 * 1024, dtype=np.uint8)
    one = buf.slice(gpus=0)
    total, shape = one.checksum.call_one(arr).get(timeout=60)
    assert total == int(arr.sum(dtype=np.uint64)) and shape == arr.shape
    back = one.roundtrip.call_one(arr).get(timeout=60)
    assert isinstance(back, np.ndarray) and back.dtype == arr.dtype and back.shape == arr.shape
    assert np.array_equal(back, arr)


def test_numpy_in_a_gather_and_views_outlive_the_handle(buf):
    arr = np.arange(1000, dtype=np.float64).reshape(10, 100)
    vm = buf.roundtrip.call(arr).get()
    vals = list(vm.values())
    del vm
    import gc

    gc.collect()
    for v in vals:
        assert np.array_equal(v, arr)


def test_received_buffer_kept_by_actor(buf):
    arr = np.arange(1 << 20, dtype=np.int64)
    one = buf.slice(gpus=1)
    assert one.keep.call_one(arr).get() == 0
    # the actor kept a view over the message memory; later messages must
    # not corrupt it
    for _ in range(3):
        one.checksum.call_one(np.zeros(1 << 16, dtype=np.uint8)).get()
    assert one.kept_first.call_one().get() == (0, (1 << 20) - 1)


def test_pickle_buffer_bytes(buf):
    data = bytes(range(256)) * 4096
    back = buf.slice(gpus=0).roundtrip.call_one(pickle.PickleBuffer(data)).get()
    assert bytes(back) == data


def test_large_arrays_kept_by_an_actor_are_not_reused_for_later_ones(buf):
    # Receive memory is pooled: a block still referred to (the kept array)
    # must never take a later payload of the same size.
    one = buf.slice(gpus=1)
    first = np.full(4 << 20, 7, dtype=np.uint8)
    assert one.keep.call_one(first).get(timeout=60) == 7
    for v in (1, 2, 3):
        total, _ = one.checksum.call_one(np.full(4 << 20, v, dtype=np.uint8)).get(timeout=60)
        assert total == v * (4 << 20)
    assert one.kept_first.call_one().get(timeout=60) == (7, 7)


def test_the_receive_pool_reuses_only_blocks_nobody_holds():
    from monarch._src.rdma import payload

    a = payload._pooled(1 << 20, np)
    held = id(a.base)
    b = payload._pooled(1 << 20, np)
    assert id(b.base) != held
    over = np.frombuffer(memoryview(a), dtype=np.uint8)
    del a
    c = payload._pooled(1 << 20, np)
    assert id(c.base) != held, "an array built over the block keeps it"
    del over
    d = payload._pooled(1 << 20, np)
    assert id(d.base) == held, "a block nobody holds is reused"
    e = payload._pooled(100, np)
    assert id(e.base) not in (held, id(b.base), id(c.base)), "a block over twice the size is not used"
