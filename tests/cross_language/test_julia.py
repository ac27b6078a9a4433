"""Julia and other languages through one libmonarch (real processes).

* A Python controller spawns Julia worker procs (julia_actors.jl) and calls
  the raw-bytes endpoints of a Julia actor, spawned by type name.
* A Julia controller (julia_controller.jl) calls raw-bytes endpoints of
  Python actors, and of C and C++ plugin actors (cplugin.c's CCounter,
  examples/cpp's Trainer) hosted by ``monarch worker --plugin``.

Needs ``julia`` on PATH (``make julia`` installs it).
"""

import os
import shutil
import subprocess
import sys

import pytest
from raw_parts import from_i64, i64

from monarch.actor import ActorError, this_host
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


def test_julia_controller_calls_python_c_and_cpp_plugin_actors(cplugin, cppplugin):
    script = os.path.join(HERE, "julia_controller.jl")
    r = subprocess.run(
        [JULIA, "--startup-file=no", script, sys.executable, cplugin, cppplugin],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "julia_controller.jl: all passed" in r.stdout
