"""Native actors from Python and raw-bytes endpoints (real processes).

A Python controller spawns ``monarch worker --plugin`` procs hosting a tiny
C plugin (cplugin.c, compiled here with ``cc`` against
bindings/cpp/include/monarch/plugin.h) and calls its actors with raw bytes;
Python actors' ``@endpoint(raw=True)`` endpoints and raw spawns by
``"module:Class"`` (what a C/C++ controller uses) are exercised too.
"""

import os
import shutil
import subprocess
import sys

import pytest
from actors import RawActor

from monarch.actor import ActorError, ValueMesh, monarch_binary, this_host, this_proc

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def i64(v: int) -> bytes:
    return v.to_bytes(8, "little", signed=True)


def from_i64(b: bytes) -> int:
    return int.from_bytes(b, "little", signed=True)


# ---------------------------------------------------------------- Python raw endpoints


def test_raw_endpoints_of_python_actors(procs):
    m = procs.spawn("raw", RawActor)
    vm = m.add.call(i64(5)).get(timeout=30)
    assert isinstance(vm, ValueMesh)
    assert list(vm.values()) == [i64(5)] * 4
    assert m.pickled_total.call().get(timeout=30).get(0) == 5  # pickled endpoints still work
    one = m.slice(gpus=2)
    assert one.echo.call_one(b"a", bytearray(b"bc"), memoryview(b"d")).get(timeout=30) == (b"a", b"bc", b"d")
    assert one.echo.call_one(b"only").get(timeout=30) == b"only"
    assert one.echo.call_one().get(timeout=30) is None  # no parts either way
    assert one.upper.call_one(b"xy").get(timeout=30) == b"XY"
    m.add.broadcast(i64(1))
    assert m.add.choose(i64(0)).get(timeout=30) == i64(6)
    with pytest.raises(ActorError) as ei:
        one.fail.call_one(b"1", b"2").get(timeout=30)
    assert "raw fail with 2 parts" in str(ei.value)
    assert isinstance(ei.value.exception, ValueError)  # a Python caller still gets the exception
    with pytest.raises(ActorError, match="cannot be sent"):
        one.bad_return.call_one().get(timeout=30)
    with pytest.raises(TypeError, match="bytes-like"):
        one.echo.call_one("text")
    with pytest.raises(TypeError, match="keyword"):
        one.echo.call_one(data=b"x")
    assert one.add.call_one(i64(1)).get(timeout=30) == i64(7)  # the actor lived on


def test_raw_spawn_by_type_name(procs):
    """What a C/C++ controller does: spawn "module:Class" with raw parts."""
    m = procs.spawn_native("rawn", "actors:RawActor", b"x", b"yz")
    assert list(m.init_args.call().get(timeout=30).values()) == [(b"x", b"yz")] * 4
    assert m.slice(gpus=0).add.call_one(i64(-3)).get(timeout=30) == i64(-3)
    assert m.endpoint("echo").call().get(timeout=30).get(1) is None
    with pytest.raises(ActorError, match="raw fail"):
        m.fail.call().get(timeout=30)
    with pytest.raises(ActorError, match="No module named"):
        procs.spawn_native("bad1", "no_such_module_xyz:Thing")
    with pytest.raises(ActorError, match="not a subclass of monarch.actor.Actor"):
        procs.spawn_native("bad2", "os:getcwd")
    with pytest.raises(ActorError, match="has no attribute"):
        procs.spawn_native("bad3", "actors:Nope")
    with pytest.raises(TypeError, match="bytes-like"):
        procs.spawn_native("bad4", "actors:RawActor", 3)


def test_raw_spawn_on_this_proc():
    m = this_proc().spawn_native("rawlocal", "actors:RawActor", b"q")
    assert m.init_args.call_one().get(timeout=30) == b"q"


# ---------------------------------------------------------------- C plugin actors


def _monarch_bin():
    try:
        return monarch_binary()
    except FileNotFoundError as e:
        pytest.skip(f"the monarch binary is not built ({e})")


@pytest.fixture(scope="module")
def cplugin(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) to build the test plugin"
    out = tmp_path_factory.mktemp("plugin") / "libcplugin.so"
    include = os.path.join(REPO, "bindings", "cpp", "include")
    subprocess.check_call(
        [cc, "-std=c11", "-Wall", "-Werror", "-O1", "-shared", "-fPIC", "-fvisibility=hidden",
         "-I", include, "-o", str(out), os.path.join(HERE, "cplugin.c")]
    )
    return str(out)


@pytest.fixture(scope="module")
def plugin_procs(cplugin):
    _monarch_bin()
    pm = this_host().spawn_procs(per_host={"gpus": 2}, plugins=[cplugin])
    yield pm
    pm.stop().get(timeout=30)


def test_python_controller_calls_c_plugin_actors(plugin_procs):
    c = plugin_procs.spawn_native("cc", "CCounter", i64(10))
    assert repr(c).startswith("<ActorMesh 'cc' of CCounter")
    assert [from_i64(v) for v in c.incr.call(i64(2)).get(timeout=30).values()] == [12, 12]
    assert from_i64(c.slice(gpus=1).incr.call_one(i64(5)).get(timeout=30)) == 17
    assert [from_i64(v) for v in c.rank.call().get(timeout=30).values()] == [0, 1]
    assert c.slice(gpus=0).echo.call_one(b"a", b"", b"c").get(timeout=30) == (b"a", b"", b"c")
    assert c.slice(gpus=0).concat.call_one(b"ab", bytearray(b"cd")).get(timeout=30) == b"abcd"
    with pytest.raises(ActorError, match="CCounter.fail on rank 0") as ei:
        c.fail.call().get(timeout=30)
    assert "1 more of 2 points failed" in str(ei.value)
    assert [(r, m) for r, m, _ in ei.value.failures] == [(0, "CCounter.fail on rank 0"), (1, "CCounter.fail on rank 1")]
    with pytest.raises(ActorError, match="takes one 8-byte part"):
        c.slice(gpus=0).incr.call_one(b"short").get(timeout=30)
    # Constructor errors and unknown types.
    with pytest.raises(ActorError, match="start must be 8 bytes"):
        plugin_procs.spawn_native("bad", "CCounter", b"123")
    with pytest.raises(ActorError, match="CCounter"):  # the worker lists its types
        plugin_procs.spawn_native("nope", "NoSuchType")
    # Built-in actors of `monarch worker` work the same way.
    e = plugin_procs.spawn_native("e", "echo")
    assert e.echo.call().get(timeout=30).get(1) is None
    assert e.echo.call(b"hi").get(timeout=30).get(0) == b"hi"
    # Stopping the mesh destroys the instances; calls then fail.
    c.stop().get(timeout=30)
    d = plugin_procs.spawn_native("cc2", "CCounter")
    assert from_i64(d.slice(gpus=0).incr.call_one(i64(1)).get(timeout=30)) == 1


def test_monarch_binary_lookup(monkeypatch, tmp_path):
    monkeypatch.setenv("MONARCH_BIN", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="MONARCH_BIN"):
        monarch_binary()
    with pytest.raises(FileNotFoundError):
        this_host().spawn_procs(per_host={"gpus": 1}, plugins=["/x.so"])
    monkeypatch.setenv("MONARCH_BIN", sys.executable)
    assert monarch_binary() == sys.executable
    with pytest.raises(FileNotFoundError, match="plugin library"):
        this_host().spawn_procs(per_host={"gpus": 1}, plugins=[str(tmp_path / "nope.so")])
    with pytest.raises(ValueError, match="not both"):
        this_host().spawn_procs(per_host={"gpus": 1}, plugins=[], bootstrap=["x"])
