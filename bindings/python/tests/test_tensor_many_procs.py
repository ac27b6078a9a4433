"""A tensor mesh of more procs than the default cast fan-out (16): its
workers call their own mesh, and for base ranks 16 and up the multicast
tree passes through another worker (rank 16 sits below rank 0). Ops,
remote functions, actors reading their local shard, an rref and a
reduce across all 17 still complete with the right values."""

import pytest

torch = pytest.importorskip("torch")

from monarch import fetch_shard  # noqa: E402
from monarch.actor import this_host  # noqa: E402

T = 120  # seconds: every wait is bounded
N = 17


def test_a_tensor_mesh_of_more_procs_than_the_fan_out():
    from tensor_actors import ShardReader, local_sum, plus_one

    pm = this_host().spawn_procs(per_host={"gpu": N})
    try:
        readers = pm.spawn("shard_readers", ShardReader)
        with pm.activate():
            t = pm.rank("gpu").float() + torch.ones(2)
            p = plus_one(t)
            sums = local_sum.call(p).get(timeout=T)
            total = t.reduce("gpu", "sum")
        assert [v for _, v in sums.items()] == [2.0 * (r + 2) for r in range(N)]
        assert fetch_shard(total, gpu=N - 1).result(timeout=T).tolist() == [float(sum(range(1, N + 1)))] * 2
        totals = readers.total.call(t).get(timeout=T)
        assert [v for _, v in totals.items()] == [2.0 * (r + 1) for r in range(N)]
        with pm.activate():
            d = readers.doubled.rref(t)
            e = d + 1
        assert fetch_shard(e, gpu=N - 1).result(timeout=T).tolist() == [2.0 * N + 1] * 2
    finally:
        pm.stop().get(timeout=60)
