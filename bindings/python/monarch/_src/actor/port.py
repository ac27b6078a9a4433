"""Ports and channels, as upstream ``monarch.actor``'s ``Channel``,
``Port`` and ``PortReceiver``.

A ``Port`` is a reference to a port of some proc (opaque bytes made by
libmonarch: address, port id, slot); it pickles, so it can be handed to
another actor, and ``send``/``exception`` work from any thread of any proc
of the job. A ``PortReceiver`` is the receiving end, in the proc that
opened it: ``recv()`` gives a Future of the next value. All mechanism is in
libmonarch (``monarch_port_*``); this module only pickles values.
"""

from __future__ import annotations

import traceback
from typing import Any, Generic, TypeVar

from ..._lib import check, ffi, lib, runtime, take_buffer
from .future import Future
from .pickle import dumps, to_c_parts
from .shape import EMPTY_SHAPE, Shape
from .value_mesh import convert_one

T = TypeVar("T")


def _dumps_exc(exc: BaseException) -> list:
    try:
        return dumps(exc)
    except Exception:  # noqa: BLE001 - unpicklable exception
        return dumps(None)


def _empty_shape() -> Shape:
    return EMPTY_SHAPE


class Port(Generic[T]):
    """Where a value can be sent (a reply port or a channel's port).
    ``send(value)`` sends a value; ``exception(exc)`` sends an error, which
    the receiver sees raised (as ActorError, with ``exc`` as its cause)."""

    __slots__ = ("_ref",)

    def __init__(self, ref: bytes | None) -> None:
        self._ref = ref  # None: nobody listens (a broadcast's reply port)

    def send(self, value: T) -> None:
        if self._ref is None:
            return
        parts = dumps(value)
        arr, keep = to_c_parts(parts)
        st = lib.monarch_port_send(runtime(), self._ref, len(self._ref), arr, len(parts))
        del keep
        check(st, "cannot send to port")

    def exception(self, exc: BaseException) -> None:
        if self._ref is None:
            return
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        parts = _dumps_exc(exc)
        arr, keep = to_c_parts(parts)
        msg = text.encode("utf-8", "replace").replace(b"\0", b"")
        st = lib.monarch_port_send_error(runtime(), self._ref, len(self._ref), msg, arr, len(parts))
        del keep
        check(st, "cannot send to port")

    def __reduce__(self):
        return (Port, (self._ref,))

    def __repr__(self) -> str:
        return "<Port>" if self._ref is not None else "<Port (nobody listens)>"


class PortContext(tuple):
    """A future's context that also keeps its receiver (and so its port)
    alive until the future is gone."""

    def __new__(cls, ctx, keep):
        t = super().__new__(cls, ctx)
        t.keep = keep
        return t


class PortReceiver(Generic[T]):
    """The receiving end of a port of this proc. ``recv()`` returns a
    Future of the next value (values come in arrival order)."""

    __slots__ = ("_h", "_what", "__weakref__")

    def __init__(self, handle: Any, what: str = "port") -> None:
        self._h = ffi.gc(handle, lib.monarch_port_receiver_free)
        self._what = what

    def recv(self) -> Future[T]:
        out = ffi.new("monarch_future **")
        check(lib.monarch_port_receiver_recv(self._h, out))
        ctx = PortContext((_empty_shape, self._what), self)
        return Future(ffi.gc(out[0], lib.monarch_future_free), convert_one, ctx)

    def _port(self) -> Port[T]:
        out = ffi.new("uint8_t **")
        n = ffi.new("size_t *")
        check(lib.monarch_port_receiver_ref(self._h, out, n))
        return Port(take_buffer(out[0], n[0]))

    def __repr__(self) -> str:
        return f"<PortReceiver {self._what}>"


class Channel(Generic[T]):
    """``Channel.open()`` -> ``(Port, PortReceiver)``; ``Channel[int].open()``
    names the type of the values, as upstream."""

    @staticmethod
    def open(once: bool = False) -> tuple[Port[Any], PortReceiver[Any]]:
        """A new port of this proc: ``once=True`` takes one value only."""
        out = ffi.new("monarch_port_receiver **")
        check(lib.monarch_port_open(runtime(), bool(once), out))
        rx = PortReceiver(out[0], "channel")
        return rx._port(), rx
