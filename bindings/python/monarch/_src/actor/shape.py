"""Shapes and points of meshes, and the geometry every mesh shares.

A mesh view has labelled dimensions with sizes; its points are numbered in
row-major order. ``Shape`` is that description, ``Point`` one coordinate of
it, and ``MeshTrait`` the views (``slice``, ``flatten``, ``rename``,
``split``) that ``ProcMesh`` and ``ActorMesh`` compute through libmonarch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from ..._lib import c_strings, check, error_for, ffi, lib, take_buffer

SLICE_END = lib.MONARCH_SLICE_END

_new = ffi.new
_gc = ffi.gc
_NULL = ffi.NULL
class Shape:
    """Labels and sizes of a mesh view (row-major ranks)."""

    __slots__ = ("labels", "sizes", "strides", "size")

    def __init__(self, labels: Iterable[str], sizes: Iterable[int]) -> None:
        self.labels = tuple(labels)
        self.sizes = tuple(sizes)
        strides = []
        acc = 1
        for s in reversed(self.sizes):
            strides.append(acc)
            acc *= s
        self.strides = tuple(reversed(strides))
        self.size = acc

    def coords(self, rank: int) -> tuple[int, ...]:
        return tuple((rank // st) % sz for st, sz in zip(self.strides, self.sizes))

    def extent(self) -> dict[str, int]:
        return dict(zip(self.labels, self.sizes))

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k}: {v}" for k, v in zip(self.labels, self.sizes)) + "}"


EMPTY_SHAPE = Shape((), ())
_shape_cache: dict = {}


def shape_from_bytes(data: bytes) -> Shape:
    if not data:
        return EMPTY_SHAPE
    s = _shape_cache.get(data)
    if s is None:
        # The flatbuffers package imports numpy when it is installed (a
        # tenth of a second or more): loaded on the first shape decoded, so a
        # worker whose actors never ask for their rank does not pay it.
        from ...schema.Shape import Shape as _FbShape

        fb = _FbShape.GetRootAs(bytearray(data), 0)
        labels = [fb.Labels(i).decode() for i in range(fb.LabelsLength())]
        sizes = [fb.Sizes(i) for i in range(fb.SizesLength())]
        s = Shape(labels, sizes)
        if len(_shape_cache) > 1024:
            _shape_cache.clear()
        _shape_cache[data] = s
    return s


def owned_shape(fn: Callable[..., int], handle: Any) -> Shape:
    """The shape of a handle, read with its ``monarch_*_shape`` function ``fn``."""
    out = _new("uint8_t **")
    n = _new("size_t *")
    check(fn(handle, out, n))
    return shape_from_bytes(take_buffer(out[0], n[0]))


class Extent(Mapping[str, int]):
    """Labelled sizes of a mesh, as upstream's ``Extent(labels, sizes)``: a
    read-only mapping of dimension -> size, with ``labels``, ``sizes`` and
    ``nelements`` (the number of points). Compares equal to a dict of the
    same sizes."""

    __slots__ = ("labels", "sizes")

    def __init__(self, labels: Iterable[str], sizes: Iterable[int]) -> None:
        self.labels = list(labels)
        self.sizes = list(sizes)
        if len(self.labels) != len(self.sizes):
            raise ValueError(f"Extent needs one size per label, got {self.labels} and {self.sizes}")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"Extent labels must be distinct, got {self.labels}")
        for label, size in zip(self.labels, self.sizes):
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ValueError(f"size of dimension {label!r} must be a non-negative int, not {size!r}")

    @property
    def nelements(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    def __getitem__(self, label: str) -> int:
        try:
            return self.sizes[self.labels.index(label)]
        except ValueError:
            raise KeyError(label) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __repr__(self) -> str:
        return "Extent({" + ", ".join(f"'{k}': {v}" for k, v in zip(self.labels, self.sizes)) + "})"

    def __reduce__(self):
        return (Extent, (self.labels, self.sizes))


class Point(Mapping[str, int]):
    """A coordinate in a mesh: a mapping of dimension -> index, plus the
    linear ``rank`` (row-major) and the mesh ``extent``."""

    __slots__ = ("rank", "_shape", "_coords")

    def __init__(self, rank: int, extent: Mapping[str, int] | None = None) -> None:
        extent = dict(extent or {})
        self.rank = rank
        self._shape = Shape(extent.keys(), extent.values())
        self._coords = None

    @classmethod
    def _make(cls, rank: int, shape: Shape) -> Point:
        p = cls.__new__(cls)
        p.rank = rank
        p._shape = shape
        p._coords = None
        return p

    def _c(self):
        if self._coords is None:
            self._coords = dict(zip(self._shape.labels, self._shape.coords(self.rank)))
        return self._coords

    @property
    def extent(self) -> dict[str, int]:
        return self._shape.extent()

    def size(self, label: str) -> int:
        return self._shape.extent()[label]

    def __getitem__(self, label: str) -> int:
        return self._c()[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self._shape.labels)

    def __len__(self) -> int:
        return len(self._shape.labels)

    def __hash__(self) -> int:
        return hash((self.rank, self._shape.labels, self._shape.sizes))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Point):
            return (
                self.rank == other.rank
                and self._shape.labels == other._shape.labels
                and self._shape.sizes == other._shape.sizes
            )
        return Mapping.__eq__(self, other)

    def __str__(self) -> str:
        c = self._c()
        inner = ", ".join(f"{k!r}: {c[k]}/{n}" for k, n in zip(self._shape.labels, self._shape.sizes))
        return "{" + inner + "}"

    __repr__ = __str__

    def __reduce__(self):
        return (Point, (self.rank, self._shape.extent()))


class DimensionError(ValueError, KeyError, TypeError):
    """A dimension name the mesh does not have. A ValueError like every bad
    argument, and also the KeyError (``size``) / TypeError (``slice``) that
    upstream Monarch raises for it."""

    __str__ = ValueError.__str__


class MeshIndexError(ValueError, IndexError):
    """An index outside a dimension (a ValueError, and the IndexError of
    upstream Monarch)."""


class MeshFns:
    """The C functions of one kind of mesh handle."""

    __slots__ = ("index", "range", "flatten", "rename", "split", "out_type", "free")

    def __init__(self, kind, free):
        for op in ("index", "range"):
            setattr(self, op, getattr(lib, f"monarch_{kind}_mesh_slice_{op}"))
        for op in ("flatten", "rename", "split"):
            setattr(self, op, getattr(lib, f"monarch_{kind}_mesh_{op}"))
        self.out_type = f"monarch_{kind}_mesh **"
        self.free = free


_MeshT = TypeVar("_MeshT", bound="MeshTrait")


class MeshTrait:
    """Geometry shared by ProcMesh and ActorMesh, as upstream's MeshTrait:
    ``slice``, ``flatten``, ``rename``, ``split``, ``size``, ``sizes``,
    ``extent``. Each returns a new view computed by libmonarch; nothing is
    copied or renumbered."""

    _fns: MeshFns

    def _shape(self) -> Shape:  # pragma: no cover - overridden
        raise NotImplementedError

    def _derive(self, handle, what):  # pragma: no cover - overridden
        raise NotImplementedError

    def _dim_error(self, label, exc):
        if label not in self._shape().labels:
            return DimensionError(str(exc))
        return exc

    def _apply(self, steps, what):
        """Run ``steps`` (``fn(handle, out) -> status`` each, on the result
        of the previous one); wrap the last handle. A failing step raises
        ``on_error(exc)`` of the step."""
        fns = self._fns
        out = _new(fns.out_type)
        cur = self._h
        owned = None
        try:
            for step, on_error in steps:
                st = step(cur, out)
                if st:
                    exc = error_for(st)
                    raise on_error(exc) if on_error else exc
                if owned is not None:
                    fns.free(owned)
                owned = cur = out[0]
            result, owned = owned, None
        finally:
            if owned is not None:
                fns.free(owned)
        return self._derive(_gc(result, fns.free), what)

    def slice(self: _MeshT, **dims: int | slice) -> _MeshT:
        """A view of part of the mesh: ``dim=i`` (an int) fixes dimension
        ``dim`` at index ``i`` and removes it; ``dim=slice(start, stop,
        step)`` keeps it, narrowed with Python's slice rules (step > 0).
        Slicing a slice composes. Negative int indices are rejected, as
        upstream."""
        if not dims:
            raise ValueError("slice() needs at least one dimension")
        fns = self._fns
        steps = []
        for label, v in dims.items():
            if isinstance(v, bool) or not isinstance(v, (int, slice)):
                raise TypeError(f"slice({label}=...) takes an int or a slice, not {type(v).__name__}")
            c_label = label.encode()
            if isinstance(v, int):
                if v < 0:
                    sizes = self._shape().extent()
                    if label not in sizes:
                        raise DimensionError(f"no dimension {label!r} in mesh with dimensions {sizes}")
                    raise MeshIndexError(
                        f"index {v} out of range for dimension {label!r} of size {sizes[label]} "
                        f"(valid: 0..{sizes[label]}; negative indices are not supported)"
                    )

                def step(h, out, c_label=c_label, v=v):
                    return fns.index(h, c_label, v, out)

                def on_error(exc, label=label):
                    e = self._dim_error(label, exc)
                    return MeshIndexError(str(exc)) if e is exc else e

            else:
                start = 0 if v.start is None else v.start
                stop = SLICE_END if v.stop is None else v.stop
                stride = 1 if v.step is None else v.step

                def step(h, out, c_label=c_label, a=(start, stop, stride)):
                    return fns.range(h, c_label, *a, out)

                def on_error(exc, label=label):
                    return self._dim_error(label, exc)

            steps.append((step, on_error))
        return self._apply(steps, "slice")

    def flatten(self: _MeshT, name: str) -> _MeshT:
        """The mesh as one dimension ``name`` (row-major: rank r stays rank
        r). Needs the points to be evenly spaced: any whole mesh, an index
        of one, or a range of its outermost dimension; not e.g.
        ``gpus=slice(1, 3)`` of a ``{hosts, gpus}`` mesh (ValueError)."""
        if not isinstance(name, str):
            raise TypeError(f"flatten() takes a dimension name, not {type(name).__name__}")
        c_name = name.encode()
        fns = self._fns
        return self._apply([(lambda h, out: fns.flatten(h, c_name, out), None)], "flatten")

    def rename(self: _MeshT, **renames: str) -> _MeshT:
        """Dimensions renamed (``rename(hosts="dp", gpus="tp")``), all at
        once; dimensions not named keep their names."""
        if not renames:
            raise ValueError("rename() needs at least one dimension")
        for k, v in renames.items():
            if not isinstance(v, str):
                raise TypeError(f"rename({k}=...) takes the new name as a str, not {type(v).__name__}")
        c_from, keep_from = c_strings(renames)
        c_to, keep_to = c_strings(renames.values())
        fns = self._fns
        n = len(renames)

        def on_error(exc):
            missing = [k for k in renames if k not in self._shape().labels]
            return self._dim_error(missing[0], exc) if missing else exc

        return self._apply([(lambda h, out: fns.rename(h, c_from, c_to, n, out), on_error)], "rename")

    def split(self: _MeshT, **kwargs: Sequence[str] | int) -> _MeshT:
        """Dimensions split in place, as upstream:
        ``split(hosts=("dp", "pp"), gpus=("tp", "cp"), pp=16, cp=2)``. An
        existing dimension maps to the names replacing it (outermost
        first); a new name maps to its size. One size per split may be left
        out; it is inferred."""
        labels = self._shape().labels
        splits = {}
        constraints = {}
        for key, value in kwargs.items():
            if key in labels:
                if isinstance(value, str) or not all(isinstance(n, str) for n in value):
                    raise ValueError(
                        f"split({key}=...) takes a sequence of new dimension names, not {value!r}"
                    )
                splits[key] = list(value)
            else:
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise ValueError(
                        f"'{key}' is not a dimension of this mesh {self.sizes}; as a new dimension "
                        f"it takes a positive int size, not {value!r}"
                    )
                constraints[key] = value
        if not splits:
            raise ValueError(f"split() needs at least one dimension of {self.sizes} to split")
        fns = self._fns
        steps = []
        for label, names in splits.items():
            sizes = [constraints.pop(n, lib.MONARCH_SPLIT_INFER) for n in names]
            c_names, keep = c_strings(names)
            c_sizes = _new("size_t[]", sizes) if sizes else _NULL
            args = (label.encode(), c_names, c_sizes, len(names))

            def step(h, out, a=args, keep=keep):
                return fns.split(h, *a, out)

            steps.append((step, None))
        if constraints:
            raise ValueError(f"unused size constraints: {tuple(constraints)} are not names of a split dimension")
        return self._apply(steps, "split")

    def size(self, dim: str | Sequence[str] | None = None) -> int:
        """Number of points: of the whole mesh (``dim=None``), of one
        dimension, or the product over several."""
        s = self._shape()
        if dim is None:
            return s.size
        if isinstance(dim, str):
            try:
                return s.extent()[dim]
            except KeyError:
                raise DimensionError(f"no dimension {dim!r} in mesh with dimensions {s.extent()}") from None
        n = 1
        for d in dim:
            n *= MeshTrait.size(self, d)
        return n

    @property
    def sizes(self) -> dict[str, int]:
        """``{dimension: size}`` in order."""
        return self._shape().extent()

    @property
    def extent(self) -> Extent:
        """The mesh's ``Extent`` (a mapping of dimension -> size)."""
        s = self._shape()
        return Extent(s.labels, s.sizes)

    def __len__(self) -> int:
        return self._shape().size
