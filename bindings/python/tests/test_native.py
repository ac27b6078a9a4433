"""Raw-bytes endpoints of Python actors and spawning by ``"module:Class"``
(what a C/C++ controller uses), from a Python controller (real processes);
finding the ``monarch`` binary that hosts native plugins. A Python
controller calling C plugin actors is in tests/cross_language.
"""

import sys

import pytest
from actors import RawActor
from raw_parts import i64

from monarch.actor import ActorError, ValueMesh, monarch_binary, this_host, this_proc

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
