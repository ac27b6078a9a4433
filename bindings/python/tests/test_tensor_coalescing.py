"""monarch.coalescing() on real procs: the ops of a block reach the workers
as one message per mesh at its end, with the same results as without it;
errors inside it surface; answers asked for inside it still come."""

import pytest

torch = pytest.importorskip("torch")

from monarch import coalescing, fetch_shard  # noqa: E402
from monarch._src.tensor.controller import BATCH, controller_for  # noqa: E402
from monarch.actor import this_host  # noqa: E402

T = 120  # seconds: every wait is bounded


@pytest.fixture(scope="module")
def mesh():
    pm = this_host().spawn_procs(per_host={"gpu": 2})
    yield pm
    pm.stop().get(timeout=30)


@pytest.fixture
def sends(mesh, monkeypatch):
    """The batches the mesh's controller broadcasts to its workers."""
    ctl = controller_for(mesh)
    sent = []
    real = ctl._flush_locked

    def counting():
        if ctl._batch or ctl._deletes:
            sent.append(len(ctl._batch))
        real()

    monkeypatch.setattr(ctl, "_flush_locked", counting)
    return sent


def _steps(mesh, n):
    with mesh.activate():
        t = mesh.rank("gpu").float() + torch.arange(4.0)
        for i in range(n):
            t = (t * 1.5 + i).remainder(97.0)
        return t


def test_a_block_is_sent_once_at_its_end_with_the_same_results(mesh, sends):
    n = 2 * BATCH + 10
    plain = _steps(mesh, n)
    without = len(sends)
    assert without >= 3  # full batches go out on their own
    sends.clear()
    with coalescing():
        held = _steps(mesh, n)  # leaving activate() inside the block sends nothing
        assert sends == []
    assert len(sends) == 1 and sends[0] >= 2 * n
    for g in range(2):
        assert torch.equal(fetch_shard(held, gpu=g).result(timeout=T), fetch_shard(plain, gpu=g).result(timeout=T))


def test_nested_blocks_and_the_decorator_send_at_the_outer_end(mesh, sends):
    @coalescing()
    def inner():
        return _steps(mesh, 5)

    with coalescing():
        a = inner()
        with coalescing():
            b = _steps(mesh, 7)
        assert sends == []
    assert len(sends) == 1
    c = inner()
    assert len(sends) == 2
    assert fetch_shard(a).result(timeout=T).tolist() == fetch_shard(c).result(timeout=T).tolist()
    again = _steps(mesh, 7)
    assert fetch_shard(b, gpu=1).result(timeout=T).tolist() == fetch_shard(again, gpu=1).result(timeout=T).tolist()


def test_a_fetch_inside_a_block_sends_what_came_before(mesh, sends):
    with coalescing():
        with mesh.activate():
            t = torch.ones(3) * 4
            got = fetch_shard(t, gpu=1).result(timeout=T)
            u = t + 1
        assert len(sends) == 1
    assert got.tolist() == [4.0] * 3
    assert fetch_shard(u).result(timeout=T).tolist() == [5.0] * 3


def test_an_error_inside_a_block_propagates_and_what_was_issued_runs(mesh):
    with pytest.raises(ZeroDivisionError):
        with coalescing():
            with mesh.activate():
                t = torch.full((2,), 3.0)
                u = t * 2
                raise ZeroDivisionError("raised in the block")
    assert fetch_shard(u).result(timeout=T).tolist() == [6.0, 6.0]
    with pytest.raises(RuntimeError, match="same reduction dim|cannot be multiplied"):
        with coalescing():
            with mesh.activate():
                torch.zeros(2, 3) @ torch.zeros(2, 3)  # a shape error, at issue time
    with coalescing():
        with mesh.activate():
            bad = torch.ones(2)[torch.tensor([5])]  # fails on the workers
            fine = torch.ones(2) + 1
    with pytest.raises(Exception, match="out of bounds|out of range"):
        fetch_shard(bad).result(timeout=T)
    assert fetch_shard(fine).result(timeout=T).tolist() == [2.0, 2.0]
