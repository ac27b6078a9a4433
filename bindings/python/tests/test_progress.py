"""monarch.progress with real procs: the events of procs starting and of a
large RDMA read, an operation the program reports itself, and the status
line on a controller's terminal (a pty), absent when stderr is a pipe."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from rdma_actors import Owner, pattern
from terminal import run_on_a_terminal

from monarch import progress
from monarch.actor import this_host

HERE = os.path.dirname(os.path.abspath(__file__))
HANG = 60.0  # only turns a hang into a failure


def _events_of(kind, total=None):
    """The events, in order, of the first operation of ``kind`` (of size
    ``total`` when given) whose start is seen, up to its last one; events
    of other operations are skipped."""
    mine, op = [], None
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        ev = progress.next_event(timeout=1.0)
        if ev is None or ev.kind != kind:
            continue
        if op is None:
            if ev.done != 0 or ev.finished or (total is not None and ev.total != total):
                continue  # begun before watching, or another operation
            op = ev.id
        if ev.id != op:
            continue
        mine.append(ev)
        if ev.finished:
            return mine
    raise AssertionError(f"no finished {kind} operation within {HANG}s: {mine}")


@pytest.fixture
def watching():
    progress.watch(True)
    yield
    progress.watch(False)


def test_procs_starting_report_ready_counts(watching):
    pm = this_host().spawn_procs(per_host={"gpus": 3})
    try:
        evs = _events_of("procs_ready", total=3)
        assert evs[0].done == 0 and evs[0].total == 3 and not evs[0].finished
        assert [e.done for e in evs] == sorted(e.done for e in evs)
        last = evs[-1]
        assert (last.done, last.total, last.failed, last.finished) == (3, 3, 0, True)
        assert last.label == "procs ready" and last.text.startswith("procs ready 3/3 (")
    finally:
        pm.stop().get(timeout=30)


def test_a_large_rdma_read_reports_bytes(watching):
    n = 40 << 20  # above the 32 MiB from which transfers report
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        owner = pm.spawn("owner", Owner, n, 5)
        buf = owner.buffer.call_one().get(timeout=HANG)
        _events_of("procs_ready", total=1)  # drained before the read starts
        dst = np.empty(n, dtype=np.uint8)
        buf.read_into(dst, timeout=HANG).get(timeout=HANG)
        assert np.array_equal(dst, pattern(n, 5))
        evs = _events_of("rdma_transfer", total=n)
        assert evs[0].label == "RDMA read" and evs[0].total == n
        done = [e.done for e in evs]
        assert done == sorted(done) and done[-1] == n and evs[-1].finished
        assert len(set(done)) >= 3, "the read reports in pieces"
        assert "MiB" in evs[-1].text
    finally:
        pm.stop().get(timeout=30)


def test_an_operation_of_the_program(watching):
    with progress.Progress("tensor_fetch", "fetch weights", 1000) as p:
        p.set(250)
        p.set(1000, total=2000)
    evs = _events_of("tensor_fetch", total=1000)
    assert [(e.done, e.total, e.finished) for e in evs] == [
        (0, 1000, False),
        (250, 1000, False),
        (250, 2000, False),
        (1000, 2000, False),
        (1000, 2000, True),
    ]
    assert evs[-1].label == "fetch weights"
    with pytest.raises(ValueError, match="unknown progress kind"):
        progress.Progress("nonsense", "x")
    p.finish()  # finishing twice is a no-op
    with pytest.raises(ValueError, match="finished"):
        p.set(1)


def _run_controller(stderr_is_tty):
    env = dict(os.environ, MONARCH_PROGRESS_DELAY_MS="0", PYTHONPATH=HERE)
    env.pop("MONARCH_PROGRESS", None)
    cmd = [sys.executable, os.path.join(HERE, "progress_controller.py")]
    if not stderr_is_tty:
        r = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
        return r.returncode, (r.stdout + r.stderr).decode(errors="replace")
    return run_on_a_terminal(cmd, env)


def test_the_status_line_on_a_terminal():
    rc, out = _run_controller(stderr_is_tty=True)
    assert rc == 0, out
    assert "controller done" in out
    # The line is redrawn in place and ends finished, with a newline.
    assert "\r\x1b[2Kprocs ready 3/3 (" in out, repr(out)
    final = out[out.index("procs ready 3/3 (") :]
    assert final.split("\n")[0].rstrip("\r").endswith("s)"), repr(final)


def test_no_status_line_when_stderr_is_not_a_terminal():
    rc, out = _run_controller(stderr_is_tty=False)
    assert rc == 0, out
    assert "controller done" in out
    assert "procs ready" not in out and "\x1b[2K" not in out
