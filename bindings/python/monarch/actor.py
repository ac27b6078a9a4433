"""Actors and meshes, mirroring upstream PyTorch Monarch's ``monarch.actor``.

::

    from monarch.actor import Actor, endpoint, this_host

    class Counter(Actor):
        def __init__(self, start):
            self.value = start

        @endpoint
        def incr(self, by=1):
            self.value += by
            return self.value

    procs = this_host().spawn_procs(per_host={"gpus": 4})
    counters = procs.spawn("counters", Counter, 10)
    print(counters.incr.call(2).get())
    procs.stop().get()

The wire protocol between callers and actors is described in
``monarch._server``; serialization in ``monarch._serial``.
"""

from __future__ import annotations

import atexit
import os
import pickle
import sys
import threading
import weakref
from collections.abc import Mapping, Sequence

from . import _ports, _serial
from ._lib import (
    ERR_TIMEOUT,
    ActorError,
    MonarchError,
    SupervisionError,
    check,
    error_for,
    ffi,
    lib,
    runtime,
    runtime_is_live,
    take_buffer,
)
from ._ports import Channel, Port, PortReceiver
from ._supervision import MeshFailure, claim_spawn_owner, default_unhandled_fault_hook, ensure_watcher

__all__ = [
    "Accumulator",
    "Actor",
    "ActorError",
    "ActorMesh",
    "Channel",
    "Context",
    "Endpoint",
    "Future",
    "HostMesh",
    "MeshFailure",
    "MonarchError",
    "Point",
    "Port",
    "PortReceiver",
    "ProcMesh",
    "SupervisionError",
    "ValueMesh",
    "concurrent_endpoint",
    "context",
    "current_rank",
    "current_size",
    "endpoint",
    "monarch_binary",
    "send",
    "this_host",
    "this_proc",
    "unhandled_fault_hook",
]

#: Called with a ``MeshFailure`` for each failure that reached this
#: process's top level unhandled (a mesh the program spawned itself failed,
#: or an actor owning one did not handle its failure). Replace it to decide
#: what happens; the default reports the failure and exits with status 1.
unhandled_fault_hook = default_unhandled_fault_hook

CALL_ALL = lib.MONARCH_CALL_ALL
CALL_ONE = lib.MONARCH_CALL_ONE
CALL_CHOOSE = lib.MONARCH_CALL_CHOOSE
CALL_BROADCAST = lib.MONARCH_CALL_BROADCAST
SLICE_END = lib.MONARCH_SLICE_END

_gc = ffi.gc
_buffer = ffi.buffer
_loads = pickle.loads
_new = ffi.new
_from_buffer = ffi.from_buffer
_NULL = ffi.NULL
_future_free = lib.monarch_future_free
_future_wait = lib.monarch_future_wait
_future_take = lib.monarch_future_take
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
_am_call = lib.monarch_actor_mesh_call
_am_free = lib.monarch_actor_mesh_free
_pm_free = lib.monarch_proc_mesh_free


# ---------------------------------------------------------------------------
# Shapes and points


class _Shape:
    """Labels and sizes of a mesh view (row-major ranks)."""

    __slots__ = ("labels", "sizes", "strides", "size")

    def __init__(self, labels, sizes):
        self.labels = tuple(labels)
        self.sizes = tuple(sizes)
        strides = []
        acc = 1
        for s in reversed(self.sizes):
            strides.append(acc)
            acc *= s
        self.strides = tuple(reversed(strides))
        self.size = acc

    def coords(self, rank):
        return tuple((rank // st) % sz for st, sz in zip(self.strides, self.sizes))

    def extent(self):
        return dict(zip(self.labels, self.sizes))

    def __repr__(self):
        return "{" + ", ".join(f"{k}: {v}" for k, v in zip(self.labels, self.sizes)) + "}"


_EMPTY_SHAPE = _Shape((), ())
_shape_cache: dict = {}


def _shape_from_bytes(data: bytes) -> _Shape:
    if not data:
        return _EMPTY_SHAPE
    s = _shape_cache.get(data)
    if s is None:
        from .schema.Shape import Shape as _FbShape

        fb = _FbShape.GetRootAs(bytearray(data), 0)
        labels = [fb.Labels(i).decode() for i in range(fb.LabelsLength())]
        sizes = [fb.Sizes(i) for i in range(fb.SizesLength())]
        s = _Shape(labels, sizes)
        if len(_shape_cache) > 1024:
            _shape_cache.clear()
        _shape_cache[data] = s
    return s


def _owned_shape(fn, handle) -> _Shape:
    out = _new("uint8_t **")
    n = _new("size_t *")
    check(fn(handle, out, n))
    return _shape_from_bytes(take_buffer(out[0], n[0]))


class Point(Mapping):
    """A coordinate in a mesh: a mapping of dimension -> index, plus the
    linear ``rank`` (row-major) and the mesh ``extent``."""

    __slots__ = ("rank", "_shape", "_coords")

    def __init__(self, rank: int, extent: Mapping | None = None):
        extent = dict(extent or {})
        self.rank = rank
        self._shape = _Shape(extent.keys(), extent.values())
        self._coords = None

    @classmethod
    def _make(cls, rank: int, shape: _Shape) -> Point:
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
    def extent(self) -> dict:
        return self._shape.extent()

    def size(self, label: str) -> int:
        return self._shape.extent()[label]

    def __getitem__(self, label):
        return self._c()[label]

    def __iter__(self):
        return iter(self._shape.labels)

    def __len__(self):
        return len(self._shape.labels)

    def __hash__(self):
        return hash((self.rank, self._shape.labels, self._shape.sizes))

    def __eq__(self, other):
        if isinstance(other, Point):
            return (
                self.rank == other.rank
                and self._shape.labels == other._shape.labels
                and self._shape.sizes == other._shape.sizes
            )
        return Mapping.__eq__(self, other)

    def __str__(self):
        c = self._c()
        inner = ", ".join(f"{k!r}: {c[k]}/{n}" for k, n in zip(self._shape.labels, self._shape.sizes))
        return "{" + inner + "}"

    __repr__ = __str__

    def __reduce__(self):
        return (Point, (self.rank, self._shape.extent()))


class _DimensionError(ValueError, KeyError, TypeError):
    """A dimension name the mesh does not have. A ValueError like every bad
    argument, and also the KeyError (``size``) / TypeError (``slice``) that
    upstream Monarch raises for it."""

    __str__ = ValueError.__str__


class _MeshIndexError(ValueError, IndexError):
    """An index outside a dimension (a ValueError, and the IndexError of
    upstream Monarch)."""


# ---------------------------------------------------------------------------
# ValueMesh


class ValueMesh:
    """The gathered replies of a call: one value per point of the mesh that
    was called, in row-major rank order."""

    __slots__ = ("_shape", "_values")

    def __init__(self, shape, values):
        if isinstance(shape, Mapping):
            shape = _Shape(shape.keys(), shape.values())
        self._shape = shape
        self._values = list(values)

    def items(self):
        """Iterate over ``(Point, value)`` pairs."""
        shape = self._shape
        for rank, v in enumerate(self._values):
            yield Point._make(rank, shape), v

    def values(self):
        return iter(self._values)

    def __iter__(self):
        return self.items()

    def __len__(self):
        return len(self._values)

    def get(self, rank: int):
        if not 0 <= rank < len(self._values):
            raise IndexError(f"rank {rank} is out of range for a ValueMesh of {len(self._values)} values")
        return self._values[rank]

    def item(self, **coords):
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
    def extent(self) -> dict:
        return self._shape.extent()

    @property
    def sizes(self) -> dict:
        return self._shape.extent()

    def size(self, dim: str | None = None) -> int:
        """Number of values, or the size of dimension ``dim``."""
        if dim is None:
            return len(self._values)
        try:
            return self._shape.extent()[dim]
        except KeyError:
            raise _DimensionError(f"no dimension {dim!r} in ValueMesh of shape {self._shape}") from None

    def __repr__(self):
        lines = [f"ValueMesh({self._shape}):"]
        for p, v in self.items():
            lines.append(f"  {p}: {v!r}")
        return "\n".join(lines) if self._values else f"ValueMesh({self._shape}): (empty)"


# ---------------------------------------------------------------------------
# Futures


class _Scratch:
    """Out-parameters reused by the calls of one thread. Reached through
    ``_scr()``: one thread-local lookup per operation, then plain slot
    reads (every attribute read of a ``threading.local`` costs as much as a
    small function call)."""

    __slots__ = ("fut", "vm", "n", "is_err", "err", "data", "len", "one")

    def __init__(self):
        self.fut = _new("monarch_future **")
        self.vm = _new("monarch_value_mesh **")
        self.n = _new("size_t *")
        self.is_err = _new("bool *")
        self.err = _new("char **")
        self.data = _new("uint8_t **")
        self.len = _new("size_t *")
        self.one = _new("monarch_bytes[1]")


_tls = threading.local()


def _scr() -> _Scratch:
    """This thread's ``_Scratch``."""
    try:
        return _tls.s
    except AttributeError:
        s = _tls.s = _Scratch()
        return s


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
                exc = _serial.loads_parts(parts, None) if len(parts) == 1 else None
            except Exception:  # noqa: BLE001 - class unknown here
                exc = None
        return True, (msg, exc, remote), None
    if not parts:
        return False, None, None
    if len(parts) == 1:
        return False, None, _serial.loads_parts(parts, None)
    if owner_box[0] is None:
        owner_box[0] = _serial.HandleOwner(vm, _vm_free)
    return False, None, _serial.loads_parts(parts, owner_box[0])


def _point_error(vm, rank, s, nparts, native):
    """(msg, exc, remote) of error point ``rank``. ``remote``: the error
    came from the actor (a Python error answer always has parts; a native
    actor's has none, so every error of a native mesh counts as remote)."""
    msg = ffi.string(s.err[0]).decode("utf-8", "replace") if s.err[0] != _NULL else ""
    exc = None
    if nparts == 1:
        check(_vm_part(vm, rank, 0, s.data, s.len))
        try:
            exc = _serial.loads_parts([(s.data[0], s.len[0])], None)
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


def _what(ctx):
    a, b = ctx
    if isinstance(b, EndpointRef):
        return f"{a._class_name}.{b._name}"
    return b


def _ctx_shape(ctx):
    a, b = ctx
    if isinstance(b, EndpointRef):
        return a._shape()
    return a()


def _raise_failures(failures, total, ctx):
    """failures: list of (rank, (msg, exc, remote))."""
    what = _what(ctx)
    rank, (msg, exc, remote) = failures[0]
    more = f" (and {len(failures) - 1} more of {total} points failed)" if len(failures) > 1 else ""
    header = f"{what} failed at rank {rank}{more}:\n"
    cls = ActorError if any(f[1][2] for f in failures) else SupervisionError
    err = cls(header + msg, exc, [(r, m, e) for r, (m, e, _) in failures])
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


def _convert_all(vm, ctx):
    """ValueMesh of a call to every point; ctx = (shape getter, what)."""
    s = _scr()
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


def _convert_one(vm, ctx):
    s = _scr()
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


def _raw_converter(all_points: bool, native: bool):
    """Convert function of a future of raw replies (see _read_point_raw)."""

    def convert(vm, ctx):
        s = _scr()
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


_RAW_CONVERT = {(a, n): _raw_converter(a, n) for a in (False, True) for n in (False, True)}


def _convert_none(vm, ctx):
    _vm_free(vm)
    return None


class Future:
    """The pending result of an operation. ``get()`` blocks; ``await`` works
    in asyncio code."""

    __slots__ = ("_fut", "_convert", "_ctx", "_state", "_value")

    def __init__(self, fut, convert, ctx=None):
        self._fut = fut  # gc'd monarch_future* (or None for a ready value)
        self._convert = convert
        self._ctx = ctx
        self._state = 0  # 0 pending, 1 value, 2 exception
        self._value = None

    @classmethod
    def _ready(cls, value) -> Future:
        f = cls(None, None)
        f._state = 1
        f._value = value
        return f

    def get(self, timeout: float | None = None):
        """Wait for the result (up to ``timeout`` seconds; TimeoutError after
        that, and the future may be waited on again)."""
        state = self._state
        if state == 1:
            return self._value
        if state == 2:
            raise self._value
        fut = self._fut
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        st = _future_wait(fut, ms)
        if st:
            if st == ERR_TIMEOUT:
                raise TimeoutError(f"future not complete after {timeout} s")
            raise error_for(st)
        s = _scr()
        st = _future_take(fut, s.vm)
        self._fut = None
        if st:
            exc = error_for(st)
            self._state, self._value = 2, exc
            raise exc
        try:
            value = self._convert(s.vm[0], self._ctx)
        except BaseException as exc:
            self._state, self._value = 2, exc
            raise
        self._state, self._value = 1, value
        return value

    result = get

    def done(self) -> bool:
        if self._state:
            return True
        b = _new("bool *")
        check(lib.monarch_future_poll(self._fut, b))
        return bool(b[0])

    def exception(self, timeout: float | None = None):
        try:
            self.get(timeout)
        except TimeoutError:
            raise
        except BaseException as e:  # noqa: BLE001
            return e
        return None

    def __await__(self):
        return self._await().__await__()

    async def _await(self):
        if not self._state and not self.done():
            import asyncio

            loop = asyncio.get_running_loop()
            await _fd_waiter(loop).wait(self)
        return self.get()


class _FdWaiter:
    """Wakes asyncio futures when the runtime's fd says something completed."""

    def __init__(self, loop):
        self.loop_ref = weakref.ref(loop)
        self.pending = []  # (Future, asyncio.Future)
        fd = _new("int *")
        check(lib.monarch_runtime_fd(runtime(), fd))
        self.fd = fd[0]
        self.registered = False

    def wait(self, fut: Future):
        loop = self.loop_ref()
        waiter = loop.create_future()
        self.pending.append((fut, waiter))
        if not self.registered:
            loop.add_reader(self.fd, self._wake)
            self.registered = True
        self._wake()
        return waiter

    def _wake(self):
        lib.monarch_runtime_clear_fd(runtime())
        still = []
        for fut, waiter in self.pending:
            if waiter.done():
                continue
            if fut.done():
                waiter.set_result(None)
            else:
                still.append((fut, waiter))
        self.pending = still
        if not still and self.registered:
            self.loop_ref().remove_reader(self.fd)
            self.registered = False


_waiters = weakref.WeakKeyDictionary()


def _fd_waiter(loop) -> _FdWaiter:
    w = _waiters.get(loop)
    if w is None:
        w = _waiters[loop] = _FdWaiter(loop)
    return w


# ---------------------------------------------------------------------------
# Endpoints and actors


class Endpoint:
    """An actor method that may be called through a mesh. Inside the actor
    it behaves like the plain method."""

    def __init__(self, fn, **options):
        self._fn = fn
        self.options = options
        self.__name__ = getattr(fn, "__name__", "endpoint")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __set_name__(self, owner, name):
        self.__name__ = name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return self._fn.__get__(obj, objtype)

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


def endpoint(fn=None, **options):
    """Mark an actor method as an endpoint: ``@endpoint`` or
    ``@endpoint(...)`` (other options are accepted for compatibility).

    ``@endpoint(raw=True)``: a raw-bytes endpoint, callable without pickle
    from any language (e.g. a C++ controller). It is called with one
    ``bytes`` positional argument per payload part of the message, and
    returns a bytes-like object (one reply part), ``None`` (no parts) or a
    list/tuple of bytes-like objects (one part each). Python callers pass
    bytes-like arguments (one part each) and get replies back as ``bytes``
    / ``None`` / tuple of ``bytes``. An exception is answered as usual (a
    text message; C/C++ callers see it as the error of the point).

    ``@endpoint(explicit_response_port=True)``: the endpoint is called with
    the caller's reply ``Port`` as its first argument (after ``self``) and
    its return value is ignored; it answers with ``port.send(value)`` /
    ``port.exception(exc)``, now or later, from any thread, or hands the
    port to another actor. An endpoint that never answers leaves the caller
    waiting."""
    if fn is None:
        return lambda f: Endpoint(f, **options)
    return Endpoint(fn, **options)


def concurrent_endpoint(fn=None, **options):
    """An ``async def`` endpoint whose bodies may interleave: each message
    starts a task on the actor's event loop and the actor goes on to its
    next message while the task awaits (plain async endpoints run one
    message at a time)."""
    options["concurrent"] = True
    return endpoint(fn, **options)


def _is_async(fn) -> bool:
    import inspect

    return inspect.iscoroutinefunction(inspect.unwrap(fn))


def _check_endpoint_kinds(cls) -> None:
    """As upstream: an actor's (non-raw) endpoints are all ``def`` or all
    ``async def``."""
    sync, asyn = [], []
    seen = set()
    for klass in cls.__mro__:
        for name, attr in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            if isinstance(attr, Endpoint) and not _is_raw(attr):
                (asyn if _is_async(attr._fn) else sync).append(name)
            if isinstance(attr, Endpoint) and attr.options.get("concurrent") and not _is_async(attr._fn):
                raise TypeError(f"{cls.__qualname__}.{name} is a @concurrent_endpoint but not an async def")
    if sync and asyn:
        raise TypeError(
            f"actor class {cls.__qualname__} mixes synchronous endpoints ({', '.join(sorted(sync))}) "
            f"and async endpoints ({', '.join(sorted(asyn))}); make them all `def` or all `async def`"
        )


def _is_endpoint(attr) -> bool:
    return isinstance(attr, Endpoint)


def _is_raw(attr) -> bool:
    return isinstance(attr, Endpoint) and bool(attr.options.get("raw"))


def _endpoint_names(cls, raw_only=False) -> frozenset:
    names = set()
    seen = set()
    for klass in cls.__mro__:
        for name, attr in vars(klass).items():
            if name in seen:
                continue  # overridden in a subclass
            seen.add(name)
            if isinstance(attr, Endpoint) and (not raw_only or _is_raw(attr)):
                names.add(name)
    return frozenset(names)


class _AnyName:
    """The endpoint set of a native actor mesh: every name (the type's
    endpoints are not known on this side), all raw."""

    __slots__ = ()

    def __contains__(self, name):
        return isinstance(name, str) and not name.startswith("_")

    def __reduce__(self):
        return "_ANY"

    def __repr__(self):
        return "<any endpoint>"


_ANY = _AnyName()


class Actor:
    """Base class of actors. Subclass it, define ``__init__`` and mark
    methods with ``@endpoint``; spawn with ``ProcMesh.spawn``.

    Optional hooks: ``__supervise__(self, failure)`` (sync or async) is
    called with a ``MeshFailure`` when a mesh this actor spawned fails;
    return True if handled, False to escalate to this actor's owner (raising
    escalates too, with the exception as cause). ``__cleanup__(self, exc)``
    runs when the actor is stopped (``exc`` is None) or its proc stops."""


# ---------------------------------------------------------------------------
# Context


class _ActorInstance:
    __slots__ = ("_hosted",)

    def __init__(self, hosted):
        self._hosted = hosted

    @property
    def rank(self) -> Point:
        """The actor's own point in the mesh it was spawned into."""
        if self._hosted is None:
            return Point._make(0, _EMPTY_SHAPE)
        return self._hosted.point()

    @property
    def actor_id(self) -> str:
        return self._hosted.key.decode() if self._hosted is not None else "controller"


class Context:
    """What the running code knows about where it runs."""

    def __init__(self, hosted, event):
        self.actor_instance = _ActorInstance(hosted)
        self._event = event
        self._point = None

    @property
    def message_rank(self) -> Point:
        """The point of the current message in the (possibly sliced) mesh
        it was sent to; ``current_rank()`` is the same."""
        if self._point is not None:
            return self._point
        return _message_point(self._event)


def _message_point(ev) -> Point:
    if ev is None:
        return Point._make(0, _EMPTY_SHAPE)
    rank = _new("uint64_t *")
    p = _new("uint8_t **")
    n = _new("size_t *")
    check(lib.monarch_event_rank(ev, rank, p, n))
    shape_bytes = ffi.buffer(p[0], n[0])[:] if n[0] else b""
    return Point._make(rank[0], _shape_from_bytes(shape_bytes))


def _current():
    from ._server import current_frame

    return current_frame()


def current_rank() -> Point:
    """The point of the running actor in the mesh the current message was
    sent to (in the controller: a point with no dimensions)."""
    from ._server import task_context

    tc = task_context.get(None)
    if tc is not None:
        return tc[0]
    return _message_point(_current().event)


def current_size() -> dict:
    """Sizes of the mesh the current message was sent to."""
    return current_rank().extent


def context() -> Context:
    from ._server import task_context

    tc = task_context.get(None)
    if tc is not None:
        c = Context(tc[1], None)
        c._point = tc[0]
        return c
    cur = _current()
    return Context(cur.actor, cur.event)


# ---------------------------------------------------------------------------
# Meshes


class _MeshFns:
    """The C functions of one kind of mesh handle."""

    __slots__ = ("index", "range", "flatten", "rename", "split", "out_type", "free")

    def __init__(self, kind, free):
        for op in ("index", "range"):
            setattr(self, op, getattr(lib, f"monarch_{kind}_mesh_slice_{op}"))
        for op in ("flatten", "rename", "split"):
            setattr(self, op, getattr(lib, f"monarch_{kind}_mesh_{op}"))
        self.out_type = f"monarch_{kind}_mesh **"
        self.free = free


def _c_strings(strs):
    """A ``char *[]`` of ``strs`` and the buffers it points to (keep both)."""
    bufs = [_new("char[]", s.encode()) for s in strs]
    return (_new("char *[]", bufs) if bufs else _NULL), bufs


class _MeshTrait:
    """Geometry shared by ProcMesh and ActorMesh, as upstream's MeshTrait:
    ``slice``, ``flatten``, ``rename``, ``split``, ``size``, ``sizes``,
    ``extent``. Each returns a new view computed by libmonarch; nothing is
    copied or renumbered."""

    _fns: _MeshFns

    def _shape(self) -> _Shape:  # pragma: no cover - overridden
        raise NotImplementedError

    def _derive(self, handle, what):  # pragma: no cover - overridden
        raise NotImplementedError

    def _dim_error(self, label, exc):
        if label not in self._shape().labels:
            return _DimensionError(str(exc))
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

    def slice(self, **dims):
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
                        raise _DimensionError(f"no dimension {label!r} in mesh with dimensions {sizes}")
                    raise _MeshIndexError(
                        f"index {v} out of range for dimension {label!r} of size {sizes[label]} "
                        f"(valid: 0..{sizes[label]}; negative indices are not supported)"
                    )

                def step(h, out, c_label=c_label, v=v):
                    return fns.index(h, c_label, v, out)

                def on_error(exc, label=label):
                    e = self._dim_error(label, exc)
                    return _MeshIndexError(str(exc)) if e is exc else e

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

    def flatten(self, name: str):
        """The mesh as one dimension ``name`` (row-major: rank r stays rank
        r). Needs the points to be evenly spaced: any whole mesh, an index
        of one, or a range of its outermost dimension; not e.g.
        ``gpus=slice(1, 3)`` of a ``{hosts, gpus}`` mesh (ValueError)."""
        if not isinstance(name, str):
            raise TypeError(f"flatten() takes a dimension name, not {type(name).__name__}")
        c_name = name.encode()
        fns = self._fns
        return self._apply([(lambda h, out: fns.flatten(h, c_name, out), None)], "flatten")

    def rename(self, **renames):
        """Dimensions renamed (``rename(hosts="dp", gpus="tp")``), all at
        once; dimensions not named keep their names."""
        if not renames:
            raise ValueError("rename() needs at least one dimension")
        for k, v in renames.items():
            if not isinstance(v, str):
                raise TypeError(f"rename({k}=...) takes the new name as a str, not {type(v).__name__}")
        c_from, keep_from = _c_strings(renames)
        c_to, keep_to = _c_strings(renames.values())
        fns = self._fns
        n = len(renames)

        def on_error(exc):
            missing = [k for k in renames if k not in self._shape().labels]
            return self._dim_error(missing[0], exc) if missing else exc

        return self._apply([(lambda h, out: fns.rename(h, c_from, c_to, n, out), on_error)], "rename")

    def split(self, **kwargs):
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
            c_names, keep = _c_strings(names)
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
                raise _DimensionError(f"no dimension {dim!r} in mesh with dimensions {s.extent()}") from None
        n = 1
        for d in dim:
            n *= self.size(d)
        return n

    @property
    def sizes(self) -> dict:
        """``{dimension: size}`` in order."""
        return self._shape().extent()

    @property
    def extent(self) -> dict:
        """Same as ``sizes``."""
        return self._shape().extent()

    def __len__(self):
        return self._shape().size


class _StopState:
    __slots__ = ("stopped", "what")

    def __init__(self, what):
        self.stopped = False
        self.what = what


class EndpointRef:
    """``mesh.method``: the adverbs to call endpoint ``method`` of every
    actor of ``mesh``."""

    __slots__ = ("_mesh", "_name", "_cname", "_raw")

    def __init__(self, mesh, name, raw=False):
        self._mesh = mesh
        self._name = name
        self._cname = name.encode()
        self._raw = raw

    def call(self, *args, **kwargs) -> Future:
        """Call every actor; a Future of the ValueMesh of replies."""
        return self._mesh._send(self, args, kwargs, CALL_ALL)

    def call_one(self, *args, **kwargs) -> Future:
        """Call the only actor of a mesh of size 1; a Future of its reply."""
        return self._mesh._send(self, args, kwargs, CALL_ONE)

    def choose(self, *args, **kwargs) -> Future:
        """Call one actor chosen by the runtime; a Future of its reply."""
        return self._mesh._send(self, args, kwargs, CALL_CHOOSE)

    def broadcast(self, *args, **kwargs) -> None:
        """Send to every actor; nobody replies."""
        self._mesh._send(self, args, kwargs, CALL_BROADCAST)

    def stream(self, *args, **kwargs):
        """Call every actor; an iterator of one Future per actor, which
        complete in the order the replies arrive (the first future gets the
        first reply to come back, whichever rank sent it). The call is made
        at once, not when iteration starts."""
        mesh = self._mesh
        mesh._check_live()
        arr, n, keep = mesh._parts(self, args, kwargs)
        out = _new("monarch_port_receiver **")
        st = lib.monarch_actor_mesh_stream(mesh._h, self._cname, arr, n, out)
        del keep
        if st:
            raise error_for(st, f"cannot call {mesh._class_name}.{self._name}")
        rx = PortReceiver(out[0], f"{mesh._class_name}.{self._name}")
        convert = _RAW_CONVERT[(False, mesh._raw is _ANY)] if self._raw else _convert_one
        return _stream_futures(rx, mesh._shape().size, convert, (mesh, self))

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"endpoint {self._name!r} cannot be called directly; use "
            f".call(), .call_one(), .choose() or .broadcast()"
        )

    def __repr__(self):
        return f"<endpoint {self._name!r} of {self._mesh!r}>"


def _stream_futures(rx, n, convert, ctx):
    for _ in range(n):
        f = rx.recv()
        f._convert = convert
        f._ctx = _ports._Ctx(ctx, rx)
        yield f


def send(endpoint, args=(), kwargs=None, port=None, selection="all") -> None:
    """Send a message to ``endpoint`` (``mesh.method``) of every actor
    (``selection="all"``) or of one chosen by the runtime
    (``selection="choose"``). With ``port`` (a ``Port``, e.g. from
    ``Channel.open()``), each actor's reply goes to that port; without,
    nobody replies."""
    if not isinstance(endpoint, EndpointRef):
        raise TypeError(f"send() needs an endpoint of an actor mesh (mesh.method), not {endpoint!r}")
    if selection not in ("all", "choose"):
        raise ValueError(f"send(selection=...) must be 'all' or 'choose', not {selection!r}")
    kwargs = dict(kwargs or {})
    args = tuple(args)
    mesh = endpoint._mesh
    if port is None:
        if selection == "all":
            mesh._send(endpoint, args, kwargs, CALL_BROADCAST)
        else:
            mesh._send(endpoint, args, kwargs, CALL_CHOOSE)
        return
    if not isinstance(port, Port):
        raise TypeError(f"send(port=...) takes a Port, not {type(port).__name__}")
    if port._ref is None:
        return send(endpoint, args, kwargs, None, selection)
    mesh._check_live()
    arr, n, keep = mesh._parts(endpoint, args, kwargs, None if selection == "all" else 1)
    mode = CALL_ALL if selection == "all" else CALL_CHOOSE
    st = lib.monarch_actor_mesh_send(mesh._h, endpoint._cname, arr, n, port._ref, len(port._ref), mode)
    del keep
    if st:
        raise error_for(st, f"cannot send to {mesh._class_name}.{endpoint._name}")


class Accumulator:
    """``Accumulator(mesh.method, identity, combine).accumulate(*args)``:
    call every actor and fold the replies, ``combine(acc, value)`` from
    ``identity``, left to right in rank order (``identity`` for an empty
    mesh). The fold runs in the caller when the replies are in (a Python
    ``combine`` is not run inside the multicast tree)."""

    def __init__(self, endpoint, identity, combine):
        if not isinstance(endpoint, EndpointRef):
            raise TypeError(f"Accumulator needs an endpoint of an actor mesh (mesh.method), not {endpoint!r}")
        self._endpoint = endpoint
        self._identity = identity
        self._combine = combine

    def accumulate(self, *args, **kwargs) -> Future:
        fut = self._endpoint.call(*args, **kwargs)
        inner, identity, combine = fut._convert, self._identity, self._combine

        def convert(vm, ctx):
            acc = identity
            for v in inner(vm, ctx).values():
                acc = combine(acc, v)
            return acc

        fut._convert = convert
        return fut


def _rebuild_actor_mesh(ref: bytes, endpoints, class_name, name, raw=frozenset()):
    out = _new("monarch_actor_mesh **")
    check(lib.monarch_actor_mesh_from_ref(runtime(), ref, len(ref), out), "cannot rebuild actor mesh")
    return ActorMesh._wrap(_gc(out[0], _am_free), class_name, endpoints, name, (_StopState("actor mesh"),), raw)


def _raw_parts(args, what):
    """``monarch_bytes[]`` of bytes-like ``args`` (one part each)."""
    n = len(args)
    arr = _new("monarch_bytes[]", n) if n else _scr().one
    keep = []
    for i, a in enumerate(args):
        if isinstance(a, str):
            raise TypeError(f"{what} takes bytes-like arguments (one part each), not str (encode it)")
        try:
            cp = _from_buffer(a)
        except TypeError as e:
            raise TypeError(
                f"{what} takes bytes-like arguments (one part each), not {type(a).__name__}"
            ) from e
        keep.append(cp)
        arr[i].ptr = cp
        arr[i].len = len(cp)
    return arr, n, keep


class ActorMesh(_MeshTrait):
    """An n-d array of actors of one class. ``mesh.endpoint_name`` gives the
    call adverbs; ``slice(**dims)``, ``flatten``, ``rename`` and ``split``
    give other views of it."""

    _fns = _MeshFns("actor", _am_free)

    def __init__(self, *a, **kw):
        raise TypeError("actor meshes are created with ProcMesh.spawn()")

    @classmethod
    def _wrap(cls, handle, class_name, endpoints, name, states, raw=frozenset()):
        self = object.__new__(cls)
        d = self.__dict__
        d["_h"] = handle
        d["_class_name"] = class_name
        d["_endpoints"] = endpoints
        d["_raw"] = raw  # names of raw endpoints (_ANY for a native mesh)
        d["_name"] = name
        d["_states"] = states
        d["_shape_cache"] = None
        return self

    def __getattr__(self, attr):
        if attr.startswith("__") or attr not in self.__dict__.get("_endpoints", ()):
            raise AttributeError(f"actor mesh {self._name!r} of {self._class_name} has no endpoint {attr!r}")
        ref = EndpointRef(self, attr, attr in self._raw)
        self.__dict__[attr] = ref
        return ref

    def endpoint(self, name: str) -> EndpointRef:
        """``mesh.endpoint("name")`` is ``mesh.name``, for endpoint names
        that are not Python identifiers or that clash with mesh methods
        (e.g. a native actor's ``slice`` or ``stop``)."""
        if name not in self._endpoints:
            raise AttributeError(f"actor mesh {self._name!r} of {self._class_name} has no endpoint {name!r}")
        return EndpointRef(self, name, name in self._raw)

    def _shape(self) -> _Shape:
        s = self._shape_cache
        if s is None:
            s = self.__dict__["_shape_cache"] = _owned_shape(lib.monarch_actor_mesh_shape, self._h)
        return s

    def _check_live(self):
        for st in self._states:
            if st.stopped:
                raise SupervisionError(
                    f"actor mesh {self._name!r} cannot be used: its {st.what} was stopped"
                )

    def _parts(self, ep: EndpointRef, args, kwargs, readers=None):
        """``(monarch_bytes[], n, keep)`` of a call's arguments (``readers``:
        how many actors receive them; default: all of this mesh)."""
        if ep._raw:
            what = f"{self._class_name}.{ep._name}"
            if kwargs:
                raise TypeError(f"raw endpoint {what} takes no keyword arguments")
            return _raw_parts(args, f"raw endpoint {what}")
        try:
            parts = _serial.dumps_call(args, kwargs, readers or self.__len__)
        except Exception as e:
            raise TypeError(
                f"cannot send the arguments of {self._class_name}.{ep._name}: {type(e).__name__}: {e}"
            ) from e
        arr, keep = _serial.to_c_parts(parts)
        return arr, len(parts), keep

    def _send(self, ep: EndpointRef, args, kwargs, mode):
        for st in self._states:
            if st.stopped:
                self._check_live()
        if ep._raw:
            return self._send_raw(ep, args, kwargs, mode)
        try:
            parts = _serial.dumps_call(
                args, kwargs, 1 if mode == CALL_ONE or mode == CALL_CHOOSE else self.__len__
            )
        except Exception as e:
            raise TypeError(
                f"cannot send the arguments of {self._class_name}.{ep._name}: {type(e).__name__}: {e}"
            ) from e
        arr, keep = _serial.to_c_parts(parts, _scr().one)
        convert = _convert_all if mode == CALL_ALL else _convert_one
        return self._call(ep, arr, len(parts), keep, mode, convert, f"{self._class_name}.{ep._name}")

    def _send_raw(self, ep: EndpointRef, args, kwargs, mode):
        what = f"{self._class_name}.{ep._name}"
        if kwargs:
            raise TypeError(f"raw endpoint {what} takes no keyword arguments")
        arr, n, keep = _raw_parts(args, f"raw endpoint {what}")
        convert = _RAW_CONVERT[(mode == CALL_ALL, self._raw is _ANY)]
        return self._call(ep, arr, n, keep, mode, convert, what)

    def _call(self, ep: EndpointRef, arr, n, keep, mode, convert, what):
        """Hand prepared parts to libmonarch; a Future unless broadcasting."""
        s = _scr()
        st = _am_call(self._h, ep._cname, arr, n, mode, s.fut)
        del keep
        if st:
            raise error_for(st, f"cannot call {what}")
        if mode == CALL_BROADCAST:
            return None
        return Future(_gc(s.fut[0], _future_free), convert, (self, ep))

    def _derive(self, handle, what) -> ActorMesh:
        return ActorMesh._wrap(
            handle,
            self._class_name,
            self._endpoints,
            self._name,
            (_StopState(f"actor mesh {what}"),) + self._states,
            self._raw,
        )

    def stop(self) -> Future:
        """Stop these actors (their procs keep running)."""
        self._check_live()
        out = _new("monarch_future **")
        check(lib.monarch_actor_mesh_stop(self._h, out), f"cannot stop actor mesh {self._name!r}")
        self._states[0].stopped = True
        return Future(_gc(out[0], _future_free), _convert_all, (self._shape, f"stopping {self._name}"))

    def __reduce__(self):
        out = _new("uint8_t **")
        n = _new("size_t *")
        check(lib.monarch_actor_mesh_to_ref(self._h, out, n))
        ref = take_buffer(out[0], n[0])
        return (_rebuild_actor_mesh, (ref, self._endpoints, self._class_name, self._name, self._raw))

    def __repr__(self):
        return f"<ActorMesh {self._name!r} of {self._class_name} {self._shape()}>"


def _child_pythonpath() -> str:
    """PYTHONPATH for worker procs: this process's import path (minus the
    interpreter's own directories, which the child has anyway), so user
    modules and a source-tree ``monarch`` import the same way there."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    entries = []
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        real = os.path.realpath(p)
        if any(real == pre or real.startswith(pre + os.sep) for pre in prefixes):
            continue
        if p not in entries:
            entries.append(p)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if pkg_root not in entries:
        entries.insert(0, pkg_root)
    old = os.environ.get("PYTHONPATH")
    if old:
        entries.extend(e for e in old.split(os.pathsep) if e and e not in entries)
    return os.pathsep.join(entries)


_this_proc_server = None
_this_proc_lock = threading.Lock()
# Actor meshes spawned on this_proc(), stopped (so their __cleanup__ runs)
# when the controller exits.
_this_proc_meshes: list = []


def _keep_for_exit(mesh) -> None:
    with _this_proc_lock:
        _this_proc_meshes[:] = [m for m in _this_proc_meshes if not m._states[0].stopped]
        _this_proc_meshes.append(mesh)


def _stop_this_proc_actors() -> None:
    """At exit, before the runtime is freed: stop the actors this process
    hosts, in the thread that serves them, so each one's ``__cleanup__``
    runs as it would on a worker proc that stops."""
    with _this_proc_lock:
        meshes, _this_proc_meshes[:] = list(_this_proc_meshes), []
    for mesh in meshes:
        if mesh._states[0].stopped or not runtime_is_live():
            continue
        try:
            mesh.stop().get(timeout=10)
        except Exception as e:  # noqa: BLE001 (exiting: report, go on)
            sys.stderr.write(f"monarch: stopping actor mesh {mesh._name!r} at exit: {e}\n")


def _ensure_this_proc_server():
    """Start the daemon thread that serves actors spawned on this_proc()."""
    global _this_proc_server
    with _this_proc_lock:
        if _this_proc_server is not None:
            return
        from ._server import Server

        rt = runtime()
        b = _new("bool *")
        check(lib.monarch_runtime_is_worker(rt, b))
        if b[0]:
            # A worker proc already serves its actors from its main loop.
            _this_proc_server = (None, None)
            return
        server = Server(rt)
        t = threading.Thread(target=server.serve, name="monarch-this-proc", daemon=True)
        t.start()
        _this_proc_server = (server, t)
        # Registered after the runtime's own exit hook, so it runs first.
        atexit.register(_stop_this_proc_actors)


class ProcMesh(_MeshTrait):
    """An n-d array of procs (OS processes); ``slice(**dims)``, ``flatten``,
    ``rename`` and ``split`` give other views of it."""

    _fns = _MeshFns("proc", _pm_free)

    def __init__(self, *a, **kw):
        raise TypeError("proc meshes are created with HostMesh.spawn_procs() or this_proc()")

    @classmethod
    def _wrap(cls, handle, states, is_this_proc=False):
        self = object.__new__(cls)
        self._h = handle
        self._states = states
        self._is_this_proc = is_this_proc
        self._shape_cache = None
        return self

    def _shape(self) -> _Shape:
        if self._shape_cache is None:
            self._shape_cache = _owned_shape(lib.monarch_proc_mesh_shape, self._h)
        return self._shape_cache

    def _check_live(self):
        for st in self._states:
            if st.stopped:
                raise SupervisionError(f"this proc mesh cannot be used: its {st.what} was stopped")

    def spawn(self, name: str, cls, *args, **kwargs) -> ActorMesh:
        """Spawn one actor of ``cls`` on every proc, constructed with
        ``cls(*args, **kwargs)``. Waits until every constructor has run;
        raises ActorError if any of them raised."""
        if not isinstance(cls, type) or not issubclass(cls, Actor):
            raise TypeError(f"spawn() needs a subclass of monarch.actor.Actor, not {cls!r}")
        if not isinstance(name, str) or not name:
            raise ValueError("spawn() needs a non-empty mesh name")
        _check_endpoint_kinds(cls)
        self._check_live()
        try:
            parts = _serial.dumps((cls, args, kwargs), self.__len__)
        except Exception as e:
            raise TypeError(
                f"cannot send {cls.__qualname__} and its constructor arguments: {type(e).__name__}: {e}"
            ) from e
        if self._is_this_proc:
            _ensure_this_proc_server()
        arr, keep = _serial.to_c_parts(parts)
        out_mesh = _new("monarch_actor_mesh **")
        out_ready = _new("monarch_future **")
        type_name = f"{cls.__module__}.{cls.__qualname__}".encode()
        ensure_watcher()
        claim_spawn_owner()
        st = lib.monarch_actor_mesh_spawn(
            self._h, name.encode(), type_name, arr, len(parts), out_mesh, out_ready
        )
        del keep
        if st:
            raise error_for(st, f"cannot spawn {cls.__qualname__}")
        mesh = ActorMesh._wrap(
            _gc(out_mesh[0], _am_free),
            cls.__qualname__,
            _endpoint_names(cls),
            name,
            (_StopState("actor mesh"),) + self._states,
            _endpoint_names(cls, raw_only=True),
        )
        if self._is_this_proc:
            _keep_for_exit(mesh)
        ready = Future(
            _gc(out_ready[0], _future_free), _convert_all, (mesh._shape, f"constructor of {cls.__qualname__}")
        )
        ready.get()
        return mesh

    def spawn_native(self, name: str, type_name: str, *args) -> ActorMesh:
        """Spawn one actor of type ``type_name`` on every proc, by name and
        without pickle: ``args`` are bytes-like, one payload part each.

        For procs running ``monarch worker --plugin LIB`` (see
        ``HostMesh.spawn_procs(plugins=...)``) ``type_name`` is a type the
        plugin registered (e.g. a C++ class exported with
        ``MONARCH_ACTOR``); for Python procs it is ``"module:Class"`` (the
        class is imported there and constructed with one ``bytes`` argument
        per part; see ``monarch._server``).

        Every endpoint of the result is raw: ``mesh.incr.call(b"...")`` sends
        its bytes-like arguments as parts and gives back ``bytes`` per
        point (``None`` for a reply without parts, a tuple of ``bytes`` for
        several). A failing endpoint raises ActorError with the actor's
        message. Waits until every constructor has run (ActorError if one
        failed)."""
        if not isinstance(name, str) or not name:
            raise ValueError("spawn_native() needs a non-empty mesh name")
        if not isinstance(type_name, str) or not type_name:
            raise ValueError("spawn_native() needs a non-empty actor type name")
        self._check_live()
        arr, n, keep = _raw_parts(args, f"spawn_native({type_name!r})")
        if self._is_this_proc:
            _ensure_this_proc_server()
        out_mesh = _new("monarch_actor_mesh **")
        out_ready = _new("monarch_future **")
        ensure_watcher()
        claim_spawn_owner()
        st = lib.monarch_actor_mesh_spawn(
            self._h, name.encode(), type_name.encode(), arr, n, out_mesh, out_ready
        )
        del keep
        if st:
            raise error_for(st, f"cannot spawn {type_name}")
        mesh = ActorMesh._wrap(
            _gc(out_mesh[0], _am_free), type_name, _ANY, name, (_StopState("actor mesh"),) + self._states, _ANY
        )
        if self._is_this_proc:
            _keep_for_exit(mesh)
        ready = Future(
            _gc(out_ready[0], _future_free), _RAW_CONVERT[(True, True)], (mesh._shape, f"constructor of {type_name}")
        )
        ready.get()
        return mesh

    def _derive(self, handle, what) -> ProcMesh:
        return ProcMesh._wrap(handle, (_StopState(f"proc mesh {what}"),) + self._states, self._is_this_proc)

    def stop(self) -> Future:
        """Stop the procs (asked first, killed after a grace period). The
        future completes when all have exited."""
        if self._is_this_proc:
            raise ValueError("this_proc() cannot be stopped; it is the controller's own proc")
        if self._states[0].stopped:
            return Future._ready(None)
        out = _new("monarch_future **")
        check(lib.monarch_proc_mesh_stop(self._h, out), "cannot stop proc mesh")
        self._states[0].stopped = True
        return Future(_gc(out[0], _future_free), _convert_none)

    def logging_option(self, stream_to_client: bool = True, aggregate_window_sec: float | None = None):
        """How output of procs on other hosts reaches this process: each
        stdout/stderr line is printed here with a ``[rank N]`` prefix when
        ``stream_to_client`` (the default); with ``aggregate_window_sec``,
        identical lines arriving within that window are printed once as
        ``[K similar lines] text``. Applies to the whole controller
        process. (Local procs write to the controller's stdout/stderr
        directly.)"""
        ms = 0 if not aggregate_window_sec else max(1, int(aggregate_window_sec * 1000))
        check(lib.monarch_runtime_logging_option(runtime(), bool(stream_to_client), ms))

    def __repr__(self):
        return f"<ProcMesh {self._shape()}>"


def _hm_free(h):
    lib.monarch_host_mesh_free(h)


class HostMesh:
    """A set of hosts. ``this_host()`` is the controller's machine, a host
    mesh with no dimensions. ``monarch.job.HostListJob`` (or
    ``HostMesh.attach``) gives a mesh of hosts running ``monarch host``
    agents, with one dimension ``hosts``; ``slice(hosts=...)`` narrows it."""

    def __init__(self):
        self._extent = {}
        self._h = None

    @classmethod
    def attach(cls, addrs) -> HostMesh:
        """Attach the running host agents at ``addrs`` (``"IP:PORT"`` as
        printed by ``monarch host``): authenticated with the job secret
        (``MONARCH_JOB_TOKEN``, which must be set before the first runtime
        use and equal the agents'). A mesh with dimension ``hosts``."""
        addrs = [str(a) for a in addrs]
        if not addrs:
            raise ValueError("HostMesh.attach() needs at least one host address")
        c_addrs, keep = _c_strings(addrs)
        out = _new("monarch_host_mesh **")
        st = lib.monarch_host_mesh_attach(runtime(), c_addrs, len(addrs), out)
        del keep
        if st:
            raise error_for(st, "cannot attach hosts")
        return cls._wrap(_gc(out[0], _hm_free))

    @classmethod
    def _wrap(cls, handle) -> HostMesh:
        self = object.__new__(cls)
        self._h = handle
        shape = _owned_shape(lib.monarch_host_mesh_shape, handle)
        self._extent = dict(zip(shape.labels, shape.sizes))
        return self

    @property
    def extent(self) -> dict:
        return dict(self._extent)

    def slice(self, **dims) -> HostMesh:
        """The hosts at ``dims`` (an int fixes a dimension and removes it;
        a ``slice`` narrows it), e.g. ``hosts.slice(hosts=slice(0, 2))``."""
        if self._h is None:
            raise ValueError("this_host() has no dimensions to slice")
        h = self._h
        for label, sel in dims.items():
            out = _new("monarch_host_mesh **")
            if isinstance(sel, slice):
                start = 0 if sel.start is None else sel.start
                stop = lib.MONARCH_SLICE_END if sel.stop is None else sel.stop
                step = 1 if sel.step is None else sel.step
                st = lib.monarch_host_mesh_slice_range(h, label.encode(), start, stop, step, out)
            elif isinstance(sel, int) and not isinstance(sel, bool) and sel >= 0:
                st = lib.monarch_host_mesh_slice_index(h, label.encode(), sel, out)
            else:
                raise TypeError(f"slice({label}=...) takes a non-negative int or a slice, not {sel!r}")
            if st:
                raise error_for(st, f"cannot slice host mesh at {label}={sel!r}")
            h = _gc(out[0], _hm_free)
        return HostMesh._wrap(h)

    def spawn_procs(
        self, per_host: dict | None = None, bootstrap=None, name: str | None = None, plugins=None
    ) -> ProcMesh:
        """Start ``per_host`` procs (e.g. ``{"gpus": 4}``) on every host;
        the result has the host mesh's dimensions followed by ``per_host``'s.

        Each proc runs ``bootstrap`` (an argv; default: this interpreter
        with ``-m monarch._bootstrap``, hosting Python actors). ``plugins``
        (paths of plugin libraries, e.g. C++ actors built with
        monarch/plugin.hpp) instead runs ``monarch worker --plugin LIB ...``
        (the binary from ``monarch_binary()``); spawn their actor types
        with ``ProcMesh.spawn_native``. ``name`` is accepted as upstream
        does but not used yet: supervision events call the mesh
        ``procs.<n>``."""
        per_host = dict(per_host or {})
        if plugins is not None:
            if bootstrap is not None:
                raise ValueError("spawn_procs() takes bootstrap or plugins, not both")
            if isinstance(plugins, (str, bytes, os.PathLike)):
                plugins = [plugins]
            bootstrap = [monarch_binary(), "worker"]
            for p in plugins:
                if not os.path.exists(p):
                    raise FileNotFoundError(f"plugin library {os.fsdecode(p)!r} does not exist")
                bootstrap += ["--plugin", os.path.abspath(p)]
        dims = dict(per_host) if self._h is not None else {**self._extent, **per_host}
        labels = [_new("char[]", k.encode()) for k in dims]
        for k, v in dims.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"size of dimension {k!r} must be a non-negative int, not {v!r}")
        c_labels = _new("char *[]", labels) if labels else _NULL
        c_sizes = _new("size_t[]", list(dims.values())) if dims else _NULL
        argv_py = [sys.executable, "-m", "monarch._bootstrap"] if bootstrap is None else list(bootstrap)
        argv = [_new("char[]", os.fsencode(a)) for a in argv_py]
        c_argv = _new("char *[]", argv)
        out = _new("monarch_proc_mesh **")
        # Workers import user modules (and a source-tree monarch) the way
        # this process does.
        env = [_new("char[]", b"PYTHONPATH=" + os.fsencode(_child_pythonpath()))]
        # Procs' output is piped (to the runtime here, or to their host
        # agent) and printed line by line with a rank prefix: keep Python
        # from block-buffering it.
        env.append(_new("char[]", b"PYTHONUNBUFFERED=1"))
        c_env = _new("char *[]", env)
        ensure_watcher()
        claim_spawn_owner()
        if self._h is not None:
            st = lib.monarch_host_mesh_spawn_procs(
                self._h, c_labels, c_sizes, len(dims), c_argv, len(argv), c_env, len(env), out
            )
        else:
            st = lib.monarch_proc_mesh_spawn(runtime(), c_labels, c_sizes, len(dims), c_argv, len(argv), c_env, 1, out)
        if st:
            raise error_for(st, "cannot spawn procs")
        return ProcMesh._wrap(_gc(out[0], _pm_free), (_StopState("proc mesh"),))

    def __repr__(self):
        return f"<HostMesh {self._extent}>"


def monarch_binary() -> str:
    """Path of the ``monarch`` CLI (which runs ``monarch worker``): from
    ``$MONARCH_BIN``; else the one bundled in the installed package; else
    ``<repo>/target/release/monarch`` when running from the source tree;
    else ``monarch`` on ``PATH``. FileNotFoundError if there is none."""
    import shutil

    from ._lib import _PKG_DIR, _REPO_ROOT

    env = os.environ.get("MONARCH_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise FileNotFoundError(f"MONARCH_BIN={env!r} is not an executable file")
        return env
    for cand in (os.path.join(_PKG_DIR, "bin", "monarch"), os.path.join(_REPO_ROOT, "target", "release", "monarch")):
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    found = shutil.which("monarch")
    if found:
        return found
    raise FileNotFoundError(
        "cannot find the monarch binary: set MONARCH_BIN, install the package (it bundles one), "
        "or build it with `cargo build --release -p monarch-cli` in the source tree"
    )


_this_host = None


def this_host() -> HostMesh:
    """The host mesh of the controller's own machine (no dimensions)."""
    global _this_host
    if _this_host is None:
        _this_host = HostMesh()
    return _this_host


_this_proc = None


def this_proc() -> ProcMesh:
    """The controller's own proc as a mesh with no dimensions; actors spawned
    on it run in this process (served by a daemon thread)."""
    global _this_proc
    if _this_proc is None:
        out = _new("monarch_proc_mesh **")
        check(lib.monarch_runtime_this_proc(runtime(), out))
        _this_proc = ProcMesh._wrap(_gc(out[0], _pm_free), (_StopState("proc"),), is_this_proc=True)
    return _this_proc
