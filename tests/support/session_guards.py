"""Session-wide guards for every pytest suite that starts monarch procs
(bindings/python/tests and tests/cross_language): a conftest imports the
two fixtures below, so each suite runs under them.

- ``unhandled_failures_do_not_exit_pytest``: unhandled supervision failures
  are reported instead of exiting the test process;
- ``no_leftover_procs``: at the end of the session, once the runtime is
  shut down (it keeps the template procs are forked from while it lives),
  no ``monarch._bootstrap`` process started by this process is left.
"""

import os
import sys
import time

import pytest


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
    bindings/python/tests/test_supervision.py); here it is only reported."""
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
    from monarch._lib import shutdown_runtime

    shutdown_runtime()
    deadline = time.time() + 10
    left = bootstrap_children()
    while left and time.time() < deadline:
        time.sleep(0.05)
        left = bootstrap_children()
    assert not left, f"monarch._bootstrap processes left behind: {left}"
