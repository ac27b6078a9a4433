"""How failures surface in the controller, as ordinary exceptions.

- an endpoint that raises: the caller gets ActorError with the remote
  traceback, the actor lives on;
- a constructor that raises (spawn() returns without waiting for it, as
  upstream's does): a supervision failure of its actor, and calls to the
  mesh raise SupervisionError naming the exception;
- a proc that dies mid-call: the call fails promptly (SupervisionError),
  other ranks answer, later calls to views holding it fail at once, and the
  failure goes to the mesh's owner: here the controller, whose
  ``unhandled_fault_hook`` would exit the program unless replaced
  (docs/supervision.md).

Run: .venv/bin/python examples/python/errors.py
"""

import os
import threading

import monarch.actor
from monarch.actor import Actor, ActorError, SupervisionError, current_rank, endpoint, this_host

failures = []
changed = threading.Condition()


def on_failure(failure):
    # Runs on the runtime's supervision thread, once per failure.
    with changed:
        failures.append(failure)
        changed.notify_all()


def wait_for_failure(cause):
    with changed:
        changed.wait_for(lambda: any(f.cause == cause for f in failures), 30)
    return next(f for f in failures if f.cause == cause)


monarch.actor.unhandled_fault_hook = on_failure


class Worker(Actor):
    @endpoint
    def ok(self):
        return current_rank().rank

    @endpoint
    def boom(self):
        raise RuntimeError("boom from an endpoint")

    @endpoint
    def die_if(self, rank):
        if current_rank().rank == rank:
            os._exit(3)
        return "alive"


class BadInit(Actor):
    def __init__(self):
        raise ValueError("constructor refused")

    @endpoint
    def ok(self):
        return "unreachable"


def main():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    workers = procs.spawn("workers", Worker)

    try:
        workers.boom.call().get()
    except ActorError as e:
        print("endpoint raised -> ActorError:", str(e).strip().splitlines()[-1])
    print("still serving:", list(workers.ok.call().get().values()))

    bad = procs.spawn("bad", BadInit)
    try:
        bad.ok.call().get()
    except SupervisionError as e:
        print("constructor raised -> SupervisionError:", str(e).splitlines()[1])
    f = wait_for_failure("spawn_failed")
    print(f"supervision event: mesh {f.mesh_name} ranks {f.ranks} cause {f.cause}")

    try:
        workers.die_if.call(1).get()
    except ActorError as e:
        print("proc of rank 1 exited mid-call -> ActorError:", str(e).strip().splitlines()[-1])
    print("rank 0 still answers:", workers.slice(gpus=0).ok.call_one().get())
    try:
        workers.ok.call()
    except SupervisionError as e:
        print("a call to a view holding rank 1 -> SupervisionError:", str(e).splitlines()[0][:60], "...")
    f = wait_for_failure("exit_code")
    print(f"supervision event: mesh {f.mesh_name} ranks {f.ranks} cause {f.cause} (code {f.code})")

    procs.stop().get()
    print("procs stopped")


if __name__ == "__main__":
    main()
