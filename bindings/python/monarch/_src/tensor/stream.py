"""Streams: ordered queues of tensor ops on every worker. Ops of one stream
run in issue order; ops of different streams may overlap (each stream is a
thread on the worker), and an op that reads a tensor of another stream
waits until that tensor exists."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_local = threading.local()


class Stream:
    """A named stream (``Stream("comms")``); ``with s.activate():`` issues
    the ops of the block on it. The default stream is ``"main"``."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("a stream needs a non-empty name")
        self.name = name

    @contextlib.contextmanager
    def activate(self) -> Iterator[Stream]:
        stack = _stack()
        stack.append(self)
        try:
            yield self
        finally:
            stack.pop()

    def borrow(self, t: Any, mutable: bool = False) -> tuple[Any, Any]:
        """``(borrowed, borrow)``: the distributed tensor ``t`` for use on
        this stream, without a copy, and its lease (``Borrow``). The
        borrowed tensor has ``t``'s value as of this call (ops issued on
        ``t``'s stream before it run first). Until ``borrow.drop()`` (or the
        end of ``with borrow:``) neither stream may write ``t``, or, with
        ``mutable=True``, this stream may write it and ``t``'s stream may
        not use it at all (``BorrowError`` when such an op is issued). After
        the drop the borrowed tensor and its views are unusable, and ops
        issued on ``t``'s stream run after this stream's ops issued before
        the drop."""
        # The tensor lends itself (``DTensor._lend_to``): streams exist
        # before and without distributed tensors.
        lend = getattr(t, "_lend_to", None)
        if lend is None:
            raise TypeError(f"Stream.borrow() lends a distributed tensor, not {type(t).__name__}")
        return lend(self, mutable)

    def __repr__(self) -> str:
        return f"<Stream {self.name!r}>"


MAIN = Stream("main")


def _stack() -> list:
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = [MAIN]
    return s


def get_active_stream() -> Stream:
    return _stack()[-1]
