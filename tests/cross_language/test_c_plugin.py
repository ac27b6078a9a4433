"""A Python controller calls C actors (real processes).

The controller spawns ``monarch worker --plugin`` procs hosting a tiny C
plugin (cplugin.c, compiled by the ``cplugin`` fixture of conftest.py against
bindings/cpp/include/monarch/plugin.h) and calls its actors with raw bytes.
"""

import pytest
from raw_parts import from_i64, i64

from monarch.actor import ActorError, monarch_binary, this_host


def _monarch_bin():
    try:
        return monarch_binary()
    except FileNotFoundError as e:
        pytest.skip(f"the monarch binary is not built ({e})")


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


def test_plugin_actors_of_one_proc_progress_independently(cplugin):
    """Each plugin actor is its own sequential worker: an endpoint of one
    actor may block until another actor of its proc has handled a message,
    and an actor's endpoints run on the thread that ran its constructor.
    On a fresh proc the first actor runs on the proc's serving thread until
    the second is spawned; both orders are checked."""
    _monarch_bin()
    pm = this_host().spawn_procs(per_host={"gpus": 1}, plugins=[cplugin])
    try:
        first = pm.spawn_native("first", "CCounter")
        assert first.same_thread.call_one().get(timeout=30) == b"\x01"
        second = pm.spawn_native("second", "CCounter")
        # The second's constructor ran after the first's: only a thread per
        # actor keeps each one's own constructor's thread-locals.
        assert first.same_thread.call_one().get(timeout=30) == b"\x01"
        assert second.same_thread.call_one().get(timeout=30) == b"\x01"
        for waiter, releaser in ((first, second), (second, first)):
            blocked = waiter.wait.call_one()
            releaser.release.call_one().get(timeout=30)
            blocked.get(timeout=30)
        # Messages to one actor still run one at a time, in order.
        futures = [first.incr.call_one(i64(1)) for _ in range(20)]
        assert [from_i64(f.get(timeout=30)) for f in futures] == list(range(1, 21))
        second.stop().get(timeout=30)
        third = pm.spawn_native("third", "CCounter")
        blocked = third.wait.call_one()
        first.release.call_one().get(timeout=30)
        blocked.get(timeout=30)
    finally:
        pm.stop().get(timeout=30)
