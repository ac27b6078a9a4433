"""Bad arguments fail the one call with ValueError before anything is
sent, and the mesh keeps working: oversized or malformed names, huge mesh
sizes, timeouts that are not a number of seconds."""

import math

import pytest
from actors import Counter

from monarch.actor import ActorError, this_host

MIB = 1 << 20


@pytest.fixture(scope="module")
def procs():
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    yield pm
    pm.stop().get(timeout=30)


@pytest.fixture(scope="module")
def counter(procs):
    return procs.spawn("c", Counter, 0)


def answers(counter):
    return list(counter.get.call().get(timeout=30).values())


def test_bad_actor_names_are_refused_before_anything_is_sent(procs, counter):
    for name in ["n" * (MIB + 1), "n" * 1025, "tab\there", "nul\0here"]:
        with pytest.raises(ValueError, match="actor mesh name"):
            procs.spawn(name, Counter, 0)
    with pytest.raises(ValueError, match="actor type name"):
        procs.spawn_native("ok", "actors:" + "C" * MIB)
    assert answers(counter) == [0, 0]
    # The longest allowed name works.
    longest = procs.spawn("x" * 1024, Counter, 5)
    assert list(longest.get.call().get(timeout=30).values()) == [5, 5]


def test_huge_mesh_sizes_are_refused(counter):
    host = this_host()
    for per_host in [{"gpus": 1 << 40}, {"gpus": 1 << 62}, {"a": 1 << 40, "b": 1 << 40}]:
        with pytest.raises(ValueError):
            host.spawn_procs(per_host=per_host)
    with pytest.raises(ValueError, match="dimension name"):
        host.spawn_procs(per_host={"d" * MIB: 1})
    assert answers(counter) == [0, 0]


def test_a_huge_error_message_fails_only_that_call(counter):
    one = counter.slice(gpus=0)
    with pytest.raises(ActorError):
        one.boom.call_one("e" * (2 * MIB)).get(timeout=30)
    assert answers(counter) == [0, 0]


def test_timeouts_beyond_any_bound_wait_forever(counter):
    one = counter.slice(gpus=0)
    assert one.get.call_one().get(timeout=1e300) == 0
    assert one.get.call_one().get(timeout=math.inf) == 0
    assert one.get.call_one().result(timeout=float(1 << 63)) == 0


def test_nan_and_negative_timeouts_are_value_errors(counter):
    fut = counter.slice(gpus=0).get.call_one()
    for bad in [math.nan, -1, -0.5, -math.inf]:
        with pytest.raises(ValueError, match="timeout"):
            fut.get(timeout=bad)
    assert fut.get(timeout=30) == 0
