"""A controller for test_top.py: spawns 2 procs with Probe actors, makes
rank 1 raise once and (with "hold") rank 0 hold a message, prints its
address, then waits until its stdin closes."""

import os
import sys
import tempfile
import time

from introspect_actors import Probe

from monarch import introspect
from monarch.actor import ActorError, this_host


def main() -> int:
    name = sys.argv[1]
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    probes = procs.spawn(name, Probe)
    for _ in range(3):
        probes.ping.call().get(timeout=120)
    try:
        probes.slice(gpus=1).boom.call_one().get(timeout=120)
    except ActorError:
        pass
    if sys.argv[2:] == ["hold"]:
        started = os.path.join(tempfile.mkdtemp(), "started")
        held = probes.slice(gpus=0).hold.call_one(600.0, started)  # noqa: F841 - kept in flight
        deadline = time.monotonic() + 120
        while not os.path.exists(started) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.unlink(started)
        os.rmdir(os.path.dirname(started))
    snap = introspect.introspect(timeout=60)
    print(f"CONTROLLER {snap.controller}", flush=True)
    sys.stdin.read()
    procs.stop().get(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
