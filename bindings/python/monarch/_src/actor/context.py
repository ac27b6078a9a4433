"""Where running code is: the actor and message a handler runs for.

The thread that handles an actor's events sets its ``Frame`` (the event and
the hosted actor) around each handler; an async endpoint's task carries
``(message Point, hosted actor)`` in the ``task_context`` variable instead.
``current_rank()``, ``current_size()`` and ``context()`` read them; in the
controller's own code both are empty.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from ..._lib import check, ffi, lib
from .scratch import thread_scratch
from .shape import EMPTY_SHAPE, Point, shape_from_bytes


class Frame:
    """What ``current_rank()``/``context()`` see on the thread that runs an
    actor's handler (one per thread, from ``current_frame()``; a plain
    object, so the handler loop sets it without a thread-local lookup per
    message)."""

    __slots__ = ("event", "actor")

    def __init__(self):
        self.event = None  # the event being handled (borrowed, valid while handling)
        self.actor = None  # hosted actor handling it (server.Hosted)


_tls = threading.local()


def current_frame() -> Frame:
    """This thread's ``Frame``."""
    try:
        return _tls.current
    except AttributeError:
        c = _tls.current = Frame()
        return c


# (message Point, hosted actor) of the async task running an endpoint.
task_context: contextvars.ContextVar = contextvars.ContextVar("monarch_task_context")


class ActorAbort(BaseException):
    """Raised by ``context().actor_instance.abort(reason)``: not an
    ``Exception``, so ordinary ``except Exception`` handlers let it through
    and the actor fails (its owner is told, with ``reason``)."""


class ActorInstance:
    """The actor the running code belongs to (``context().actor_instance``)."""

    __slots__ = ("_hosted",)

    def __init__(self, hosted: Any) -> None:
        self._hosted = hosted

    @property
    def rank(self) -> Point:
        """The actor's own point in the mesh it was spawned into."""
        if self._hosted is None:
            return Point._make(0, EMPTY_SHAPE)
        return self._hosted.point()

    @property
    def actor_id(self) -> str:
        return self._hosted.key.decode() if self._hosted is not None else "controller"

    @property
    def name(self) -> str:
        """The name of the actor's mesh (``"client"`` in the controller)."""
        if self._hosted is None:
            return "client"
        return self.actor_id.rsplit(".", 1)[0]

    def abort(self, reason: str | None = None) -> None:
        """Stop the running actor as failed, with ``reason``: raises
        ``ActorAbort`` (a ``BaseException``), which the actor's endpoint
        lets propagate; the failure goes to the actor's owner as a
        supervision event. In the controller, the process exits with status
        1 after printing ``reason``."""
        why = reason or "actor aborted"
        if self._hosted is None:
            import sys

            sys.stderr.write(f"monarch: abort: {why}\n")
            sys.stderr.flush()
            raise SystemExit(1)
        raise ActorAbort(why)


class Context:
    """What the running code knows about where it runs."""

    def __init__(self, hosted: Any, event: Any) -> None:
        self.actor_instance = ActorInstance(hosted)
        self._event = event
        self._point = None

    @property
    def message_rank(self) -> Point:
        """The point of the current message in the (possibly sliced) mesh
        it was sent to; ``current_rank()`` is the same."""
        if self._point is not None:
            return self._point
        return message_point(self._event)


_point_cache: dict[tuple[int, bytes], Point] = {}
_event_rank = lib.monarch_event_rank
_buffer = ffi.buffer


def message_point(ev: Any) -> Point:
    """The point of event ``ev`` in the mesh its message was sent to (one
    object per distinct point: building it costs more than a short
    endpoint)."""
    if ev is None:
        return Point._make(0, EMPTY_SHAPE)
    s = thread_scratch()
    st = _event_rank(ev, s.rank, s.data, s.len)
    if st:
        check(st)
    n = s.len[0]
    key = (s.rank[0], _buffer(s.data[0], n)[:] if n else b"")
    p = _point_cache.get(key)
    if p is None:
        p = Point._make(key[0], shape_from_bytes(key[1]))
        if len(_point_cache) >= 4096:
            _point_cache.clear()
        _point_cache[key] = p
    return p


def current_rank() -> Point:
    """The point of the running actor in the mesh the current message was
    sent to (in the controller: a point with no dimensions)."""
    tc = task_context.get(None)
    if tc is not None:
        return tc[0]
    return message_point(current_frame().event)


def current_size() -> dict[str, int]:
    """Sizes of the mesh the current message was sent to."""
    return current_rank().extent


def current_actor_name() -> str:
    """The running actor's id (``"<mesh name>.<id>"``; ``"controller"`` in
    the controller's own code)."""
    return context().actor_instance.actor_id


def context() -> Context:
    """The running actor and message (in the controller: neither)."""
    tc = task_context.get(None)
    if tc is not None:
        c = Context(tc[1], None)
        c._point = tc[0]
        return c
    cur = current_frame()
    return Context(cur.actor, cur.event)
