"""Actor classes of test_actor_execution.py (importable by the worker
procs): actors of one proc that call each other, thread-locals, concurrent
endpoints, and the failures that kill an actor."""

import asyncio
import os
import threading
import time

from monarch.actor import Actor, Port, concurrent_endpoint, context, current_rank, endpoint


def _mine(mesh):
    """The point of ``mesh`` at the calling actor's own point."""
    point = context().actor_instance.rank
    return mesh.slice(**point) if len(point) else mesh


class DataLoader(Actor):
    """What a trainer on the same procs pulls batches from."""

    def __init__(self):
        self.served = 0

    @endpoint
    def next_batch(self):
        self.served += 1
        # Its own rank, and the one of the caller's message (a 1-point view: 0).
        return [context().actor_instance.rank.rank, current_rank().rank, self.served]

    @endpoint
    def pid(self):
        return os.getpid()


class Trainer(Actor):
    """Calls the data loader of its own rank (an actor of its own proc)
    from a blocking endpoint; checks its thread-local from __init__."""

    def __init__(self, loader):
        self.loader = loader
        self.local = threading.local()
        self.local.token = "set in __init__"
        self.init_thread = threading.get_ident()

    @endpoint
    def step(self):
        return _mine(self.loader).next_batch.call_one().get(timeout=60)

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def thread_state(self):
        return (
            getattr(self.local, "token", None),
            threading.get_ident() == self.init_thread,
        )


class AsyncTrainer(Actor):
    """The same with an async endpoint awaiting the loader."""

    def __init__(self, loader):
        self.loader = loader

    @endpoint
    async def step(self):
        return await _mine(self.loader).next_batch.call_one()


class Queue(Actor):
    """A work queue a crawler on the same proc takes from."""

    def __init__(self, items):
        self.items = list(items)
        self.seen = []

    @endpoint
    def take(self):
        return self.items.pop(0) if self.items else None

    @endpoint
    def put(self, item):
        self.seen.append(item)

    @endpoint
    def results(self):
        return sorted(self.seen)


class Crawler(Actor):
    def __init__(self, queue):
        self.queue = queue

    @endpoint
    def crawl(self):
        n = 0
        while (item := self.queue.take.call_one().get(timeout=60)) is not None:
            self.queue.put.call_one(item.upper()).get(timeout=60)
            n += 1
        return n


class Sleeper(Actor):
    """A long endpoint, and a quick one, to show a neighbour is not starved."""

    @endpoint
    def sleep_until(self, gate, seconds):
        deadline = time.monotonic() + seconds
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        return os.path.exists(gate)

    @endpoint
    def ping(self):
        return "pong"


class Ordered(Actor):
    def __init__(self):
        self.seen = []

    @endpoint
    def add(self, i):
        self.seen.append(i)

    @endpoint
    def seen_list(self):
        return self.seen


class Tasks(Actor):
    """Concurrent endpoint tasks that never end on their own; the cleanup
    records whether they were cancelled before it ran."""

    def __init__(self, log):
        self.log = log
        self.started = 0
        self.cancelled = 0

    @concurrent_endpoint
    async def forever(self):
        self.started += 1
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    @endpoint
    async def count(self):
        return self.started

    async def __cleanup__(self, exc):
        with open(self.log, "w") as f:
            f.write(f"{self.started} {self.cancelled}")


class LoopState(Actor):
    """Async endpoints sharing asyncio objects across messages (all of an
    actor's async endpoints run on its proc's one event loop): a timer or a
    background task started by one endpoint, awaited by the next; a queue
    filled by plain endpoints and drained by a concurrent one."""

    def __init__(self):
        self.event = None
        self.background = None
        self.queue = asyncio.Queue()
        self.log = []

    @endpoint
    async def arm_timer(self, seconds):
        # Returns without suspending; the timer fires later on the loop.
        self.event = asyncio.Event()
        asyncio.get_running_loop().call_later(seconds, self.event.set)

    @endpoint
    async def wait_event(self):
        await self.event.wait()
        return "set"

    @endpoint
    async def start_background(self):
        async def background():
            return "background done"

        self.background = asyncio.create_task(background())

    @endpoint
    async def background_result(self):
        return await self.background

    @concurrent_endpoint
    async def take(self, n):
        return [await self.queue.get() for _ in range(n)]

    @endpoint
    async def put(self, x):
        self.queue.put_nowait(x)

    @endpoint
    async def task_scoped(self):
        # asyncio.timeout and TaskGroup need a current task from the start.
        async with asyncio.timeout(30):
            async with asyncio.TaskGroup() as tg:
                t = tg.create_task(asyncio.sleep(0, "slept"))
        return asyncio.current_task() is not None, t.result()

    @endpoint
    async def record(self, tag, seconds):
        """Logs its start and end; suspends in between unless ``seconds``
        is None."""
        self.log.append(("start", tag))
        if seconds is not None:
            await asyncio.sleep(seconds)
        self.log.append(("end", tag))

    @endpoint
    async def fail(self, suspend):
        if suspend:
            await asyncio.sleep(0)
        raise ValueError(f"failed, suspended: {suspend}")

    @endpoint
    async def exit(self, suspend):
        if suspend:
            await asyncio.sleep(0)
        raise SystemExit(f"exit, suspended: {suspend}")

    @endpoint
    async def get_log(self):
        return self.log


class BadInit(Actor):
    def __init__(self):
        raise ValueError("no GPU on this point")

    @endpoint
    def ping(self):
        return "pong"


class SlowInit(Actor):
    """A constructor that cannot finish before the test opens ``gate``: it
    touches ``gate.started``, waits for ``gate`` (at most 60 s, so a broken
    spawn that waits for it does not hang), then touches ``gate.done``."""

    def __init__(self, gate):
        open(gate + ".started", "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.gate_was_open = os.path.exists(gate)
        open(gate + ".done", "w").close()

    @endpoint
    def saw_gate(self):
        return self.gate_was_open


class Killable(Actor):
    """Endpoints that raise: a plain Exception (the actor lives), a
    BaseException (it dies), or anything from an explicit-port endpoint."""

    @endpoint
    def ping(self):
        return "pong"

    @endpoint
    def plain(self):
        raise RuntimeError("plain failure")

    @endpoint
    def base(self):
        raise SystemExit("base exception")

    @endpoint(explicit_response_port=True)
    def ported(self, port: Port):
        raise RuntimeError("raised in an explicit-port endpoint")


class Owner(Actor):
    """Spawns procs and a mesh whose constructor raises, or one it kills;
    supervises it."""

    def __init__(self):
        self.reports = []
        self.procs = None

    @endpoint
    def spawn_bad(self):
        from monarch.actor import this_host

        self.procs = this_host().spawn_procs(per_host={"gpus": 1})
        self.bad = self.procs.spawn("bad_owned", BadInit)

    @endpoint
    def kill_child(self):
        """Spawn a Killable on procs of its own and kill it with a
        BaseException from an endpoint; what the call raised."""
        from monarch.actor import SupervisionError, this_host

        self.procs = this_host().spawn_procs(per_host={"gpus": 1})
        self.child = self.procs.spawn("killed_owned", Killable)
        try:
            self.child.base.call_one().get(timeout=60)
        except SupervisionError as e:
            return str(e)
        return "the child lived"

    @endpoint
    def call_child_again(self):
        from monarch.actor import SupervisionError

        try:
            self.child.ping.call_one().get(timeout=60)
        except SupervisionError as e:
            return str(e)
        return "the child answered"

    def __supervise__(self, failure):
        self.reports.append((failure.report(), failure.cause))
        return True

    @endpoint
    def heard(self):
        return self.reports

    @endpoint
    def stop_procs(self):
        self.procs.stop().get(timeout=60)


class Interruptible(Actor):
    """On the controller's own proc: blocks in get() on a slow actor, and
    records a KeyboardInterrupt there."""

    @endpoint
    def wait_on(self, slow, started):
        try:
            # Slow.sleep touches `started`, then sleeps for 60 s.
            slow.sleep.call_one(started, 60).get()
        except KeyboardInterrupt:
            with open(started + ".actor", "w") as f:
                f.write("interrupted")
            raise
