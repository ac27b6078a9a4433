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
"""

from __future__ import annotations

import pickle

import cloudpickle

from ._lib import ffi

_PROTOCOL = 5
_dumps = pickle.dumps
_cp_dumps = cloudpickle.dumps
_SIMPLE = frozenset([int, float, str, bytes, bool, type(None)])
_loads = pickle.loads
_buffer = ffi.buffer
_from_buffer = ffi.from_buffer
_new = ffi.new
_gc = ffi.gc


def dumps(obj) -> list:
    """Serialize ``obj`` into a list of buffers (parts)."""
    if type(obj) in _SIMPLE:
        return [_dumps(obj, _PROTOCOL)]
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
        return [first, *bufs]
    return [first]


def dumps_call(args: tuple, kwargs: dict) -> list:
    """Serialize the (args, kwargs) of a call; plain pickle when every
    argument is a simple builtin value (much cheaper than cloudpickle)."""
    if not kwargs:
        for a in args:
            if type(a) not in _SIMPLE:
                break
        else:
            return [_dumps((args, kwargs), _PROTOCOL)]
    return dumps((args, kwargs))


def to_c_parts(parts: list, one=None):
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

    def __init__(self, ptr, free_fn):
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


def borrowed_view(ptr, length: int, owner: HandleOwner) -> memoryview:
    """A memoryview over ``length`` bytes at ``ptr`` that keeps ``owner``
    (and so the memory) alive as long as the view or anything built on it
    lives."""
    if length == 0:
        return memoryview(b"")
    # The destructor closure references `owner`; the gc'd cdata is kept by
    # the cffi buffer, which is kept by the memoryview.
    cd = _gc(ffi.cast("uint8_t *", ptr), lambda _p, _o=owner: None)
    return memoryview(_buffer(cd, length))


def loads_parts(ptrs_lens, owner: HandleOwner | None):
    """Unpickle from a sequence of (ptr, len): part 0 is read in place (it is
    fully consumed before returning); the others become borrowed views."""
    p0, n0 = ptrs_lens[0]
    stream = _buffer(p0, n0)
    if len(ptrs_lens) == 1:
        return _loads(stream)
    buffers = [borrowed_view(p, n, owner) for (p, n) in ptrs_lens[1:]]
    return _loads(stream, buffers=buffers)
