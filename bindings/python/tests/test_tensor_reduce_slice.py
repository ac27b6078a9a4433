"""reduce(out=..., mesh=...), its upstream signature (dims, reduction,
scatter, mesh, _inplace, out; monarch.reduce / reduce_ over pytrees) and
slice_mesh (to_mesh of part of a mesh, fetch_shard within the part), on
real procs."""

import pytest

torch = pytest.importorskip("torch")

import monarch  # noqa: E402
from monarch import fetch_shard, slice_mesh  # noqa: E402
from monarch.actor import this_host  # noqa: E402

T = 120  # seconds: every wait is bounded


@pytest.fixture(scope="module")
def mesh():
    pm = this_host().spawn_procs(per_host={"gpu": 4})
    yield pm
    pm.stop().get(timeout=30)


@pytest.fixture(scope="module")
def grid():
    pm = this_host().spawn_procs(per_host={"host": 2, "gpu": 2})
    yield pm
    pm.stop().get(timeout=30)


def value(t, **at):
    return fetch_shard(t, **at).result(timeout=T).tolist()


def test_reduce_out_writes_into_out_and_returns_it(mesh):
    with mesh.activate():
        r = mesh.rank("gpu").float() + torch.zeros(3)
        out = torch.full((3,), -1.0)
        view = out[1:]  # sees the result too: out is written, not replaced
        got = r.reduce("gpu", "sum", out=out)
        assert got is out
        scattered = torch.zeros(2)
        r2 = (mesh.rank("gpu").float() + torch.arange(8.0)).reshape(4, 2)
        assert r2.reduce("gpu", "max", scatter=True, out=scattered) is scattered
    for g in range(4):
        assert value(out, gpu=g) == [6.0] * 3
        assert value(view, gpu=g) == [6.0] * 2
        assert value(scattered, gpu=g) == [3.0 + 2 * g, 4.0 + 2 * g]


def test_reduce_out_errors(mesh):
    with mesh.activate():
        t = torch.zeros(3)
        with pytest.raises(ValueError, match="shape and dtype"):
            t.reduce("gpu", out=torch.zeros(4))
        with pytest.raises(ValueError, match="shape and dtype"):
            t.reduce("gpu", out=torch.zeros(3, dtype=torch.int64))
        with pytest.raises(ValueError, match="out="):
            t.reduce("gpu", _inplace=True, out=torch.zeros(3))
    with pytest.raises(TypeError, match="distributed tensor"):
        t.reduce("gpu", out=torch.zeros(3))  # a local tensor


def test_reduce_out_on_another_mesh_is_refused(mesh, grid):
    with mesh.activate():
        t = torch.zeros(3)
    with grid.activate():
        o = torch.zeros(3)
    with pytest.raises(ValueError, match="another mesh"):
        t.reduce("gpu", out=o)


def test_reduce_to_a_slice_of_the_mesh(mesh):
    with mesh.activate():
        r = mesh.rank("gpu").float() + torch.zeros(2)
        first = mesh.slice(gpu=0)
        s = r.reduce("gpu", "sum", mesh=first)
        a = monarch.reduce({"x": r}, "gpu", "avg", mesh=first)["x"]
    assert s.mesh is first and a.mesh is first
    assert dict(s.mesh.sizes) == {}
    assert value(s) == [6.0, 6.0]
    assert value(a) == [1.5, 1.5]


def test_reduce_to_another_mesh_over_one_dim_of_a_2d_mesh(grid):
    with grid.activate():
        v = grid.rank("host").float() * 10 + grid.rank("gpu").float()
        by_gpu = v.reduce("gpu", "sum", mesh=grid.slice(gpu=0))  # one proc per host
        by_host = v.reduce("host", "sum", mesh=grid.slice(host=1))  # on the second host's procs
        # A reduced dim the destination has: every proc of it gets the value.
        back = v.reduce("gpu", "sum", mesh=grid.slice(host=slice(0, 2)))
        with pytest.raises(ValueError, match="does not have dimension"):
            v.reduce("gpu", "sum", mesh=grid.slice(host=0))  # "host" was not reduced
        with pytest.raises(ValueError, match="in place"):
            v.reduce_("gpu", "sum", mesh=grid.slice(gpu=0))
    assert dict(by_gpu.mesh.sizes) == {"host": 2}
    assert [value(by_gpu, host=h) for h in range(2)] == [1.0, 21.0]
    assert [value(by_host, gpu=g) for g in range(2)] == [10.0, 12.0]
    assert [[value(back, host=h, gpu=g) for g in range(2)] for h in range(2)] == [[1.0, 1.0], [21.0, 21.0]]


def test_reduce_dims_as_upstream(grid):
    with grid.activate():
        v = grid.rank("host").float() * 10 + grid.rank("gpu").float()
        every = v.reduce(())  # no dims: all of them
        both = monarch.reduce_(v.clone(), ("host", "gpu"), "max")
        with pytest.raises(KeyError):
            v.reduce("nope")
        with pytest.raises(ValueError, match="dimensions"):
            v.reduce("nope")  # also a ValueError, as before
        with pytest.raises(ValueError, match="twice"):
            v.reduce(("gpu", "gpu"))
        with pytest.raises(ValueError, match="reduction must be"):
            v.reduce("gpu", "median")
        with pytest.raises(ValueError, match="one dimension"):
            v.reduce(("host", "gpu"), scatter=True)
        # scatter over "gpu" (size 2): dim 0 must be 2, each member gets its row.
        rows = (v + torch.zeros(2, 3)).reduce("gpu", "sum", scatter=True)
        assert rows.shape == (3,)
        with pytest.raises(TypeError, match="must be the size"):
            (v + torch.zeros(4, 3)).reduce("gpu", scatter=True)
    assert value(every, host=1, gpu=1) == 22.0
    assert value(rows, host=1, gpu=0) == [21.0] * 3
    assert value(both, host=0, gpu=1) == 11.0


def test_slice_mesh_fetch_and_to_mesh(mesh):
    with mesh.activate():
        r = mesh.rank("gpu").float() + torch.zeros(2)
        part = r.slice_mesh(gpu=slice(1, 4, 2))  # procs 1 and 3
        assert part.extent == {"gpu": 2}
        moved = part.to_mesh(mesh.slice(gpu=slice(0, 2)))
        everywhere = r.slice_mesh(gpu=2).to_mesh(mesh)  # a broadcast from proc 2
        tree = slice_mesh({"a": r, "n": 3}, gpu=3)
        moved_tree = monarch.to_mesh(tree, mesh.slice(gpu=slice(0, 1)))
    assert value(part, gpu=0) == [1.0, 1.0] and value(part, gpu=1) == [3.0, 3.0]
    assert [value(moved, gpu=g) for g in range(2)] == [[1.0, 1.0], [3.0, 3.0]]
    assert [value(everywhere, gpu=g) for g in range(4)] == [[2.0, 2.0]] * 4
    assert tree["n"] == 3 and moved_tree["n"] == 3
    assert value(moved_tree["a"]) == [3.0, 3.0]
    with pytest.raises(IndexError):
        fetch_shard(part, gpu=2)


def test_slice_mesh_of_a_2d_mesh_to_another_slice(grid):
    with grid.activate():
        v = grid.rank("host").float() * 10 + grid.rank("gpu").float()
        # The second host's row lands on the first host's procs.
        row = v.slice_mesh(host=1).to_mesh(grid.slice(host=0))
        col = slice_mesh(v, gpu=1)
    assert [value(row, gpu=g) for g in range(2)] == [10.0, 11.0]
    assert [value(col, host=h) for h in range(2)] == [1.0, 11.0]


def test_slice_mesh_errors(mesh):
    with mesh.activate():
        t = torch.zeros(2)
        with pytest.raises(KeyError):
            t.slice_mesh(host=0)
        with pytest.raises(IndexError):
            t.slice_mesh(gpu=4)
        with pytest.raises(ValueError, match="no index"):
            t.slice_mesh(gpu=slice(3, 1))
        with pytest.raises(ValueError, match="does not have dimension"):
            t.slice_mesh(gpu=slice(0, 2)).to_mesh(mesh.slice(gpu=0))
        with pytest.raises(ValueError, match="has size"):
            t.slice_mesh(gpu=slice(0, 2)).to_mesh(mesh)


def test_bitwise_reductions_and_the_types_they_take(mesh):
    with mesh.activate():
        bits = 1 << mesh.rank("gpu")  # 1, 2, 4, 8
        pairs = bits | 16  # 17, 18, 20, 24
        got = {op: pairs.reduce("gpu", op) for op in ("band", "bor", "bxor")}
        flags = mesh.rank("gpu") < 2  # True, True, False, False
        any_, all_, odd = flags.reduce("gpu", "bor"), flags.reduce("gpu", "band"), flags.reduce("gpu", "bxor")
        mixed = monarch.reduce({"p": pairs}, "gpu", "bor")
        # Refused when issued: bits of floats, the average of bools.
        with pytest.raises(TypeError, match="integer or bool"):
            torch.zeros(2).reduce("gpu", "band")
        with pytest.raises(TypeError, match="bool tensor is not defined"):
            flags.reduce("gpu", "avg")
        with pytest.raises(ValueError, match="reduction must be one of"):
            pairs.reduce("gpu", "bnot")
    for g in (0, 3):
        assert value(got["band"], gpu=g) == 16
        assert value(got["bor"], gpu=g) == 31
        assert value(got["bxor"], gpu=g) == 15  # 16 four times cancels out
        assert (value(any_, gpu=g), value(all_, gpu=g), value(odd, gpu=g)) == (True, False, False)
        assert value(mixed["p"], gpu=g) == 31


@pytest.mark.parametrize("rows", [3, 70_000], ids=["small", "large"])
def test_stack_gathers_and_scatter_exchanges_rows(mesh, rows):
    """"stack": the all-gather (every member gets every member's tensor in
    group order, a new dim 0) and, with scatter=True, the all-to-all
    (member i gets row i of every member's). Large: over 1 MiB, read from
    the peers' memory rather than sent in messages."""
    with mesh.activate():
        r = mesh.rank("gpu").float()
        t = r * 1000 + torch.arange(rows * 2.0).reshape(rows, 2)
        gathered = t.reduce("gpu", "stack")
        assert tuple(gathered.shape) == (4, rows, 2)
        table = (r * 10 + torch.arange(4.0)).reshape(4, 1) + torch.zeros(4, rows)  # row j: 10 g + j
        exchanged = table.reduce("gpu", "stack", scatter=True)
        assert tuple(exchanged.shape) == (4, rows)
        in_place = table.clone()
        assert in_place.reduce_("gpu", "stack", scatter=True) is in_place
        ints = (mesh.rank("gpu") + torch.zeros(2, dtype=torch.int64)).reduce("gpu", "stack")
    base = torch.arange(rows * 2.0).reshape(rows, 2)
    want = torch.stack([k * 1000 + base for k in range(4)])
    for g in (0, 3):
        assert torch.equal(fetch_shard(gathered, gpu=g).result(timeout=T), want)
        # Member g gets row g of every member k: 10 k + g, in member order.
        want_rows = torch.tensor([10.0 * k + g for k in range(4)]).reshape(4, 1).expand(4, rows)
        assert torch.equal(fetch_shard(exchanged, gpu=g).result(timeout=T), want_rows)
        assert torch.equal(fetch_shard(in_place, gpu=g).result(timeout=T), want_rows)
        assert value(ints, gpu=g) == [[0, 0], [1, 1], [2, 2], [3, 3]]


def test_stack_errors(mesh, grid):
    with grid.activate():
        with pytest.raises(ValueError, match="one dimension"):
            torch.zeros(2).reduce(("host", "gpu"), "stack")
    with mesh.activate():
        with pytest.raises(ValueError, match="cannot be in place"):
            torch.zeros(2).reduce_("gpu", "stack")
        with pytest.raises(TypeError, match="dim 0"):
            torch.zeros(3).reduce("gpu", "stack", scatter=True)
    # Shards that differ fail on every member (small and large), and the
    # mesh goes on.
    for n in (4, 300_000):
        make = monarch.remote(_longer_on_rank_one, propagate=lambda r, n: torch.empty(n))
        with mesh.activate():
            failed = make(mesh.rank("gpu"), n).reduce("gpu", "stack")
            ok = (torch.zeros(2) + mesh.rank("gpu").float()).reduce("gpu", "stack")
        for g in range(4):
            with pytest.raises(Exception, match="the shards must match"):
                fetch_shard(failed, gpu=g).result(timeout=T)
        assert value(ok, gpu=1) == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]


def _longer_on_rank_one(r, n):
    """On a worker: rank 1's shard is longer than the others'."""
    return torch.ones(n + (100 if int(r) == 1 else 0))


def test_reduce_to_a_separate_proc_mesh(mesh):
    other = this_host().spawn_procs(per_host={"gpu": 1})
    try:
        with mesh.activate():
            r = mesh.rank("gpu").float() + torch.ones(2)
            s = r.reduce("gpu", "sum", mesh=other)  # a reduced dim the destination has (size 1): a copy
        assert s.mesh is other
        assert value(s) == [10.0, 10.0]
    finally:
        other.stop().get(timeout=30)
