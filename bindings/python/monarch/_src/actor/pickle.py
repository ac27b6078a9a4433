"""Serialization of Python values into libmonarch payload parts, and back.

A value travels as one or more parts: ``parts[0]`` is a cloudpickle stream
(protocol 5); ``parts[1:]`` are the out-of-band buffers that the pickler
handed to ``buffer_callback`` (numpy arrays, ``pickle.PickleBuffer`` over
bytes/bytearray, ...), in order, so large buffers are never copied into the
pickle stream.

On receipt the out-of-band parts are exposed as memoryviews over the memory
that libmonarch lends us (no copy). That memory belongs to an event or a
value-mesh handle; each view keeps a :class:`HandleOwner` alive, and the
handle is freed only when the last view (and whatever was built on it, e.g.
a numpy array) is gone.

Large out-of-band buffers (at least ``MONARCH_DATA_PLANE_THRESHOLD`` bytes,
default 1 MiB; 0 disables) do not travel through the control socket: the
sender registers each as an RDMA buffer (``monarch._src.rdma.payload``) and sends its
small descriptor in its place, wrapping the pickle stream in a
``_Remote`` record that says which parts are descriptors; the receiver
pulls the bytes one-sided (same host: ``process_vm_readv``) into fresh
memory and releases them. The sender keeps its buffer registered and alive
until every receiver has released it (N for a call to N actors). The
receiver reads the sender's memory when it unpickles the message, so a
sender that modifies an array after sending it, before the receivers have
handled the message, changes what they receive (as with any one-sided
transfer).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle

from ..._lib import ffi
from ..rdma.payload import pull_payloads, register_payload

_PROTOCOL = 5
_dumps = pickle.dumps
_cp_dumps = cloudpickle.dumps
_SIMPLE = frozenset([int, float, str, bytes, bool, type(None)])
_loads = pickle.loads
_buffer = ffi.buffer
_from_buffer = ffi.from_buffer
_new = ffi.new
_gc = ffi.gc
_THRESHOLD = int(os.environ.get("MONARCH_DATA_PLANE_THRESHOLD", str(1 << 20)))


class _Remote:
    """Part 0 of a payload whose large buffers travel on the data plane:
    the real pickle stream, and the indices (among parts[1:]) of the parts
    that are buffer descriptors."""

    __slots__ = ("stream", "remote", "as_bytes")

    def __init__(self, stream, remote, as_bytes=()):
        self.stream = stream
        self.remote = remote
        self.as_bytes = as_bytes  # indices whose buffer was a bytes object

    def __reduce__(self):
        return (_Remote, (self.stream, self.remote, self.as_bytes))

    def resolve(self, buffers):
        pulled = pull_payloads([buffers[i] for i in self.remote], [i in self.as_bytes for i in self.remote])
        bufs = list(buffers)
        for i, b in zip(self.remote, pulled):
            bufs[i] = b
        return _loads(self.stream, buffers=bufs)


def _to_data_plane(first, bufs, readers):
    n = readers() if callable(readers) else readers
    parts = [None]
    remote = []
    as_bytes = []
    for i, b in enumerate(bufs):
        if b.nbytes >= _THRESHOLD:
            parts.append(register_payload(b, n))
            remote.append(i)
            if type(b.obj) is bytes:
                as_bytes.append(i)
        else:
            parts.append(b)
    parts[0] = _dumps(_Remote(first, tuple(remote), tuple(as_bytes)), _PROTOCOL)
    return parts


class _BigBytes:
    """A large ``bytes`` value sent out of band: protocol 5 pickles bytes in
    the stream (copied through the control socket), so a big one is wrapped
    as ``bytes(PickleBuffer)``, which takes the data plane and becomes the
    same ``bytes`` again on load (the receiver pulls it into a new bytes
    object, so ``bytes(...)`` there is free)."""

    __slots__ = ("b",)

    def __init__(self, b):
        self.b = b

    def __reduce_ex__(self, protocol):
        return (bytes, (pickle.PickleBuffer(self.b),))


def _big(v) -> bool:
    return type(v) is bytes and _THRESHOLD > 0 and len(v) >= _THRESHOLD


def _wrap_big(args: tuple, kwargs: dict):
    """Top-level large bytes arguments wrapped as ``_BigBytes``."""
    args = tuple(_BigBytes(a) if _big(a) else a for a in args)
    if kwargs:
        kwargs = {k: _BigBytes(v) if _big(v) else v for k, v in kwargs.items()}
    return args, kwargs


def dumps(obj: Any, readers: int | Callable[[], int] = 1) -> list:
    """Serialize ``obj`` into a list of buffers (parts). ``readers`` (an
    int, or a callable giving it) is how many receivers will unpickle the
    parts: data-plane buffers are released after that many pulls."""
    if type(obj) in _SIMPLE:
        if not _big(obj):
            return [_dumps(obj, _PROTOCOL)]
        obj = _BigBytes(obj)
    bufs = []

    def cb(pb):
        try:
            raw = pb.raw()
        except BufferError:
            return True  # not contiguous: serialize in band
        bufs.append(raw)
        return False

    first = _cp_dumps(obj, protocol=_PROTOCOL, buffer_callback=cb)
    if bufs:
        if _THRESHOLD > 0:
            for b in bufs:
                if b.nbytes >= _THRESHOLD:
                    return _to_data_plane(first, bufs, readers)
        return [first, *bufs]
    return [first]


_NO_ARGS = _dumps(((), {}), _PROTOCOL)


def dumps_call(args: tuple, kwargs: dict, readers: int | Callable[[], int] = 1) -> list:
    """Serialize the (args, kwargs) of a call; plain pickle when every
    argument is a simple builtin value (much cheaper than cloudpickle)."""
    if not args and not kwargs:
        return [_NO_ARGS]
    big = False
    if not kwargs:
        for a in args:
            t = type(a)
            if t not in _SIMPLE:
                break
            if t is bytes and _big(a):
                big = True
        else:
            if not big:
                return [_dumps((args, kwargs), _PROTOCOL)]
    if _THRESHOLD > 0:
        args, kwargs = _wrap_big(args, kwargs)
    return dumps((args, kwargs), readers)


def to_c_parts(parts: list, one: Any = None) -> tuple[Any, Any]:
    """Build a ``monarch_bytes[]`` for ``parts``. Returns (array, keepalive).

    ``one`` is an optional reusable ``monarch_bytes[1]`` that serves the
    common single-part case without allocating an array per call."""
    if one is not None and len(parts) == 1:
        cp = _from_buffer(parts[0])
        one[0].ptr = cp
        one[0].len = len(cp)
        return one, cp
    n = len(parts)
    arr = _new("monarch_bytes[]", n)
    keep = []
    for i, p in enumerate(parts):
        cp = _from_buffer(p)
        keep.append(cp)
        arr[i].ptr = cp
        arr[i].len = len(cp)
    return arr, keep


class HandleOwner:
    """Owns a libmonarch handle whose borrowed memory may still be viewed;
    frees it when garbage-collected (or when ``free()`` is called and no
    view was handed out)."""

    __slots__ = ("ptr", "free_fn", "__weakref__")

    def __init__(self, ptr: Any, free_fn: Callable[[Any], Any]) -> None:
        self.ptr = ptr
        self.free_fn = free_fn

    def __del__(self):
        ptr, self.ptr = self.ptr, None
        if ptr is not None:
            try:
                self.free_fn(ptr)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


def _nothing(_p):
    return None


def borrowed_view(ptr: Any, length: int, owner: HandleOwner) -> memoryview:
    """A memoryview over ``length`` bytes at ``ptr`` that keeps ``owner``
    (and so the memory) alive as long as the view or anything built on it
    lives."""
    if length == 0:
        return memoryview(b"")
    # The destructor closure references `owner`; the gc'd cdata is kept by
    # the cffi buffer, which is kept by the memoryview.
    cd = _gc(ffi.cast("uint8_t *", ptr), lambda _p, _o=owner: None)
    return memoryview(_buffer(cd, length))


def loads_parts(ptrs_lens: Sequence[tuple[Any, int]], owner: HandleOwner | None) -> Any:
    """Unpickle from a sequence of (ptr, len): part 0 is read in place (it is
    fully consumed before returning); the others become borrowed views."""
    p0, n0 = ptrs_lens[0]
    stream = _buffer(p0, n0)
    if len(ptrs_lens) == 1:
        return _loads(stream)
    buffers = [borrowed_view(p, n, owner) for (p, n) in ptrs_lens[1:]]
    obj = _loads(stream, buffers=buffers)
    if type(obj) is _Remote:
        return obj.resolve(buffers)
    return obj
