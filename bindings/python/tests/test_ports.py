"""Ports, channels, send(), explicit_response_port, stream(), Accumulator,
async and concurrent endpoints, and per-sender ordering."""

import pickle
import threading

import pytest
from actors import AsyncEcho, Counter, Mixed, Ports

from monarch.actor import (
    Accumulator,
    ActorError,
    Channel,
    Port,
    PortReceiver,
    send,
)


@pytest.fixture(scope="module")
def ports(procs):
    return procs.spawn("ports", Ports)


def test_channel_send_recv_in_order():
    port, rx = Channel.open()
    assert isinstance(port, Port) and isinstance(rx, PortReceiver)
    first = rx.recv()
    assert not first.done()
    for i in range(5):
        port.send({"i": i})
    assert first.get(timeout=10) == {"i": 0}
    assert [rx.recv().get(timeout=10)["i"] for _ in range(4)] == [1, 2, 3, 4]


def test_channel_from_another_thread_and_pickled():
    port, rx = Channel.open()
    port2 = pickle.loads(pickle.dumps(port))
    threading.Thread(target=port2.send, args=("hi",)).start()
    assert rx.recv().get(timeout=10) == "hi"


def test_channel_once_and_exception():
    port, rx = Channel.open(once=True)
    port.send(1)
    port.send(2)  # dropped: the port took its one value
    assert rx.recv().get(timeout=10) == 1
    with pytest.raises(Exception, match="closed"):
        rx.recv().get(timeout=10)
    port, rx = Channel.open()
    port.exception(KeyError("nope"))
    with pytest.raises(ActorError) as ei:
        rx.recv().get(timeout=10)
    assert isinstance(ei.value.__cause__, KeyError)


def test_send_to_port_all_and_choose(ports):
    port, rx = Channel.open()
    send(ports.answer, ("x",), {}, port=port)
    got = sorted(rx.recv().get(timeout=30) for _ in range(4))
    assert got == [("answered-for", "x")] * 4
    send(ports.answer, ("y",), {}, port=port, selection="choose")
    assert rx.recv().get(timeout=30) == ("answered-for", "y")
    # Without a port nobody answers; the message is still delivered.
    send(ports.record, (-1,), {})
    assert all(-1 in s for s in ports.seen_list.call().get(timeout=30).values())
    with pytest.raises(ValueError, match="selection"):
        send(ports.answer, (), {}, selection="some")
    with pytest.raises(TypeError, match="Port"):
        send(ports.answer, (), {}, port="not a port")
    with pytest.raises(TypeError, match="endpoint"):
        send(lambda: 1, (), {})


def test_explicit_response_port(ports):
    # Answered later from a timer thread, after the endpoint returned.
    vm = ports.later.call(4).get(timeout=30)
    assert list(vm.values()) == [40, 41, 42, 43]
    # Answered by a later message.
    held = ports.slice(gpus=2).hold.call_one()
    assert not held.done()
    assert ports.slice(gpus=2).release.call_one("released").get(timeout=30) == 1
    assert held.get(timeout=30) == "released"
    # port.exception() is the caller's error.
    with pytest.raises(ActorError) as ei:
        ports.slice(gpus=0).fail.call_one().get(timeout=30)
    assert isinstance(ei.value.__cause__, ValueError)
    # The port handed to another actor, which answers it.
    # (rank 0: the message went to a one-point slice)
    assert ports.slice(gpus=1).delegate.call_one(ports).get(timeout=30) == ("answered-for", 0)


def test_stream_yields_as_replies_arrive(ports):
    futs = list(ports.rank_after.stream(0.8))
    assert len(futs) == 4
    values = [f.get(timeout=60) for f in futs]
    assert sorted(values) == [0, 1, 2, 3]
    assert values[0] == 0  # rank 0 answers at once, rank 1 after 0.8 s
    # On a slice: one future per point of the slice.
    assert sorted(f.get(timeout=30) for f in ports.slice(gpus=slice(1, 4, 2)).rank_after.stream(0)) == [0, 1]


def test_accumulator(procs):
    c = procs.spawn("acc", Counter, 1)
    total = Accumulator(c.incr, 0, lambda acc, v: acc + v).accumulate(1)
    assert total.get(timeout=30) == 8
    order = Accumulator(c.get, [], lambda acc, v: acc + [v]).accumulate()
    assert order.get(timeout=30) == [2, 2, 2, 2]
    # Left to right in rank order.
    ranks = Accumulator(c.slice(gpus=slice(1, 4)).where, "", lambda acc, v: acc + str(v[0]))
    assert ranks.accumulate().get(timeout=30) == "012"


def test_async_endpoints_one_at_a_time_and_concurrent(procs):
    e = procs.spawn("async", AsyncEcho).slice(gpus=0)
    a = e.slow.call_one("a", 0.2)
    b = e.slow.call_one("b", 0.0)
    assert (a.get(timeout=30), b.get(timeout=30)) == ("a", "b")
    max_active, log = e.stats.call_one().get(timeout=30)
    assert max_active == 1
    assert log == [("start", "a"), ("end", "a"), ("start", "b"), ("end", "b")]
    e.reset.call_one().get(timeout=30)
    futs = [e.cslow.call_one(i, 1.0) for i in range(3)]
    assert [f.get(timeout=30) for f in futs] == [(0, 0), (1, 0), (2, 0)]
    max_active, _ = e.stats.call_one().get(timeout=30)
    assert max_active >= 2  # bodies interleaved


def test_mixing_sync_and_async_is_rejected(procs):
    with pytest.raises(TypeError, match=r"Mixed mixes synchronous endpoints \(a\) and async endpoints \(b\)"):
        procs.spawn("mixed", Mixed)


def test_fifo_per_sender_across_casts_and_direct_calls(ports):
    ports.record.call(-2).get(timeout=30)  # make sure all are up
    port, rx = Channel.open()
    n = 0
    expected = {r: [] for r in range(4)}
    for i in range(60):
        kind = i % 4
        if kind == 0:
            ports.record.broadcast(i)
            for r in range(4):
                expected[r].append(i)
        elif kind == 1:
            r = (i // 4) % 4
            ports.slice(gpus=r).record.call_one(i)
            expected[r].append(i)
        elif kind == 2:
            send(ports.slice(gpus=slice(0, 4, 2)).record, (i,), {}, port=port)
            n += 2
            expected[0].append(i)
            expected[2].append(i)
        else:
            ports.slice(gpus=3).record.call(i)
            expected[3].append(i)
    for _ in range(n):
        rx.recv().get(timeout=30)
    seen = ports.seen_list.call().get(timeout=30)
    for r in range(4):
        got = [i for i in seen.item(gpus=r) if i >= 0]
        assert got[-len(expected[r]) :] == expected[r]
