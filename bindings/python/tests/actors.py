"""Actor classes used by the tests (importable by the worker procs)."""

import threading
import time

from monarch.actor import (
    Actor,
    Port,
    concurrent_endpoint,
    context,
    current_rank,
    current_size,
    endpoint,
    send,
)


class Counter(Actor):
    def __init__(self, start=0):
        self.value = start

    @endpoint
    def incr(self, by=1):
        self.value += by
        return self.value

    @endpoint
    def get(self):
        return self.value

    @endpoint
    def where(self):
        return (
            current_rank().rank,
            dict(current_rank()),
            current_size(),
            dict(context().actor_instance.rank),
            context().actor_instance.rank.rank,
        )

    @endpoint
    def points(self):
        return (
            context().message_rank == current_rank(),
            str(current_rank()),
            str(context().actor_instance.rank),
        )

    @endpoint
    def boom(self, text="boom"):
        raise ValueError(text)

    @endpoint
    def boom_unpicklable(self):
        class Local(Exception):
            def __reduce__(self):
                raise TypeError("nope")

        raise Local("local failure")

    @endpoint
    def sleep(self, seconds):
        time.sleep(seconds)
        return seconds

    @endpoint
    def echo(self, x):
        return x

    @endpoint
    def lock(self):
        return threading.Lock()

    def not_an_endpoint(self):
        return 1


class Failing(Actor):
    def __init__(self, fail_rank=None):
        if fail_rank is None or current_rank().rank == fail_rank:
            raise RuntimeError("constructor failed on purpose")

    @endpoint
    def ok(self):
        return True


class Caller(Actor):
    """Calls another mesh from inside an actor."""

    def __init__(self, other=None):
        self.other = other

    @endpoint
    def call_other(self, other, by):
        return list(other.incr.call(by).get().values())

    @endpoint
    def call_slice(self, other, index):
        return other.slice(gpus=index).get.call_one().get()

    @endpoint
    def call_where(self, mesh):
        return [v[4] for v in mesh.where.call().get().values()]

    @endpoint
    def echo_back(self, mesh):
        return mesh

    @endpoint
    def call_stored(self):
        return self.other.get.choose().get()


class Cleanup(Actor):
    def __init__(self, path):
        self.path = path

    @endpoint
    def ping(self):
        return "pong"

    def __cleanup__(self, exc):
        with open(self.path, "a") as f:
            f.write(f"cleanup {current_rank().rank}\n")


class Buffers(Actor):
    @endpoint
    def checksum(self, arr):
        import numpy as np

        return int(np.asarray(arr, dtype=np.uint8).sum(dtype=np.uint64)), arr.shape

    @endpoint
    def roundtrip(self, arr):
        return arr

    @endpoint
    def keep(self, arr):
        self.kept = arr
        return int(arr[0])

    @endpoint
    def kept_first(self):
        return int(self.kept[0]), int(self.kept[-1])


class RawActor(Actor):
    """Raw-bytes endpoints (no pickle): callable from C/C++ and spawnable by
    type name "actors:RawActor"."""

    def __init__(self, *parts):
        self.init = parts
        self.total = 0

    @endpoint(raw=True)
    def add(self, data):
        self.total += int.from_bytes(data, "little", signed=True)
        return self.total.to_bytes(8, "little", signed=True)

    @endpoint(raw=True)
    def echo(self, *parts):
        assert all(type(p) is bytes for p in parts)
        return list(parts)

    @endpoint(raw=True)
    def init_args(self):
        return list(self.init)

    @endpoint(raw=True)
    def upper(self, data):
        return bytearray(data.upper())

    @endpoint(raw=True)
    def fail(self, *parts):
        raise ValueError(f"raw fail with {len(parts)} parts")

    @endpoint(raw=True)
    def bad_return(self):
        return "text, not bytes"

    @endpoint
    def pickled_total(self):
        return self.total


class AsyncEcho(Actor):
    """async endpoints: one message at a time, or interleaving."""

    def __init__(self):
        self.log = []
        self.active = 0
        self.max_active = 0

    @endpoint(propagate="all")
    async def aecho(self, x):
        return x

    @endpoint
    async def slow(self, tag, seconds):
        import asyncio

        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.log.append(("start", tag))
        await asyncio.sleep(seconds)
        self.log.append(("end", tag))
        self.active -= 1
        return tag

    @concurrent_endpoint
    async def cslow(self, tag, seconds):
        import asyncio

        self.active += 1
        self.max_active = max(self.max_active, self.active)
        await asyncio.sleep(seconds)
        self.active -= 1
        return (tag, current_rank().rank)

    @endpoint
    async def stats(self):
        return self.max_active, self.log

    @endpoint
    async def reset(self):
        self.max_active = 0
        self.log = []


class Mixed(Actor):
    @endpoint
    def a(self):
        return 1

    @endpoint
    async def b(self):
        return 2


class Ports(Actor):
    """explicit_response_port endpoints and ordering probes."""

    def __init__(self):
        self.seen = []
        self.held = []

    @endpoint(explicit_response_port=True)
    def later(self, port: Port, x):
        # Answer from another thread, after the endpoint returned.
        t = threading.Timer(0.05, port.send, args=(x * 10 + current_rank().rank,))
        t.start()

    @endpoint(explicit_response_port=True)
    def hold(self, port: Port):
        self.held.append(port)

    @endpoint
    def release(self, value):
        held, self.held = self.held, []
        for p in held:
            p.send(value)
        return len(held)

    @endpoint(explicit_response_port=True)
    def fail(self, port: Port):
        port.exception(ValueError("told to fail"))

    @endpoint(explicit_response_port=True)
    def delegate(self, port: Port, other):
        # Hand the reply port to another actor, which answers it.
        send(other.answer, (current_rank().rank,), {}, port=port, selection="choose")

    @endpoint
    def answer(self, who):
        return ("answered-for", who)

    @endpoint
    def record(self, i):
        self.seen.append(i)
        return i

    @endpoint
    def seen_list(self):
        return list(self.seen)

    @endpoint
    def rank_after(self, seconds):
        time.sleep(seconds * current_rank().rank)
        return current_rank().rank


class HostProbe(Actor):
    """For test_hosts.py: where a proc runs, and output to stream back."""

    @endpoint
    def whoami(self):
        import os

        return (current_rank().rank, os.getpid(), os.environ.get("MONARCH_PROC_ADDR", ""))

    @endpoint
    def say(self, text):
        print(text)
        return current_rank().rank


class Chatty(Actor):
    """For test_hosts.py: prints numbered lines without end."""

    @endpoint
    def chatter(self, prefix):
        import threading

        def go():
            i = 0
            while True:
                print(f"{prefix} {i}", flush=True)
                i += 1

        threading.Thread(target=go, daemon=True).start()
