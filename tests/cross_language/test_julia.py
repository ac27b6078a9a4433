"""Julia and other languages through one libmonarch (real processes).

* A Python controller spawns Julia worker procs (julia_actors.jl) and calls
  the raw-bytes endpoints of a Julia actor, spawned by type name.
* A Julia worker proc whose caller (a Python proc) is killed while it
  computes the answer logs the reply it cannot deliver and serves on.
* A Julia controller (julia_controller.jl) calls raw-bytes endpoints of
  Python actors, and of C and C++ plugin actors (cplugin.c's CCounter,
  examples/cpp's Trainer) hosted by ``monarch worker --plugin``.

Needs ``julia`` on PATH (``make julia`` installs it).
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from pids import alive
from raw_parts import from_i64, i64
from relay_actor import Relay

from monarch.actor import ActorError, SupervisionError, this_host
from monarch.rdma import RDMABuffer

HERE = os.path.dirname(os.path.abspath(__file__))
JULIA = shutil.which("julia")
pytestmark = pytest.mark.skipif(JULIA is None, reason="julia is not on PATH (make julia installs it)")


def precompile_monarch_jl():
    """Compile Monarch.jl's cache once: Julia 1.5 worker procs that start
    together with no cache each compile it, and race on its files."""
    binding = os.path.join(HERE, "..", "..", "bindings", "julia")
    code = f"pushfirst!(LOAD_PATH, \"{binding}\"); using Monarch"
    subprocess.run([JULIA, "--startup-file=no", "-e", code], check=True, timeout=300)


@pytest.fixture(scope="module")
def julia_procs():
    precompile_monarch_jl()
    argv = [JULIA, "--startup-file=no", os.path.join(HERE, "julia_actors.jl")]
    pm = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=argv)
    yield pm
    pm.stop().get(timeout=60)


def test_python_controller_calls_julia_actors(julia_procs):
    c = julia_procs.spawn_native("jc", "Main:JCounter", i64(10))
    assert [from_i64(v) for v in c.incr.call(i64(2)).get(timeout=120).values()] == [12, 12]
    assert from_i64(c.slice(gpus=1).incr.call_one(i64(5)).get(timeout=30)) == 17
    assert [from_i64(v) for v in c.rank.call().get(timeout=30).values()] == [0, 1]
    assert c.slice(gpus=0).echo.call_one(b"a", b"", b"c").get(timeout=30) == (b"a", b"", b"c")
    assert c.slice(gpus=0).upper.call_one(b"julia").get(timeout=30) == b"JULIA"
    with pytest.raises(ActorError, match="JCounter.fail with 2 parts") as ei:
        c.fail.call(b"1", b"2").get(timeout=30)
    assert "1 more of 2 points failed" in str(ei.value)
    with pytest.raises(ActorError, match="takes one 8-byte part"):
        c.slice(gpus=0).incr.call_one(b"short").get(timeout=30)
    assert from_i64(c.slice(gpus=0).incr.call_one(i64(1)).get(timeout=30)) == 13  # lived on
    with pytest.raises(ActorError, match="start must be 8 bytes"):
        julia_procs.spawn_native("bad", "Main:JCounter", b"123")
    with pytest.raises(ActorError, match="no actor type"):
        julia_procs.spawn_native("nope", "Main:NoSuchType")


def test_julia_actor_reads_a_python_rdma_buffer(julia_procs):
    data = bytearray(os.urandom(65536))
    buf = RDMABuffer(data)
    c = julia_procs.spawn_native("reader", "Main:JCounter")
    descriptor = buf.__reduce__()[1][0]  # the bytes a pickled RDMABuffer carries
    got = c.slice(gpus=1).read_buffer.call_one(descriptor, i64(len(data))).get(timeout=60)
    assert got == bytes(data)


def test_a_killed_caller_does_not_take_a_julia_worker_down(tmp_path):
    # Proc A (Python) calls a slow endpoint of an actor on Julia worker proc
    # B and is SIGKILLed while B computes: B's answer cannot be delivered,
    # and B serves on (as the Python and C++ workers do).
    precompile_monarch_jl()
    argv = [JULIA, "--startup-file=no", os.path.join(HERE, "julia_actors.jl")]
    callee_procs = this_host().spawn_procs(per_host={"b": 1}, bootstrap=argv)
    caller_procs = this_host().spawn_procs(per_host={"a": 1})
    new_caller_procs = None
    try:
        slow = callee_procs.spawn_native("slow", "Main:JSlow")
        relay = caller_procs.spawn("relay", Relay)
        callee_pid = from_i64(slow.pid.call_one().get(timeout=120))
        caller_pid = relay.pid.call_one().get(timeout=60)
        started = tmp_path / "started"
        pending = relay.call.call_one(slow, "nap", str(started).encode(), i64(1000))
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline, "the Julia endpoint never started"
            time.sleep(0.01)
        os.kill(caller_pid, signal.SIGKILL)
        with pytest.raises(SupervisionError):
            pending.get(timeout=60)
        # Handled after the slow call answered (an actor's events are
        # handled in order): the answer went nowhere, and B is still there.
        assert from_i64(slow.answered.call_one().get(timeout=60)) == 1
        assert alive(callee_pid)
        time.sleep(0.2)
        assert alive(callee_pid)
        assert from_i64(slow.pid.call_one().get(timeout=60)) == callee_pid
        # A new caller, from another proc, is answered too.
        new_caller_procs = this_host().spawn_procs(per_host={"a": 1})
        relay2 = new_caller_procs.spawn("relay2", Relay)
        assert from_i64(relay2.call.call_one(slow, "answered").get(timeout=60)) == 1
    finally:
        for pm in (new_caller_procs, caller_procs, callee_procs):
            if pm is not None:
                pm.stop().get(timeout=60)


def test_julia_controller_calls_python_c_and_cpp_plugin_actors(cplugin, cppplugin):
    script = os.path.join(HERE, "julia_controller.jl")
    r = subprocess.run(
        [JULIA, "--startup-file=no", script, sys.executable, cplugin, cppplugin],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "julia_controller.jl: all passed" in r.stdout
