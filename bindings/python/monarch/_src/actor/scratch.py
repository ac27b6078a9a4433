"""Per-thread C out-parameters, reused by every call a thread makes."""

from __future__ import annotations

import threading

from ..._lib import ffi

_new = ffi.new


class Scratch:
    """Out-parameters reused by the calls of one thread. Reached through
    ``thread_scratch()``: one thread-local lookup per operation, then plain slot
    reads (every attribute read of a ``threading.local`` costs as much as a
    small function call)."""

    __slots__ = ("fut", "vm", "n", "is_err", "err", "data", "len", "one", "rank")

    def __init__(self):
        self.fut = _new("monarch_future **")
        self.vm = _new("monarch_value_mesh **")
        self.n = _new("size_t *")
        self.is_err = _new("bool *")
        self.err = _new("char **")
        self.data = _new("uint8_t **")
        self.len = _new("size_t *")
        self.one = _new("monarch_bytes[1]")
        self.rank = _new("uint64_t *")


_tls = threading.local()


def thread_scratch() -> Scratch:
    """This thread's ``Scratch``."""
    try:
        return _tls.s
    except AttributeError:
        s = _tls.s = Scratch()
        return s
