"""Actors for test_supervision.py (importable in worker procs)."""

import os
import signal
import time

from monarch.actor import Actor, current_rank, endpoint, this_host


class Worker(Actor):
    def __init__(self, marker_dir=None):
        self.marker_dir = marker_dir

    @endpoint
    def rank(self):
        return current_rank().rank

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def proc_addr(self):
        return os.environ["MONARCH_PROC_ADDR"]

    @endpoint
    def sleep(self, s):
        time.sleep(s)
        return current_rank().rank

    @endpoint
    def boom(self):
        raise ValueError(f"boom on rank {current_rank().rank}")

    @endpoint
    def die(self, how, stamp=None):
        if stamp:
            # When the proc died, on the clock the test reads (CLOCK_MONOTONIC
            # is one clock for the whole machine).
            with open(stamp, "w") as f:
                f.write(repr(time.monotonic()))
        if how == "exit":
            os._exit(7)
        if how == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        os.kill(os.getpid(), signal.SIGKILL)

    @endpoint
    def square(self, x):
        return x * x

    def __cleanup__(self, exc):
        if self.marker_dir:
            with open(os.path.join(self.marker_dir, f"cleanup-{os.getpid()}"), "w") as f:
                f.write(repr(exc))


class Supervisor(Actor):
    """Owns a mesh of Workers. mode: "handle" (returns True), "escalate"
    (returns False), "raise", or "respawn" (replaces the failed mesh)."""

    def __init__(self, mode, n=2, marker_dir=None):
        self.mode = mode
        self.n = n
        self.marker_dir = marker_dir
        self.failures = []
        self._spawn()

    def _spawn(self):
        self.procs = this_host().spawn_procs(per_host={"w": self.n})
        self.workers = self.procs.spawn("workers", Worker, self.marker_dir)

    def __supervise__(self, failure):
        self.failures.append((failure.mesh_name, failure.ranks, failure.cause, failure.report()))
        if self.mode == "raise":
            raise RuntimeError("supervisor gives up")
        if self.mode == "respawn":
            self.procs.stop().get(timeout=30)
            self._spawn()
            return True
        return self.mode == "handle"

    @endpoint
    def worker_pids(self):
        return list(self.workers.pid.call().get().values())

    @endpoint
    def kill_worker(self, rank, how="kill"):
        self.workers.slice(w=rank).die.broadcast(how)

    @endpoint
    def seen(self):
        return list(self.failures)

    @endpoint
    def compute(self, xs):
        # Uses whatever worker mesh is current.
        return sum(sum(self.workers.square.call(x).get().values()) for x in xs)

    @endpoint
    def nested_pids(self):
        return [os.getpid()] + list(self.workers.pid.call().get().values())

    def __cleanup__(self, exc):
        if self.marker_dir:
            with open(os.path.join(self.marker_dir, f"sup-cleanup-{os.getpid()}"), "w") as f:
                f.write(repr(exc))


class AsyncSupervisor(Actor):
    """Spawns its workers from an async endpoint (run on the proc's event
    loop thread): it must still own them."""

    def __init__(self):
        self.failures = []

    @endpoint
    async def start(self):
        self.procs = this_host().spawn_procs(per_host={"w": 2})
        self.workers = self.procs.spawn("aworkers", Worker)
        return list(self.workers.pid.call().get().values())

    async def __supervise__(self, failure):
        self.failures.append((failure.mesh_name, failure.ranks, failure.cause))
        return True

    @endpoint
    async def seen(self):
        return list(self.failures)
