"""The distributed-tensor part of upstream's getting-started tutorial, as a
test, written against the public API only: activate a proc mesh, fetch
shards, compute with torch, hand a distributed tensor to actors, make one
from an endpoint (propagate + rref), remote functions (.call and
send(..., port=...))."""

import os

import pytest

torch = pytest.importorskip("torch")

from monarch import fetch_shard, remote  # noqa: E402
from monarch.actor import Actor, Channel, context, endpoint, send, this_host  # noqa: E402

T = 120  # seconds: every wait is bounded


class Trainer(Actor):
    @endpoint
    def step(self, input=None):
        # A distributed tensor arrives as this proc's shard.
        return {"rank": context().actor_instance.rank["gpus"], "input": input.tolist()}


class LinearActor(Actor):
    def __init__(self):
        self.w = torch.eye(4) * 2

    # The propagation function gives the shape of the result from the shape
    # of the input, so the distributed result exists before the call ran.
    @endpoint(propagate=lambda x: x)
    def forward(self, input):
        return input @ self.w


@remote
def whoami():
    return os.getpid()


@pytest.fixture(scope="module")
def trainer_procs():
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    yield procs
    procs.stop().get(timeout=30)


def test_getting_started_distributed_tensors(trainer_procs):
    # Activating a proc mesh: torch calls make distributed tensors, one
    # independent shard per proc.
    with trainer_procs.activate():
        t = torch.rand(3, 4)
    assert "DTensor" in repr(t) and t.shape == (3, 4)
    one = fetch_shard(t, gpus=0).get(timeout=T)
    two = fetch_shard(t, gpus=1).get(timeout=T)
    assert type(one) is torch.Tensor and one.shape == (3, 4)
    assert not torch.equal(one, two)

    # Any torch function computes on the shards.
    with trainer_procs.activate():
        dist_compute = t @ t.T
    assert torch.allclose(fetch_shard(dist_compute, gpus=0).get(timeout=T), one @ one.T)

    # Actors on the same procs receive the shard of their proc.
    trainers = trainer_procs.spawn("trainers", Trainer)
    with trainer_procs.activate():
        first_row = dist_compute[0]
    steps = trainers.step.call(first_row).get(timeout=T)
    for point, got in steps.items():
        gpu = point["gpus"]
        assert got["rank"] == gpu
        want = fetch_shard(first_row, gpus=gpu).get(timeout=T)
        assert torch.allclose(torch.tensor(got["input"]), want)

    # rref: an endpoint's result as a distributed tensor, used at once.
    linear = trainer_procs.spawn("linear", LinearActor)
    with trainer_procs.activate():
        o = torch.relu(linear.forward.rref(t))
    assert o.shape == (3, 4)
    for gpu in range(4):
        shard = fetch_shard(t, gpus=gpu).get(timeout=T)
        assert torch.allclose(fetch_shard(o, gpus=gpu).get(timeout=T), torch.relu(shard * 2))

    # Free remote functions: every proc of the active mesh runs them.
    with trainer_procs.activate():
        pids = whoami.call().get(timeout=T)
    pids = sorted(v for _, v in pids.items())
    assert len(set(pids)) == 4 and os.getpid() not in pids

    # A port of a channel receives one answer from each proc.
    port, recv = Channel.open()
    port.send(3)
    assert recv.recv().get(timeout=T) == 3
    with trainer_procs.activate():
        send(whoami, args=(), kwargs={}, port=port)
    assert sorted(recv.recv().get(timeout=T) for _ in range(4)) == pids
