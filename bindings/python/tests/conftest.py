import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def bootstrap_children():
    """pids of monarch._bootstrap processes that descend from this process."""
    me = os.getpid()
    parents = {}
    cmdlines = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        parents[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
        cmdlines[int(d)] = cmd
    out = []
    for pid, cmd in cmdlines.items():
        if b"monarch._bootstrap" not in cmd:
            continue
        p = pid
        while p in parents and p > 1:
            p = parents[p]
            if p == me:
                out.append(pid)
                break
    return out


@pytest.fixture(scope="session", autouse=True)
def unhandled_failures_do_not_exit_pytest():
    """Many tests kill procs on purpose. At a controller, an unhandled
    supervision failure goes to monarch.actor.unhandled_fault_hook, whose
    default exits the process (tested in a subprocess by
    test_supervision.py); here it is only reported."""
    import monarch.actor as ma

    def report(failure):
        sys.stderr.write(f"[unhandled supervision failure] {failure!r}\n")

    old = ma.unhandled_fault_hook
    ma.unhandled_fault_hook = report
    yield
    ma.unhandled_fault_hook = old


@pytest.fixture(scope="session", autouse=True)
def no_leftover_procs():
    yield
    import time

    deadline = time.time() + 10
    left = bootstrap_children()
    while left and time.time() < deadline:
        time.sleep(0.05)
        left = bootstrap_children()
    assert not left, f"monarch._bootstrap processes left behind: {left}"


@pytest.fixture(scope="module")
def procs():
    from monarch.actor import this_host

    pm = this_host().spawn_procs(per_host={"gpus": 4})
    yield pm
    pm.stop().get(timeout=30)


@pytest.fixture(scope="module")
def counters(procs):
    from actors import Counter

    return procs.spawn("counters", Counter, 10)
