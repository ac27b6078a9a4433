"""``ValueMesh``, and the decoding of a completed call's replies into it.

A call's future completes with a ``monarch_value_mesh``: one answer per
point, each a list of payload parts (see ``pickle``) or an error. The
``convert_*`` functions read it into what the caller gets: a ValueMesh
(``call``), one value (``call_one``, ``choose``, a port's ``recv``), the
raw bytes of raw endpoints, or ``None``; failed points raise ActorError
(the actor raised) or SupervisionError (the runtime lost it).

A ``ctx`` names what was called for messages and shapes: ``(mesh,
endpoint_ref)`` for an endpoint call, else ``(shape getter, description)``.
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ..._lib import ActorError, SupervisionError, check, ffi, lib
from .pickle import HandleOwner, loads_parts
from .scratch import thread_scratch
from .shape import DimensionError, Extent, MeshIndexError, Point, Shape

T = TypeVar("T")

_buffer = ffi.buffer
_loads = pickle.loads
_new = ffi.new
_NULL = ffi.NULL
_vm_free = lib.monarch_value_mesh_free
_vm_len = lib.monarch_value_mesh_len
_vm_point = lib.monarch_value_mesh_point
_vm_part = lib.monarch_value_mesh_part
_vm_points = lib.monarch_value_mesh_points
_POINTS_T = ffi.typeof("monarch_point_info[]")
_POINT_SIZE = ffi.sizeof("monarch_point_info")
_SAME_OFF = ffi.offsetof("monarch_point_info", "same_as_first")
# A decoded answer of one of these types may be shared by every point that
# answered the same bytes (the values cannot be mutated).
_SHARED_TYPES = frozenset([type(None), bool, int, float, str, bytes])


class ValueMesh(Generic[T]):
    """The gathered replies of a call: one value per point of the mesh that
    was called, in row-major rank order."""

    __slots__ = ("_shape", "_values")

    def __init__(self, shape: Shape | Mapping[str, int], values: Iterable[T]) -> None:
        if isinstance(shape, Mapping):
            shape = Shape(shape.keys(), shape.values())
        self._shape = shape
        self._values = list(values)

    def items(self) -> Iterator[tuple[Point, T]]:
        """Iterate over ``(Point, value)`` pairs."""
        shape = self._shape
        for rank, v in enumerate(self._values):
            yield Point._make(rank, shape), v

    def values(self) -> Iterator[T]:
        return iter(self._values)

    def __iter__(self) -> Iterator[tuple[Point, T]]:
        return self.items()

    def __len__(self) -> int:
        return len(self._values)

    def get(self, rank: int) -> T:
        if not 0 <= rank < len(self._values):
            raise IndexError(f"rank {rank} is out of range for a ValueMesh of {len(self._values)} values")
        return self._values[rank]

    def item(self, **coords: int) -> T:
        """The value at the given coordinates (every dimension must be given;
        with no arguments, the only value of a mesh of size 1)."""
        shape = self._shape
        if not coords:
            if len(self._values) != 1:
                raise ValueError(f"item() needs coordinates for a ValueMesh of shape {shape}")
            return self._values[0]
        if set(coords) != set(shape.labels):
            raise KeyError(f"item() needs exactly the dimensions {list(shape.labels)}, got {list(coords)}")
        rank = 0
        for label, size, stride in zip(shape.labels, shape.sizes, shape.strides):
            i = coords[label]
            if not 0 <= i < size:
                raise IndexError(f"index {i} is out of range for dimension {label!r} of size {size}")
            rank += i * stride
        return self._values[rank]

    @property
    def extent(self) -> Extent:
        return Extent(self._shape.labels, self._shape.sizes)

    @property
    def sizes(self) -> dict[str, int]:
        return self._shape.extent()

    def size(self, dim: str | None = None) -> int:
        """Number of values, or the size of dimension ``dim``."""
        if dim is None:
            return len(self._values)
        try:
            return self._shape.extent()[dim]
        except KeyError:
            raise DimensionError(f"no dimension {dim!r} in ValueMesh of shape {self._shape}") from None

    # Views, as on a mesh: each gives a new ValueMesh over (a part of) the
    # same values, numbered row-major in its own shape.

    def slice(self, **dims: int | slice) -> ValueMesh[T]:
        """The values at ``dims``: ``dim=i`` fixes dimension ``dim`` at
        index ``i`` and removes it; ``dim=slice(start, stop, step)`` keeps it,
        narrowed (step > 0), as ``ActorMesh.slice``."""
        if not dims:
            raise ValueError("slice() needs at least one dimension")
        shape = self._shape
        extent = shape.extent()
        picks = []
        for label, size in extent.items():
            sel = dims.get(label)
            if sel is None:
                picks.append((label, range(size), True))
            elif isinstance(sel, bool) or not isinstance(sel, (int, slice)):
                raise TypeError(f"slice({label}=...) takes an int or a slice, not {type(sel).__name__}")
            elif isinstance(sel, int):
                if not 0 <= sel < size:
                    raise MeshIndexError(
                        f"index {sel} out of range for dimension {label!r} of size {size} (valid: 0..{size})"
                    )
                picks.append((label, range(sel, sel + 1), False))
            else:
                if sel.step is not None and sel.step <= 0:
                    raise ValueError(f"slice({label}=...) needs a positive step, not {sel.step}")
                picks.append((label, range(*sel.indices(size)), True))
        unknown = [k for k in dims if k not in extent]
        if unknown:
            raise DimensionError(f"no dimension {unknown[0]!r} in ValueMesh of shape {shape}")
        values = self._values
        strides = shape.strides
        ranks = (sum(i * st for i, st in zip(idx, strides)) for idx in itertools.product(*(r for _, r, _ in picks)))
        kept = [(label, len(r)) for label, r, keep in picks if keep]
        return ValueMesh(Shape([k for k, _ in kept], [n for _, n in kept]), [values[r] for r in ranks])

    def flatten(self, name: str) -> ValueMesh[T]:
        """The values as one dimension ``name`` (rank r stays rank r)."""
        if not isinstance(name, str):
            raise TypeError(f"flatten() takes a dimension name, not {type(name).__name__}")
        return ValueMesh(Shape([name], [len(self._values)]), self._values)

    def rename(self, **renames: str) -> ValueMesh[T]:
        """Dimensions renamed, all at once (``rename(gpus="tp")``)."""
        labels = self._shape.labels
        for k in renames:
            if k not in labels:
                raise DimensionError(f"no dimension {k!r} in ValueMesh of shape {self._shape}")
        return ValueMesh(Shape([renames.get(k, k) for k in labels], self._shape.sizes), self._values)

    def split(self, **kwargs: Sequence[str] | int) -> ValueMesh[T]:
        """Dimensions split in place, as ``ActorMesh.split``:
        ``split(gpus=("dp", "tp"), tp=2)`` (one size per split may be left
        out; it is inferred)."""
        extent = self._shape.extent()
        sizes = {k: v for k, v in kwargs.items() if k not in extent}
        labels, out_sizes = [], []
        for label, size in extent.items():
            names = kwargs.get(label)
            if names is None:
                labels.append(label)
                out_sizes.append(size)
                continue
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise ValueError(f"split({label}=...) takes a sequence of new dimension names, not {names!r}")
            known = [sizes.pop(n, None) for n in names]
            missing = [i for i, v in enumerate(known) if v is None]
            prod = 1
            for v in known:
                prod *= v or 1
            if len(missing) > 1 or (not missing and prod != size) or (missing and size % prod):
                raise ValueError(f"cannot split dimension {label!r} of size {size} into {dict(zip(names, known))}")
            if missing:
                known[missing[0]] = size // prod
            labels.extend(names)
            out_sizes.extend(known)
        if sizes:
            raise ValueError(f"unused size constraints: {tuple(sizes)} are not names of a split dimension")
        return ValueMesh(Shape(labels, out_sizes), self._values)

    def __reduce__(self):
        return (ValueMesh, (self._shape.extent(), self._values))

    def __repr__(self) -> str:
        lines = [f"ValueMesh({self._shape}):"]
        for p, v in self.items():
            lines.append(f"  {p}: {v!r}")
        return "\n".join(lines) if self._values else f"ValueMesh({self._shape}): (empty)"


# ---------------------------------------------------------------------------
# Reading a monarch_value_mesh


def _read_point(vm, rank, s, owner_box):
    """(is_error, message, value_or_exception) of point ``rank``."""
    st = _vm_point(vm, rank, s.is_err, s.err, s.n)
    if st:
        check(st)
    nparts = s.n[0]
    is_err = s.is_err[0]
    if nparts == 1 and not is_err:
        st = _vm_part(vm, rank, 0, s.data, s.len)
        if st:
            check(st)
        return False, None, _loads(_buffer(s.data[0], s.len[0]))
    parts = []
    for i in range(nparts):
        check(_vm_part(vm, rank, i, s.data, s.len))
        parts.append((s.data[0], s.len[0]))
    if is_err:
        msg = ffi.string(s.err[0]).decode("utf-8", "replace") if s.err[0] != _NULL else ""
        exc = None
        remote = bool(parts)
        if parts:
            try:
                exc = loads_parts(parts, None) if len(parts) == 1 else None
            except Exception:  # noqa: BLE001 - class unknown here
                exc = None
        return True, (msg, exc, remote), None
    if not parts:
        return False, None, None
    if len(parts) == 1:
        return False, None, loads_parts(parts, None)
    if owner_box[0] is None:
        owner_box[0] = HandleOwner(vm, _vm_free)
    return False, None, loads_parts(parts, owner_box[0])


def _point_error(vm, rank, s, nparts, native):
    """(msg, exc, remote) of error point ``rank``. ``remote``: the error
    came from the actor (a Python error answer always has parts; a native
    actor's has none, so every error of a native mesh counts as remote)."""
    msg = ffi.string(s.err[0]).decode("utf-8", "replace") if s.err[0] != _NULL else ""
    exc = None
    if nparts == 1:
        check(_vm_part(vm, rank, 0, s.data, s.len))
        try:
            exc = loads_parts([(s.data[0], s.len[0])], None)
        except Exception:  # noqa: BLE001 - class unknown here, or not a pickle
            exc = None
        if not isinstance(exc, BaseException):
            exc = None
    return msg, exc, bool(nparts) or native


def _read_point_raw(vm, rank, s, native):
    """Like _read_point for raw endpoints: the value is the reply's parts as
    ``bytes`` (one part), ``None`` (no parts) or a tuple of ``bytes``."""
    st = _vm_point(vm, rank, s.is_err, s.err, s.n)
    if st:
        check(st)
    nparts = s.n[0]
    if s.is_err[0]:
        return True, _point_error(vm, rank, s, nparts, native), None
    out = []
    for i in range(nparts):
        check(_vm_part(vm, rank, i, s.data, s.len))
        out.append(_buffer(s.data[0], s.len[0])[:])
    if not out:
        return False, None, None
    return False, None, out[0] if len(out) == 1 else tuple(out)


def _what(ctx) -> str:
    a, b = ctx
    if type(b) is str:
        return b
    return f"{a._class_name}.{b._name}"


def _ctx_shape(ctx) -> Shape:
    a, b = ctx
    if type(b) is str:
        return a()
    return a._shape()


def _raise_failures(failures, total, ctx):
    """failures: list of (rank, (msg, exc, remote))."""
    what = _what(ctx)
    rank, (msg, exc, remote) = failures[0]
    more = f" (and {len(failures) - 1} more of {total} points failed)" if len(failures) > 1 else ""
    points = [(r, m, e) for r, (m, e, _) in failures]
    mesh, ep = ctx
    if any(f[1][2] for f in failures):
        err = ActorError(f"{what} failed at rank {rank}{more}:\n{msg}", exc, points)
    elif type(ep) is str:
        err = SupervisionError(f"{what} failed at rank {rank}{more}:\n{msg}", exc, points)
    else:
        # No endpoint raised: a proc or actor failed. Upstream's shape
        # (`Endpoint call <mesh>.<method>() failed, <why>`).
        why = f"{msg}\n(rank {rank}{more})"
        err = SupervisionError.from_endpoint(f"{mesh._name}.{ep._name}()", why, exc, points)
    if exc is not None:
        raise err from exc
    raise err


def _points(vm, s, cap=16):
    """``(monarch_point_info[], n)``: every point of ``vm``, in one call."""
    pts = _new(_POINTS_T, cap)
    st = _vm_points(vm, pts, cap, s.n)
    if st:
        check(st)
    n = s.n[0]
    if n > cap:
        pts = _new(_POINTS_T, n)
        check(_vm_points(vm, pts, n, s.n))
    return pts, n


def _read_point_info(vm, rank, p, s, owner_box):
    """``_read_point`` that reads the common case (one part, no error)
    from the point's ``monarch_point_info`` ``p``."""
    if p.nparts == 1 and not p.is_error:
        return False, None, _loads(_buffer(p.part0, p.part0_len))
    return _read_point(vm, rank, s, owner_box)


def convert_all(vm: Any, ctx: Any) -> ValueMesh:
    """ValueMesh of a call to every point; ctx = (shape getter, what)."""
    s = thread_scratch()
    owner_box = [None]
    values = []
    failures = None
    try:
        pts, n = _points(vm, s)
        start = 0
        if n > 1 and _buffer(pts, n * _POINT_SIZE)[:][_SAME_OFF::_POINT_SIZE].count(1) == n - 1:
            # Every point answered what point 0 did (one part, no error):
            # decode it once.
            p = pts[0]
            value = _loads(_buffer(p.part0, p.part0_len))
            if type(value) in _SHARED_TYPES:
                values = [value] * n
                start = n
            else:
                values.append(value)
                start = 1
        for rank in range(start, n):
            is_err, info, value = _read_point_info(vm, rank, pts[rank], s, owner_box)
            if is_err:
                if failures is None:
                    failures = []
                failures.append((rank, info))
                values.append(None)
            else:
                values.append(value)
    finally:
        if owner_box[0] is None:
            _vm_free(vm)
    if failures:
        _raise_failures(failures, n, ctx)
    return ValueMesh(_ctx_shape(ctx), values)


def convert_one(vm: Any, ctx: Any) -> Any:
    s = thread_scratch()
    owner_box = [None]
    try:
        pts, _ = _points(vm, s, 1)
        is_err, info, value = _read_point_info(vm, 0, pts[0], s, owner_box)
    finally:
        if owner_box[0] is None:
            _vm_free(vm)
    if is_err:
        _raise_failures([(0, info)], 1, ctx)
    return value


def _raw_converter(all_points: bool, native: bool) -> Callable[[Any, Any], Any]:
    """Convert function of a future of raw replies (see _read_point_raw)."""

    def convert(vm, ctx):
        s = thread_scratch()
        try:
            check(_vm_len(vm, s.n))
            n = s.n[0] if all_points else 1
            values = []
            failures = []
            for rank in range(n):
                is_err, info, value = _read_point_raw(vm, rank, s, native)
                if is_err:
                    failures.append((rank, info))
                values.append(value)
        finally:
            _vm_free(vm)
        if failures:
            _raise_failures(failures, n, ctx)
        return ValueMesh(_ctx_shape(ctx), values) if all_points else values[0]

    return convert


RAW_CONVERT = {(a, n): _raw_converter(a, n) for a in (False, True) for n in (False, True)}
