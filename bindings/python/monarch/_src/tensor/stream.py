"""Streams: ordered queues of tensor ops on every worker. Ops of one stream
run in issue order; ops of different streams may overlap (each stream is a
thread on the worker), and an op that reads a tensor of another stream
waits until that tensor exists."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

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
