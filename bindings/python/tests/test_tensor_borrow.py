"""Stream.borrow on real procs: the borrowed tensor has the lender's value
as of the borrow, the lender's later ops wait for the borrower's at the
drop, and the access rights (mutable or not, dropped) are enforced when an
op is issued."""

import gc

import pytest

torch = pytest.importorskip("torch")

import monarch  # noqa: E402
from monarch import Borrow, BorrowError, Stream, fetch_shard, remote  # noqa: E402
from monarch.actor import this_host  # noqa: E402

T = 120  # seconds: every wait is bounded

# Holds a stream for a while: what runs on the other stream meanwhile shows
# whether it waited for this one.
_sleep = remote("time.sleep", propagate=lambda s: None)


@pytest.fixture(scope="module")
def mesh():
    pm = this_host().spawn_procs(per_host={"gpu": 2})
    yield pm
    pm.stop().get(timeout=30)


def shards(t):
    return [fetch_shard(t, gpu=i).result(timeout=T) for i in range(2)]


def test_the_borrow_sees_the_lenders_ops_issued_before_it(mesh):
    other = Stream("other")
    with mesh.activate():
        t = torch.zeros(3)
        _sleep(0.5)  # the main stream is busy when the borrow is issued
        t.add_(5)
        b, lease = other.borrow(t)
        assert isinstance(lease, Borrow) and b.stream.name == "other" and b.shape == t.shape
        with other.activate():
            seen = b * 1  # on "other": must wait for add_ on "main"
        lease.drop()
    assert [s.tolist() for s in shards(seen)] == [[5.0] * 3] * 2


def test_a_mutable_borrows_writes_are_seen_by_the_lender_after_the_drop(mesh):
    other = Stream("other")
    with mesh.activate():
        t = torch.zeros(4)
        b, lease = other.borrow(t, mutable=True)
        with other.activate():
            _sleep(0.5)  # the borrower is slow
            b.add_(1)
        lease.drop()
        after = t + 0  # on "main": must wait for the borrower's add_
    assert [s.tolist() for s in shards(after)] == [[1.0] * 4] * 2
    assert [s.tolist() for s in shards(t)] == [[1.0] * 4] * 2


def test_a_mutably_borrowed_tensor_and_its_views_cannot_be_used_by_the_lender(mesh):
    other = Stream("other")
    with mesh.activate():
        t = torch.ones(2, 2)
        row = t[0]  # a view: the same memory
        copy = t.clone()  # not a view
        b, lease = other.borrow(t, mutable=True)
        with pytest.raises(BorrowError, match="borrowed mutably"):
            t + 1
        with pytest.raises(BorrowError, match="borrowed mutably"):
            row * 2
        with pytest.raises(BorrowError, match="borrowed mutably"):
            fetch_shard(t)
        with pytest.raises(BorrowError, match="borrowed mutably"):
            t.reduce("gpu")
        with pytest.raises(BorrowError, match="borrowed"):
            other.borrow(t)
        ok = copy + 1
        with other.activate():
            b.mul_(3)
            bv = b[1]  # a view of the borrow: dropped with it
        lease.drop()
        with pytest.raises(BorrowError, match="dropped"):
            b + 1
        with pytest.raises(BorrowError, match="dropped"):
            bv + 1
        with pytest.raises(BorrowError, match="dropped"):
            fetch_shard(b)
        row2 = row * 2  # the lender is free again
    assert fetch_shard(ok).result(timeout=T).tolist() == [[2.0, 2.0]] * 2
    assert fetch_shard(row2, gpu=1).result(timeout=T).tolist() == [6.0, 6.0]


def test_a_borrow_that_is_not_mutable_makes_both_sides_read_only(mesh):
    other = Stream("other")
    with mesh.activate():
        t = torch.full((3,), 2.0)
        b, lease = other.borrow(t)
        with pytest.raises(BorrowError, match="read-only"):
            t.add_(1)
        with pytest.raises(BorrowError, match="read-only"):
            t.reduce_("gpu")
        with pytest.raises(BorrowError, match="read-only"):
            torch.zeros(3).reduce("gpu", out=t)
        with pytest.raises(BorrowError, match="mutably"):
            Stream("third").borrow(t, mutable=True)
        b2, lease2 = Stream("third").borrow(t)  # a second reader is fine
        with other.activate():
            with pytest.raises(BorrowError, match="read-only"):
                b.add_(1)
            s = b + 1
        read = t * 10  # the lender still reads
        lease.drop()
        with pytest.raises(BorrowError, match="read-only"):
            t.add_(1)  # still lent to "third"
        lease2.drop()
        t.add_(1)  # every borrow dropped: writable again
    assert fetch_shard(s).result(timeout=T).tolist() == [3.0] * 3
    assert fetch_shard(read).result(timeout=T).tolist() == [20.0] * 3
    assert fetch_shard(t, gpu=1).result(timeout=T).tolist() == [3.0] * 3


def test_with_borrow_drops_it_at_the_end_of_the_block(mesh):
    other = Stream("other")
    with mesh.activate():
        t = torch.zeros(2)
        b, lease = other.borrow(t, mutable=True)
        with lease:
            with other.activate():
                _sleep(0.3)
                b.add_(7)
        assert lease.dropped
        after = t + 0
        lease.drop()  # again: nothing
    assert fetch_shard(after, gpu=1).result(timeout=T).tolist() == [7.0, 7.0]


def test_a_borrow_garbage_before_its_drop_warns_and_drops(mesh):
    other = Stream("other")
    with mesh.activate():
        t = torch.zeros(2)
        b, lease = other.borrow(t, mutable=True)
        with other.activate():
            b.add_(2)
        with pytest.warns(UserWarning, match="before borrow.drop"):
            del lease
            gc.collect()
        with pytest.raises(BorrowError, match="dropped"):
            b + 1
        after = t + 1
    assert fetch_shard(after).result(timeout=T).tolist() == [3.0, 3.0]


def test_borrow_takes_a_distributed_tensor(mesh):
    with pytest.raises(TypeError, match="distributed tensor"):
        Stream("other").borrow(torch.zeros(2))
    assert monarch.Stream is Stream


def _stored(mesh):
    """Tensors stored on each worker once every stream ran what was issued
    (a delete runs when the last stream reaches it)."""
    from monarch._src.tensor.controller import controller_for

    ctl = controller_for(mesh)
    for stream in sorted(ctl._streams):
        ctl.sync(stream, timeout=T)
    return [s["stored"] for s in ctl.workers.stats.call().get(timeout=T).values()]


def test_drop_frees_a_tensor_and_its_views_on_the_workers_now(mesh):
    with mesh.activate():
        keep = torch.ones(2)
        t = torch.arange(4.0)
        v = t[1:]
        w = v.view(3, 1)
        before = _stored(mesh)
        assert not t.dropped
        t.drop()
        assert t.dropped and v.dropped and w.dropped and not keep.dropped
        with pytest.raises(BorrowError, match="dropped"):
            w + 1
        with pytest.raises(BorrowError, match="dropped"):
            fetch_shard(t)
        t.drop()  # again: nothing
        after_op = keep + 1
    # t, v and w are gone on every worker while the controller still holds
    # them (after_op is new).
    after = _stored(mesh)
    assert all(a <= b - 3 + 1 for b, a in zip(before, after)), (before, after)
    assert fetch_shard(after_op).result(timeout=T).tolist() == [2.0, 2.0]
    assert t.shape == (4,)


def test_a_tensor_dropped_while_lent_stays_dropped_after_the_borrow_ends(mesh):
    with mesh.activate():
        t = torch.ones(2)
        b, lease = Stream("other").borrow(t)
        t.drop()
        lease.drop()
        del b, lease  # no other restricted memory left to keep the checks on
        gc.collect()
        with pytest.raises(BorrowError, match="dropped"):
            t + 1
