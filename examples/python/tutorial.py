"""A tour of the Python API, one short scene per idea, in the order a new
user meets them (the same ideas as upstream Monarch's getting-started
guide, with programs of our own):

1. counters on a mesh of procs, and slices of it;
2. a trainer that calls a data loader living on the same procs;
3. errors from endpoints, caught with try/except;
4. an actor that owns a mesh and supervises it (``__supervise__``);
5. the unhandled-fault hook, for failures nobody handled;
6. ports: a channel, and ``send`` with replies to a port;
7. an inference engine that answers through its response port, from a
   thread of its own;
8. an RDMA buffer handed from one actor to another;
9. distributed tensors: torch under ``procs.activate()``, shards fetched,
   handed to actors, made by an endpoint (``rref``), remote functions
   answering to a port.

Run: .venv/bin/python examples/python/tutorial.py
"""

import os
import queue
import threading
import time

import numpy

import monarch.actor
from monarch.actor import (
    Actor,
    ActorError,
    Channel,
    MeshFailure,
    Port,
    context,
    current_rank,
    endpoint,
    send,
    this_host,
)
from monarch.rdma import RDMABuffer

# ---------------------------------------------------------------------------
# 1. Counters and slices


class Counter(Actor):
    def __init__(self, start: int):
        self.value = start

    @endpoint
    def incr(self, by: int = 1) -> int:
        self.value += by
        return self.value

    @endpoint
    def value_of(self) -> int:
        return self.value


def counters_and_slices(procs):
    counters = procs.spawn("counters", Counter, 100)
    all_plus_one = list(counters.incr.call().get().values())
    print("every counter +1:", all_plus_one)
    assert all_plus_one == [101] * 4
    # An int fixes a dimension; a slice keeps it, narrowed.
    first_host = counters.slice(hosts=0)
    first_host.incr.call(10).get()
    odd_gpus = counters.slice(gpus=slice(1, None, 2))
    odd = list(odd_gpus.incr.call(1000).get().values())
    print("odd gpus:", odd_gpus.extent, odd)
    assert odd_gpus.extent == {"hosts": 2, "gpus": 1} and odd == [1111, 1101]
    one = counters.slice(hosts=1, gpus=0)
    print("one counter:", one.value_of.call_one().get())
    values = counters.value_of.call().get()
    for point, v in values.items():
        print(f"  hosts={point['hosts']} gpus={point['gpus']}: {v}")
    assert list(values.values()) == [111, 1111, 101, 1101]
    # A ValueMesh slices like the mesh it came from.
    row = list(values.slice(hosts=1).values())
    print("row hosts=1 of the replies:", row)
    assert row == [101, 1101]


# ---------------------------------------------------------------------------
# 2. A trainer calling a data loader on the same procs


class DataLoader(Actor):
    def __init__(self):
        self.step = 0

    @endpoint
    def next_batch(self) -> list:
        self.step += 1
        # This actor's own rank (current_rank() is the rank of the message
        # in the mesh it was sent to: 0 for a trainer's one-point call_one).
        rank = context().actor_instance.rank.rank
        return [rank * 100 + self.step + i for i in range(4)]


class Trainer(Actor):
    def __init__(self, loaders):
        # The loader next to this trainer: same point, same proc.
        me = context().actor_instance.rank
        self.loader = loaders.slice(**{k: me[k] for k in me})
        self.seen = 0

    @endpoint
    def train_step(self) -> float:
        batch = self.loader.next_batch.call_one().get()
        self.seen += len(batch)
        return sum(batch) / len(batch)


def trainer_and_loader(procs):
    loaders = procs.spawn("loaders", DataLoader)
    trainers = procs.spawn("trainers", Trainer, loaders)
    for step in range(3):
        means = [round(m, 1) for m in trainers.train_step.call().get().values()]
        print(f"step {step}: mean of each trainer's batch", means)
        # Each trainer got its own loader's batch: rank * 100 + step + 1..4.
        assert means == [rank * 100 + step + 2.5 for rank in range(4)], means


# ---------------------------------------------------------------------------
# 3. Errors, caught where they are called


class Flaky(Actor):
    @endpoint
    def divide(self, a: float, b: float) -> float:
        return a / b


def errors_are_exceptions(procs):
    flaky = procs.spawn("flaky", Flaky)
    try:
        flaky.divide.call(1, 0).get()
        raise AssertionError("dividing by zero did not raise")
    except ActorError as e:
        print("caught:", str(e).strip().splitlines()[-1])
        assert "ZeroDivisionError" in str(e)
    # The actors live on.
    after = list(flaky.divide.call(6, 3).get().values())
    print("after the error:", after)
    assert after == [2.0] * 4


# ---------------------------------------------------------------------------
# 4. Supervision: an actor owns a mesh and hears of its failures


class Fragile(Actor):
    @endpoint
    def ping(self) -> str:
        return "pong"

    @endpoint
    def crash(self) -> None:
        os._exit(3)


class Manager(Actor):
    """Starts procs of its own and a mesh of workers on them; it owns both,
    so their failures come to its ``__supervise__``."""

    def __init__(self):
        self.failures = []
        self.procs = this_host().spawn_procs(per_host={"w": 2})
        self.workers = self.procs.spawn("fragile", Fragile)

    def __supervise__(self, failure: MeshFailure) -> bool:
        self.failures.append(f"{failure.mesh_name} ranks {failure.ranks}: {failure.cause}")
        return True  # handled: it goes no further

    @endpoint
    def crash_one(self) -> None:
        self.workers.slice(w=0).crash.broadcast()

    @endpoint
    def failures_seen(self) -> list:
        return list(self.failures)


def supervision(host):
    manager_procs = host.spawn_procs(per_host={"m": 1})
    manager = manager_procs.spawn("manager", Manager)
    manager.crash_one.call_one().get()
    seen = []
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)
        seen = manager.failures_seen.call_one().get()
    print("the manager handled:", seen)
    # The crashed proc (rank 0 of the manager's procs) exited with os._exit(3).
    assert seen and all(s.endswith("ranks [0]: exit_code") for s in seen), seen
    manager_procs.stop().get()


# ---------------------------------------------------------------------------
# 5. The unhandled-fault hook

# Failures that reached the controller unhandled (the default hook would
# report the failure and exit the program).
unhandled = queue.Queue()


def unhandled_fault_hook(host):
    monarch.actor.unhandled_fault_hook = unhandled.put
    procs = host.spawn_procs(per_host={"w": 1})
    procs.spawn("fragile", Fragile).crash.broadcast()
    failure = unhandled.get(timeout=60)
    print(f"the hook got: mesh {failure.mesh_name}, cause {failure.cause}, code {failure.code}")
    assert (failure.cause, failure.code) == ("exit_code", 3), failure
    procs.stop().get()


# ---------------------------------------------------------------------------
# 6. Ports: a channel, and send() with replies to a port


class Squarer(Actor):
    @endpoint
    def square(self, x: int) -> int:
        return x * x

    @endpoint
    def report_to(self, port: Port[str]) -> None:
        port.send(f"rank {current_rank().rank} reporting")


def ports_and_send(procs):
    squarers = procs.spawn("squarers", Squarer)
    port, receiver = Channel[str].open()
    squarers.report_to.broadcast(port)
    reports = sorted(receiver.recv().get() for _ in range(len(squarers)))
    print("through a channel:", reports)
    assert reports == [f"rank {r} reporting" for r in range(4)]
    replies, inbox = Channel[int].open()
    send(squarers.square, (7,), {}, port=replies)
    squares = [inbox.recv().get() for _ in range(len(squarers))]
    print("send() to a port:", squares)
    assert squares == [49] * 4


# ---------------------------------------------------------------------------
# 7. An inference engine answering from its own thread


class InferenceEngine(Actor):
    """Requests queue up; one engine thread answers them in batches through
    each request's response port."""

    def __init__(self):
        self.requests = queue.Queue()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            batch = [self.requests.get()]
            while not self.requests.empty() and len(batch) < 8:
                batch.append(self.requests.get())
            for port, prompt in batch:
                port.send(f"{prompt} -> {len(prompt)} tokens (batch of {len(batch)})")

    @endpoint(explicit_response_port=True)
    def generate(self, port: Port[str], prompt: str) -> None:
        # Returns at once; the engine thread answers later.
        self.requests.put((port, prompt))


def inference(procs):
    engine = procs.slice(hosts=0, gpus=0).spawn("engine", InferenceEngine)
    prompts = ("hello", "tell me a story", "bye")
    futures = [engine.generate.call_one(p) for p in prompts]
    for prompt, f in zip(prompts, futures):
        answer = f.get(timeout=30)
        print("engine:", answer)
        assert answer.startswith(f"{prompt} -> {len(prompt)} tokens"), answer


# ---------------------------------------------------------------------------
# 8. An RDMA buffer handed from one actor to another


class WeightServer(Actor):
    def __init__(self, n: int):
        self.weights = numpy.arange(n, dtype=numpy.float32)
        self.buffer = RDMABuffer(self.weights.view(numpy.uint8))

    @endpoint
    def handle(self) -> RDMABuffer:
        return self.buffer


class WeightReader(Actor):
    @endpoint
    def pull(self, buffer: RDMABuffer) -> float:
        local = numpy.empty(buffer.size(), dtype=numpy.uint8)
        buffer.read_into(local).get()
        return float(local.view(numpy.float32).sum())


def rdma_hand_off(procs):
    server = procs.slice(hosts=0, gpus=0).spawn("weights", WeightServer, 1 << 16)
    readers = procs.slice(hosts=1).spawn("readers", WeightReader)
    buffer = server.handle.call_one().get()
    sums = list(readers.pull.call(buffer).get().values())
    print("each reader pulled the weights one-sided; sums:", sums)
    assert sums == [float(numpy.arange(1 << 16, dtype=numpy.float32).sum())] * 2


# ---------------------------------------------------------------------------
# 9. Distributed tensors


class Scaler(Actor):
    def __init__(self, factor):
        self.factor = factor

    @endpoint
    def norm(self, shard):
        # A distributed tensor arrives as this proc's own shard.
        return round(float(shard.norm()), 4)

    # propagate: the result's shape from the input's, so rref() gives a
    # distributed tensor at once, without waiting for the actors.
    @endpoint(propagate=lambda x: x)
    def scale(self, shard):
        return shard * self.factor


def distributed_tensors(procs):
    import torch

    from monarch import fetch_shard, remote

    @remote
    def shard_sum(t):
        return round(float(t.sum()), 4)

    with procs.activate():
        t = torch.rand(3, 4)  # one shard per proc
        gram = t @ t.T  # runs on every proc, issued without waiting
    print("gram matrix on hosts=1, gpus=0:", fetch_shard(gram, hosts=1, gpus=0).get().shape)
    scalers = procs.spawn("scalers", Scaler, 10.0)
    norms = list(scalers.norm.call(t).get().values())
    print("norms of each proc's shard:", norms)
    assert len(norms) == 4 and all(n > 0 for n in norms)
    with procs.activate():
        scaled = torch.relu(scalers.scale.rref(t))
    assert torch.allclose(fetch_shard(scaled, hosts=0, gpus=1).get(), fetch_shard(t, hosts=0, gpus=1).get() * 10)
    port, recv = Channel.open()
    with procs.activate():
        send(shard_sum, args=(scaled,), kwargs={}, port=port)
    sums = sorted(recv.recv().get() for _ in range(4))
    print("each proc sent its sum to the port:", sums)
    points = [(h, g) for h in range(2) for g in range(2)]
    assert sums == sorted(round(float(fetch_shard(scaled, hosts=h, gpus=g).get().sum()), 4) for h, g in points)


def main():
    host = this_host()
    procs = host.spawn_procs(per_host={"hosts": 2, "gpus": 2})
    try:
        counters_and_slices(procs)
        trainer_and_loader(procs)
        errors_are_exceptions(procs)
        supervision(host)
        unhandled_fault_hook(host)
        ports_and_send(procs)
        inference(procs)
        rdma_hand_off(procs)
        distributed_tensors(procs)
    finally:
        procs.stop().get()
    print("done")


if __name__ == "__main__":
    main()
