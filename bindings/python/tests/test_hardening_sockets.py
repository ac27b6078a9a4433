"""A SIGKILLed local proc cannot remove its own socket file: the runtime
removes it when the proc's loss is recorded, not at shutdown."""

import os
import signal
import time

import pytest
from sup_actors import Worker

import monarch.actor as ma
from monarch.actor import SupervisionError, this_host


def socket_path(addr):
    """The Unix socket a proc listens on, from its MONARCH_PROC_ADDR (asked
    of the proc: a proc forked from the zygote got its environment after
    start, so /proc/PID/environ does not show it)."""
    assert addr.startswith("unix:"), addr
    return addr[len("unix:") :]


def test_killed_procs_socket_file_is_removed():
    failures = []
    old = ma.unhandled_fault_hook
    ma.unhandled_fault_hook = failures.append
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        w = pm.spawn("sock", Worker)
        pids = list(w.pid.call().get(timeout=30).values())
        paths = [socket_path(a) for a in w.proc_addr.call().get(timeout=30).values()]
        path = paths[1]
        assert os.path.exists(path)
        victim = w.slice(gpus=1).sleep.call_one(30)
        os.kill(pids[1], signal.SIGKILL)
        with pytest.raises(SupervisionError):
            victim.get(timeout=30)
        deadline = time.monotonic() + 30
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(path), f"{path} stayed after its proc was killed"
        # The live proc keeps its socket.
        assert os.path.exists(paths[0])
    finally:
        pm.stop().get(timeout=30)
        time.sleep(0.1)
        ma.unhandled_fault_hook = old
