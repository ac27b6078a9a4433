"""Distributed tensors at the controller and the interception of torch calls.

A ``DTensor`` is a ``torch.Tensor`` subclass with no data: its shape,
strides, dtype and requires-grad flag describe the shard that every worker
of its mesh holds under the same id. Under ``mesh.activate()`` a
``TorchFunctionMode`` routes every torch call here (factories included);
outside, ``DTensor.__torch_function__`` does for calls that involve one.

Each call is first run on meta tensors of the same metadata, at the
controller: a shape or dtype error is raised there, when the op is issued,
and the result's metadata gives the result tensors. Then the call is
issued to the workers (``MeshController.issue``) without waiting. A call
whose result holds no tensor (``t.shape``, ``t.dim()``) is answered from
the meta result and not sent; one that returns ``None`` (``t[0] = 1``,
``p.grad = None``) is sent for its effect.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..actor.shape import DimensionError
from . import borrow, coalescing, worker
from .collective import REDUCTIONS
from .controller import MeshController, controller_for
from .store import Local, Ref, local_shard
from .stream import Stream, get_active_stream
from .tree import children, is_leaf_type, tree_flatten, tree_map, tree_unflatten

_local = threading.local()
_META = torch.device("meta")
_TensorBase = torch._C.TensorBase

# Calls answered at the controller with the DTensor's own text.
_REPR = {torch.Tensor.__repr__, torch.Tensor.__str__, torch.Tensor.__format__}
# Calls that need a value at the controller.
_VALUE = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.numpy,
    torch.Tensor.__bool__,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__index__,
}


def _grad_of(t: torch.Tensor) -> torch.Tensor:
    if t.grad is None:
        raise RuntimeError("this tensor has no gradient on the worker (no backward reached it)")
    return t.grad


def _backward(t: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    t.backward(*args, **kwargs)


class DTensor(torch.Tensor):
    """A tensor with one shard on every proc of its mesh."""

    _ctl: MeshController
    _id: int
    _stream: Any
    _rg: bool
    # The access rights of its memory (``borrow.Storage``), shared with its
    # views; None until it is lent, borrowed or viewed.
    _storage: Any = None

    @staticmethod
    def __new__(cls, ctl: MeshController, id: int, desc: tuple, stream: Any) -> DTensor:
        size, stride, dtype, rg = desc
        t = torch.Tensor._make_wrapper_subclass(cls, size, strides=stride, dtype=dtype, device=_META)
        t._ctl = ctl
        t._id = id
        t._stream = stream
        t._rg = rg
        ctl.track(t, id)
        return t

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return dispatch(func, args, kwargs or {}, None)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Every call is taken at the torch-function level; reaching the
        # dispatcher means something bypassed it.
        raise RuntimeError(f"{func} reached a distributed tensor below __torch_function__")

    def _meta(self) -> torch.Tensor:
        with torch._C.DisableTorchFunction():
            m = torch.empty_strided(self.size(), self.stride(), dtype=self.dtype, device="meta")
        if self._rg:
            m.requires_grad_(True)
        return m

    def __repr__(self, *args: Any, **kwargs: Any) -> str:
        with torch._C.DisableTorchFunctionSubclass():
            shape = tuple(self.shape)
        return (
            f"DTensor(id={self._id}, shape={shape}, dtype={self.dtype}, "
            f"mesh={self._ctl.extent}, stream={self._stream!r})"
        )

    @property
    def mesh(self) -> Any:
        """The proc mesh that holds the shards."""
        return self._ctl.procs

    @property
    def stream(self) -> Any:
        """The stream that computes this tensor."""
        return Stream(self._stream) if isinstance(self._stream, str) else self._stream

    def to_mesh(self, mesh: Any, stream: Any = None) -> DTensor:
        """This tensor on the proc mesh ``mesh``: each proc receives the
        shard of the proc at the same coordinates (dims match by name and
        size; a dim only ``mesh`` has receives copies)."""
        return to_mesh(self, mesh, stream)

    def _lend_to(self, stream: Any, mutable: bool) -> tuple[Any, Any]:
        """``stream.borrow(self, mutable)`` (see ``Stream.borrow``)."""
        return borrow.borrow(stream, self, mutable)

    def drop(self) -> None:
        """Free this tensor and every view of its memory on the workers now
        (with the next batch, after the ops issued before); using any of
        them afterwards raises ``BorrowError``."""
        borrow.drop(self)

    @property
    def dropped(self) -> bool:
        """Whether ``drop()`` (of it, a tensor sharing its memory, or its
        borrow) made it unusable."""
        return self._storage is not None and self._storage.dropped_at is not None

    def slice_mesh(self, **dims: int | slice) -> MeshSliceTensor:
        """The shards of part of the mesh (``dim=i`` fixes dimension ``dim``
        at ``i`` and removes it, ``dim=slice(...)`` narrows it), to move
        with ``.to_mesh(...)``."""
        return MeshSliceTensor(self, dims)

    def __reduce_ex__(self, protocol: int) -> Any:
        # Sent to an actor: once the workers made it, it arrives as the
        # receiving proc's shard.
        if borrow.restricted:
            borrow.check("sending a distributed tensor to an actor", (self,))
        self._ctl.sync(self._stream)
        return (local_shard, (self._id,))

    # ------------------------------------------------------------ collectives
    def reduce(
        self,
        dims,
        reduction: str = "sum",
        scatter: bool = False,
        mesh: Any = None,
        _inplace: bool = False,
        out: DTensor | None = None,
    ):
        """Reduce across the mesh dimensions ``dims`` (a name or names; none:
        every dim): ``reduction`` is ``"sum"``, ``"avg"``, ``"max"``,
        ``"min"``, ``"product"``, for integer and bool tensors ``"band"``,
        ``"bor"``, ``"bxor"``, or ``"stack"`` (one dim of size n: every
        member's tensor stacked in a new dim 0 of size n; with
        ``scatter=True``, the all-to-all: member i gets row i of every
        member's tensor, stacked). Every proc gets the reduced value of its
        group (the procs that differ only in ``dims``); with
        ``scatter=True`` (one dim of size n, a tensor of n rows) member i
        gets row i of it.
        ``out``: a distributed tensor of the result's shape and dtype that
        receives the result (and is returned). ``mesh``: the result on that
        proc mesh instead (dims not reduced match by name and size; a
        reduced dim it has receives copies), e.g. ``mesh.slice(gpu=0)``."""
        return reduce(self, dims, reduction, scatter, _inplace, out, mesh)

    def reduce_(self, dims, reduction: str = "sum", scatter: bool = False, mesh: Any = None):
        """``reduce`` in place: this tensor holds the result."""
        return reduce(self, dims, reduction, scatter, True, None, mesh)


def _meta_of(x: Any, metas: dict) -> Any:
    if isinstance(x, DTensor):
        m = metas.get(x._id)
        if m is None:
            m = metas[x._id] = (x._meta(), x)
        return m[0]
    if isinstance(x, torch.Tensor):
        with torch._C.DisableTorchFunction():
            return x.to("meta")
    return x


def controller_of(args: Any, kwargs: Any, default: MeshController | None) -> MeshController | None:
    scan = _Scan(default)
    scan.walk((args, kwargs))
    return scan.ctl


def _desc(m: torch.Tensor) -> tuple:
    return (tuple(m.shape), m.stride(), m.dtype, bool(m.requires_grad))


class _Scan:
    """One walk over a call's arguments: the mesh they run on, the
    distributed tensor arguments (each once, in argument order), the call's
    signature (the structure, the metadata of distributed tensors and the
    other values) and its wire form (distributed tensors as ``Ref``)."""

    __slots__ = ("ctl", "dts", "sig", "local")

    def __init__(self, ctl: MeshController | None) -> None:
        self.ctl = ctl
        self.dts: dict[int, DTensor] = {}
        self.sig: list | None = []
        self.local = False  # controller-local tensors among the arguments

    def walk(self, x: Any) -> Any:
        t = type(x)
        if t is DTensor:
            return self._dtensor(x)
        sig = self.sig
        if t is tuple or t is list:
            if sig is not None:
                sig.append((t, len(x)))
            out = [self.walk(v) for v in x]
            return tuple(out) if t is tuple else out
        if t is dict:
            if sig is not None:
                sig.append((dict, tuple(x)))
            return {k: self.walk(v) for k, v in x.items()}
        if isinstance(x, DTensor):
            return self._dtensor(x)
        if isinstance(x, torch.Tensor):
            self.local = True
            self.sig = None  # calls with local tensors are not cached
            return x
        if is_leaf_type(t):
            if sig is not None:
                sig.append((t, x))
            return x
        kids, ctx, unflatten = children(x)
        if sig is not None:
            sig.append((t, ctx))
        return unflatten([self.walk(v) for v in kids], ctx)

    def _dtensor(self, x: DTensor) -> Ref:
        c = x._ctl
        if self.ctl is None:
            self.ctl = c
        elif c is not self.ctl:
            raise ValueError("an op mixes distributed tensors of different meshes; move them with to_mesh() first")
        self.dts.setdefault(x._id, x)
        if self.sig is not None:
            self.sig.append((DTensor, x.shape, x.stride(), x.dtype, x._rg))
        return Ref(x._id)


def _wire_local(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        with torch._C.DisableTorchFunction():
            return Local(pickle.dumps(x, protocol=4))
    return x


def to_wire(x: Any) -> Any:
    """``x`` as sent to the workers: distributed tensors as ``Ref``,
    controller-local tensors pickled now (``Local``)."""
    scan = _Scan(None)
    wire = scan.walk(x)
    return tree_map(_wire_local, wire) if scan.local else wire


def issue_call(ctl: MeshController, func: Any, args: Any, kwargs: Any, meta_result: Any, metas: dict) -> Any:
    """Send ``func(*args, **kwargs)`` to the workers; the result's tensors
    (as in ``meta_result``) become DTensors, except ones that are an
    argument (an in-place op's result is its argument)."""
    scan = _Scan(ctl)
    wire = scan.walk((args, kwargs))
    return _issue(ctl, func, scan, wire, *plan(meta_result, metas), torch.is_grad_enabled())


def plan(meta_result: Any, metas: dict, views: bool = True) -> tuple:
    """What a call returns, from its meta result: ``(spec, leaves,
    written)``, each leaf ``("alias", i)`` (the i-th distributed tensor
    argument), ``("new", desc, j)`` (``j``: the argument whose memory it
    views, or None) or ``("value", v)``; ``written``: the arguments the
    call writes (their meta tensors' version went up)."""
    leaves, spec = tree_flatten(meta_result)
    aliases = {id(m): i for i, (m, _) in enumerate(metas.values())}
    storages = {}
    if views:
        for i, (m, _) in enumerate(metas.values()):
            storages.setdefault(m.untyped_storage()._cdata, i)
    out = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            i = aliases.get(id(leaf))
            if i is None:
                view = storages.get(leaf.untyped_storage()._cdata) if storages else None
                out.append(("new", _desc(leaf), view))
            else:
                out.append(("alias", i, bool(leaf.requires_grad)))
        else:
            out.append(("value", leaf))
    written = tuple(i for i, (m, _) in enumerate(metas.values()) if m._version)
    return spec, out, written


def _issue(
    ctl: MeshController, func: Any, scan: _Scan, wire: tuple, spec: Any, leaves: list, written: tuple, grad: bool
) -> Any:
    stream = get_active_stream().name
    dts = None
    if borrow.restricted:
        dts = list(scan.dts.values())
        borrow.check(getattr(func, "__name__", str(func)), dts, [dts[i] for i in written])
    out_ids, new = [], []
    for leaf in leaves:
        kind = leaf[0]
        if kind == "new":
            i = ctl.new_id()
            out_ids.append(i)
            t = DTensor(ctl, i, leaf[1], stream)
            if leaf[2] is not None:
                # A view: it shares the access rights of the memory it views.
                if dts is None:
                    dts = list(scan.dts.values())
                borrow.share(t, dts[leaf[2]])
            new.append(t)
        elif kind == "alias":
            if dts is None:
                dts = list(scan.dts.values())
            dt = dts[leaf[1]]
            dt._rg = leaf[2]
            out_ids.append(None)
            new.append(dt)
        else:
            out_ids.append(None)
            new.append(leaf[1])
    if scan.local:
        wire = tree_map(_wire_local, wire)
    key, blob = ctl.func_ref(func)
    ctl.issue(("op", stream, key, blob, wire[0], wire[1], out_ids, grad))
    if spec is None:
        return new[0]
    return tree_unflatten(new, spec)


# Plans of calls by their signature (the function, the grad mode, the
# ``_Scan`` signature of the arguments): a call seen before skips the meta
# computation.
_PLANS: dict = {}
_PLANS_MAX = 8192


def dispatch(func: Any, args: tuple, kwargs: dict, active: MeshController | None) -> Any:
    scan = _Scan(active)
    wire = scan.walk((args, kwargs))
    ctl = scan.ctl
    if ctl is None:
        return func(*args, **kwargs)
    if func in _REPR:
        return DTensor.__repr__(args[0])
    if func in _VALUE:
        raise RuntimeError(
            f"{getattr(func, '__name__', func)} needs the value of a distributed tensor; "
            "use monarch.fetch_shard(t).result() or monarch.inspect(t)"
        )
    grad = torch.is_grad_enabled()
    metas: dict = {}
    if getattr(func, "__self__", None) is _TensorBase.grad and func.__name__ == "__get__":
        meta = _meta_of(args[0], metas).detach()
        return _issue(ctl, _grad_of, scan, wire, *plan(meta, metas, views=False), grad)
    if func is torch.Tensor.backward:
        return _issue(ctl, _backward, scan, wire, *plan(None, metas), grad)
    sig = None
    if scan.sig is not None:
        sig = (func, grad, tuple(scan.sig))
        try:
            hit = _PLANS.get(sig)
        except TypeError:  # an unhashable argument: not cached
            sig = hit = None
        if hit is not None:
            return _issue(ctl, func, scan, wire, hit[0], hit[1], hit[2], grad)
    meta_args = tree_map(lambda x: _meta_of(x, metas), args)
    meta_kwargs = tree_map(lambda x: _meta_of(x, metas), kwargs)
    if not metas and not scan.local:
        # A factory (torch.rand(3, 4)) makes a distributed tensor; a call
        # without tensors that takes no device (torch.set_grad_enabled) is
        # controller state and runs here.
        try:
            result = func(*meta_args, **dict(meta_kwargs, device="meta"))
        except TypeError as e:
            if "device" not in str(e):
                raise
            return func(*args, **kwargs)
    else:
        result = func(*meta_args, **meta_kwargs)
    if result is not None and not any(isinstance(x, torch.Tensor) for x in tree_flatten(result)[0]):
        return result  # metadata (shape, dtype, dim, ...): nothing to run
    spec, leaves, written = plan(result, metas)
    if sig is not None and len(_PLANS) < _PLANS_MAX:
        _PLANS[sig] = (spec, leaves, written)
    return _issue(ctl, func, scan, wire, spec, leaves, written, grad)


class _MeshMode(TorchFunctionMode):
    def __init__(self, ctl: MeshController) -> None:
        super().__init__()
        self.ctl = ctl

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(_local, "no_mesh", 0):
            return func(*args, **kwargs)
        with torch._C.DisableTorchFunctionSubclass():
            return dispatch(func, args, kwargs, self.ctl)


@contextlib.contextmanager
def activate(ctl: MeshController) -> Iterator[None]:
    """Torch calls in the block run on the mesh of ``ctl``."""
    with _MeshMode(ctl):
        try:
            yield
        finally:
            if not coalescing.holds(ctl):
                ctl.flush()


@contextlib.contextmanager
def _no_mesh_block() -> Iterator[None]:
    _local.no_mesh = getattr(_local, "no_mesh", 0) + 1
    try:
        yield
    finally:
        _local.no_mesh -= 1


class _NoMesh:
    """``with monarch.no_mesh.activate():`` torch calls in the block run
    locally, even under ``mesh.activate()`` (ops on distributed tensors
    still run on their mesh). ``no_mesh()`` is the same block."""

    def activate(self) -> contextlib.AbstractContextManager:
        return _no_mesh_block()

    __call__ = activate

    def __repr__(self) -> str:
        return "monarch.no_mesh"


no_mesh = _NoMesh()


def active_controller() -> MeshController | None:
    """The controller of the mesh of the innermost ``mesh.activate()``
    (None outside, or under ``no_mesh``)."""
    if getattr(_local, "no_mesh", 0):
        return None
    mode = torch.overrides._get_current_function_mode()
    return getattr(mode, "ctl", None)


def reduce(
    t: DTensor,
    dims: Any,
    reduction: str,
    scatter: bool,
    inplace: bool,
    out: DTensor | None = None,
    mesh: Any = None,
) -> DTensor:
    if not isinstance(t, DTensor):
        raise TypeError(f"reduce() takes a distributed tensor, not {type(t).__name__}")
    ctl = t._ctl
    dims = (dims,) if isinstance(dims, str) else tuple(dims)
    if not dims:
        dims = tuple(ctl.extent)
    for d in dims:
        if d not in ctl.extent:
            raise DimensionError(f"reduce over {d!r}: the mesh has dimensions {', '.join(ctl.extent)}")
    if len(set(dims)) != len(dims):
        raise ValueError(f"reduce() over the same dimension twice: {dims}")
    if reduction not in REDUCTIONS + ("stack",):
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS + ('stack',))}, not {reduction!r}")
    if mesh is not None and controller_for(mesh) is ctl:
        mesh = None
    meta = t._meta().detach()
    if reduction in ("band", "bor", "bxor") and meta.dtype.is_floating_point:
        raise TypeError(f"reduce({reduction!r}) takes integer or bool tensors, not {meta.dtype}")
    if reduction == "avg" and meta.dtype == torch.bool:
        raise TypeError("reduce('avg') of a bool tensor is not defined")
    n = 1
    for d in dims:
        n *= ctl.extent[d]
    if reduction == "stack" and len(dims) > 1:
        raise ValueError(f"reduce('stack') takes one dimension, not {dims}")
    if scatter:
        # As upstream: member i of the group gets row i of the result (for
        # "stack": row i of every member's tensor, stacked).
        if len(dims) > 1:
            raise ValueError(f"reduce(scatter=True) takes one dimension, not {dims}")
        if meta.dim() == 0 or meta.shape[0] != n:
            raise TypeError(
                f"reduce(scatter=True): dim 0 of the tensor's shape {tuple(meta.shape)} must be the "
                f"size of {dims[0]!r} ({n}); member i gets row i of the result"
            )
        if reduction != "stack":
            meta = meta.new_empty(tuple(meta.shape[1:]))
            if inplace:
                raise ValueError("reduce_(scatter=True) cannot be in place: the result is smaller")
    elif reduction == "stack":
        meta = meta.new_empty((n, *meta.shape))
        if inplace:
            raise ValueError("reduce_('stack') cannot be in place: the result is larger (a new dim 0)")
    if inplace and mesh is not None:
        raise ValueError("reduce_(mesh=...) cannot be in place: the result is on another mesh")
    if out is not None:
        if inplace:
            raise ValueError("reduce_() takes no out=: the tensor itself receives the result")
        if mesh is not None:
            raise ValueError("reduce(out=..., mesh=...): give one of them (out= must be on the tensor's mesh)")
        if not isinstance(out, DTensor):
            raise TypeError(f"reduce(out=...) takes a distributed tensor, not {type(out).__name__}")
        if out._ctl is not ctl:
            raise ValueError("reduce(out=...): out is on another mesh than the tensor")
        want = (tuple(meta.shape), meta.dtype)
        with torch._C.DisableTorchFunctionSubclass():
            got = (tuple(out.shape), out.dtype)
        if got != want:
            raise ValueError(f"reduce(out=...): out has shape and dtype {got}, the result has {want}")
    if borrow.restricted:
        written = (t,) if inplace else (() if out is None else (out,))
        borrow.check("reduce()", (t,), written)
    stream = get_active_stream().name
    if inplace:
        dest = t._id
    elif out is not None:
        dest = out._id
    else:
        dest = ctl.new_id()
    into = out is not None
    ctl.issue(("reduce", stream, t._id, dest, dims, reduction, scatter, inplace, ctl.next_seq(), into))
    if inplace:
        return t
    if out is not None:
        return out
    r = DTensor(ctl, dest, _desc(meta), stream)
    if mesh is None:
        return r
    # Every member holds the result; the members at coordinate 0 of the
    # reduced dims send it (a scattered result differs per member: each
    # sends its own).
    part = MeshSliceTensor(r, {}) if scatter else MeshSliceTensor(r, {d: 0 for d in dims})
    return part.to_mesh(mesh, Stream(stream))


def rank(ctl: MeshController, dims: Any) -> DTensor:
    dims = (dims,) if isinstance(dims, str) else tuple(dims)
    for d in dims:
        if d not in ctl.extent:
            raise KeyError(f"the mesh has no dimension {d!r} (it has {', '.join(ctl.extent)})")
    meta = torch.empty((), dtype=torch.int64, device="meta")
    return issue_call(ctl, worker.rank_tensor, (dims,), {}, meta, {})


# ``to_mesh``: the worker at each coordinate of the tensor's mesh (or of the
# part of it chosen by ``slice_mesh``) sends its shard to the worker(s) at
# the same coordinates of the destination mesh; dimensions match by name and
# size, and a dimension only the destination has receives copies (a
# broadcast).
_transfers = itertools.count(1)


def _selection(extent: dict[str, int], dims: dict) -> dict:
    """``slice_mesh(**dims)`` as sent to the workers: per sliced dim, the
    index it is fixed at (an int: the dim is gone), or ``(start, step,
    length)`` of the indices it keeps."""
    sel: dict = {}
    for d, v in dims.items():
        if d not in extent:
            raise DimensionError(f"slice_mesh({d}=...): the mesh has dimensions {', '.join(extent)}")
        n = extent[d]
        if isinstance(v, bool) or not isinstance(v, (int, slice)):
            raise TypeError(f"slice_mesh({d}=...) takes an int or a slice, not {type(v).__name__}")
        if isinstance(v, int):
            if not 0 <= v < n:
                raise IndexError(f"slice_mesh({d}={v}): out of range for a dimension of size {n}")
            sel[d] = v
        else:
            if v.step is not None and v.step <= 0:
                raise ValueError(f"slice_mesh({d}={v}): the step must be positive")
            r = range(n)[v]
            if not r:
                raise ValueError(f"slice_mesh({d}={v}): no index of a dimension of size {n}")
            sel[d] = (r.start, r.step, len(r))
    return sel


class MeshSliceTensor:
    """The shards of a distributed tensor on part of its mesh
    (``t.slice_mesh(gpu=0)``): ``.to_mesh(mesh)`` moves them, as
    ``DTensor.to_mesh`` moves every shard; ``fetch_shard`` takes
    coordinates within the part."""

    def __init__(self, tensor: DTensor, dims: dict) -> None:
        if not isinstance(tensor, DTensor):
            raise TypeError(f"slice_mesh() takes a distributed tensor, not {type(tensor).__name__}")
        self.tensor = tensor
        self.selection = _selection(tensor._ctl.extent, dims)
        extent = {}
        for d, n in tensor._ctl.extent.items():
            s = self.selection.get(d)
            if s is None:
                extent[d] = n
            elif not isinstance(s, int):
                extent[d] = s[2]
        self.extent = extent

    def coords(self, coords: dict[str, int]) -> dict[str, int]:
        """Coordinates in the part as coordinates in the tensor's mesh."""
        unknown = set(coords) - set(self.extent)
        if unknown:
            raise ValueError(
                f"the mesh slice has no dimension {', '.join(sorted(unknown))} (it has {', '.join(self.extent)})"
            )
        full = {}
        for d in self.tensor._ctl.extent:
            s = self.selection.get(d)
            c = int(coords.get(d, 0))
            if s is not None and not isinstance(s, int) and not 0 <= c < s[2]:
                raise IndexError(f"{d}={c} is out of range for a mesh slice of size {s[2]} in {d!r}")
            full[d] = c if s is None else s if isinstance(s, int) else s[0] + s[1] * c
        return full

    def to_mesh(self, mesh: Any, stream: Stream | None = None) -> DTensor:
        return to_mesh(self.tensor, mesh, stream, self)

    def __repr__(self) -> str:
        return f"MeshSliceTensor({self.tensor!r}, {self.extent})"


def to_mesh(t: DTensor, mesh: Any, stream: Stream | None = None, part: MeshSliceTensor | None = None) -> DTensor:
    """``t`` (or the ``part`` of it, from ``slice_mesh``) on the proc mesh
    ``mesh`` (on ``stream``, default: ``t``'s)."""
    if not isinstance(t, DTensor):
        raise TypeError(f"to_mesh() moves a distributed tensor, not {type(t).__name__}")
    src = t._ctl
    have = src.extent if part is None else part.extent
    extent = dict(mesh.sizes)
    missing = [k for k in have if k not in extent]
    if missing:
        raise ValueError(
            f"to_mesh(): the destination mesh {extent} does not have dimension(s) "
            f"{', '.join(missing)} of the tensor's mesh {have}"
        )
    for k, n in have.items():
        if extent[k] != n:
            raise ValueError(
                f"to_mesh(): dimension {k!r} has size {extent[k]} in the destination mesh "
                f"and {n} in the tensor's mesh ({extent} vs {have})"
            )
    if t._rg:
        raise ValueError("to_mesh() of a tensor that requires grad: detach() it first")
    if borrow.restricted:
        borrow.check("to_mesh()", (t,))
    sel = None if part is None else part.selection
    dst = controller_for(mesh)
    stream_name = t._stream if stream is None else stream.name
    tag = ("to_mesh", next(_transfers))
    out = dst.new_id()
    src.issue(("send", t._stream, t._id, tag, dst.ports, dict(dst.extent), sel))
    # The receivers wait for the senders: send now, whatever the
    # destination does next.
    src.flush()
    dst.issue(("recv", stream_name, out, tag, src.workers, src.name, dict(src.extent), sel))
    return DTensor(dst, out, _desc(t._meta().detach()), stream_name)


def to_mesh_tree(tensors: Any, mesh: Any, stream: Stream | None = None) -> Any:
    """``monarch.to_mesh``: every distributed tensor (or mesh slice of one)
    of a pytree moved."""

    def move(x: Any) -> Any:
        if isinstance(x, DTensor):
            return to_mesh(x, mesh, stream)
        if isinstance(x, MeshSliceTensor):
            return x.to_mesh(mesh, stream)
        return x

    return tree_map(move, tensors)
