"""The main demo (`make demo`): a controller spawns a mesh of 4 procs, puts a
Counter actor in each, and drives them as one array: calls, slicing,
broadcast, an actor in the controller's own proc, an endpoint error caught as
ActorError, and stopping.

Run: .venv/bin/python examples/python/hello_mesh.py
"""

import os

from monarch.actor import Actor, ActorError, current_rank, endpoint, this_host, this_proc


class Counter(Actor):
    def __init__(self, start):
        self.value = start

    @endpoint
    def incr(self, by=1):
        self.value += by
        return self.value

    @endpoint
    def read(self):
        return self.value

    @endpoint
    def whoami(self):
        return current_rank().rank, os.getpid()

    @endpoint
    def divide(self, by):
        return self.value / by


def main():
    print(f"controller pid {os.getpid()}")

    procs = this_host().spawn_procs(per_host={"gpus": 4})
    print("spawned 4 procs: per_host={'gpus': 4}")

    counters = procs.spawn("counters", Counter, 10)
    print("spawned actor mesh 'counters' = Counter(10) on every proc")

    for rank, pid in counters.whoami.call().get().values():
        print(f"  rank {rank} lives in pid {pid}")

    print("counters.incr.call(2).get() ->")
    print(counters.incr.call(2).get())

    one = counters.slice(gpus=1)
    print("slice(gpus=1).incr.call_one() ->", one.incr.call_one().get())

    counters.incr.broadcast(100)
    print("counters.incr.broadcast(100)  -> (no reply)")
    print("counters.read.call()          ->", list(counters.read.call().get().values()))

    local = this_proc().spawn("c", Counter, 0)
    rank, pid = local.whoami.call_one().get()
    print(f"this_proc().spawn('c', Counter, 0): runs in pid {pid} (the controller: {pid == os.getpid()})")
    print("local.incr.call_one(5)        ->", local.incr.call_one(5).get())

    try:
        counters.slice(gpus=2).divide.call_one(0).get()
    except ActorError as e:
        print("slice(gpus=2).divide.call_one(0) raised ActorError:")
        print("  " + str(e).strip().splitlines()[-1])
    print("the actor lives on: slice(gpus=2).read ->", counters.slice(gpus=2).read.call_one().get())

    procs.stop().get()
    print("procs stopped")


if __name__ == "__main__":
    main()
