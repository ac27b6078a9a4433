"""An actor hosted in this process (``Hosted``: its instance, key, point,
endpoints and state) and the small pieces that answer for it: logging an
answer that cannot be delivered, the reply port of an explicit-port
endpoint, which exceptions kill an actor, resolving a raw spawn's class and
an endpoint by name. ``server`` runs actors with them."""

from __future__ import annotations

import importlib
import inspect
import sys
import traceback
from typing import Any

from ..._lib import SupervisionError, check, error_for, ffi, lib, take_buffer
from .actor_mesh import Actor
from .endpoint import is_async, is_endpoint, is_raw
from .port import Port
from .shape import Point, shape_from_bytes

_NULL = ffi.NULL


class Hosted:
    """An actor hosted in this process: its instance, its key and point, its
    endpoints as resolved so far, the worker whose thread runs it, and its
    running concurrent endpoint tasks."""

    __slots__ = ("instance", "rank", "shape_bytes", "_point", "key", "endpoints", "failed", "tasks")
    # endpoints: method (bytes) -> (bound method, raw, explicit port, concurrent)

    def __init__(self, key: bytes, rank: int, shape_bytes: bytes) -> None:
        self.key = key
        self.instance = None
        self.rank = rank
        self.shape_bytes = shape_bytes
        self._point = None
        self.endpoints = {}
        self.failed = False  # its constructor raised or an endpoint killed it
        self.tasks = None  # set of its concurrent endpoint tasks, once it has one

    def point(self) -> Point:
        """The actor's own point in the mesh it was spawned into."""
        if self._point is None:
            shape = shape_from_bytes(self.shape_bytes)
            self._point = Point._make(self.rank, shape)
        return self._point


def format_exc(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def replied(status: int) -> None:
    """The status of sending an answer. An answer that cannot be delivered
    (typically its caller's proc is gone) is logged, and this proc serves
    on: a dead caller must not take a healthy proc down with it."""
    if status:
        sys.stderr.write(f"monarch: cannot deliver a reply: {error_for(status)}\n")


def port_exception(port: Port, exc: BaseException) -> None:
    """Answer ``port`` with ``exc``; logged when that cannot be delivered."""
    try:
        port.exception(exc)
    except Exception as e:  # noqa: BLE001 - the caller is gone
        sys.stderr.write(f"monarch: cannot answer through a reply port: {e}\n{format_exc(exc)}")


class _ReplyPort(Port):
    """The reply port an explicit-port endpoint answers through: an answer
    that cannot be delivered (its caller's proc is gone) is logged, as
    every answer of this proc is, instead of failing the endpoint (which
    would kill the actor)."""

    __slots__ = ()

    def send(self, value: Any) -> None:
        try:
            Port.send(self, value)
        except SupervisionError as e:
            sys.stderr.write(f"monarch: cannot deliver a reply: {e}\n")

    def exception(self, exc: BaseException) -> None:
        try:
            Port.exception(self, exc)
        except SupervisionError as e:
            sys.stderr.write(f"monarch: cannot deliver a reply: {e}\n")


def take_port(ev) -> Port:
    out = ffi.new("uint8_t **")
    n = ffi.new("size_t *")
    check(lib.monarch_event_take_port(ev, out, n))
    if out[0] == _NULL:
        return _ReplyPort(None)
    return _ReplyPort(take_buffer(out[0], n[0]))


def kills(exc: BaseException) -> bool:
    """Whether an endpoint raising ``exc`` kills its actor (as upstream: a
    BaseException that is not an Exception)."""
    return not isinstance(exc, Exception)


def raw_class(type_name: bytes) -> type:
    """The Actor subclass named by a raw spawn's ``module:Class``."""
    module_name, _, qualname = type_name.decode("utf-8", "replace").partition(":")
    if not module_name or not qualname:
        raise ValueError(f"raw spawn type {type_name.decode()!r} is not 'module:Class'")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type) or not issubclass(obj, Actor):
        raise TypeError(f"{type_name.decode()!r} is not a subclass of monarch.actor.Actor")
    return obj


def resolve_endpoint(hosted: Hosted, method: bytes):
    name = method.decode()
    cls = type(hosted.instance)
    attr = getattr(cls, name, None)
    plain = inspect.isfunction(attr) and not name.startswith("_")
    if attr is None or not (is_endpoint(attr) or plain):
        # A public plain method is called through as_endpoint(mesh.method).
        raise AttributeError(f"actor {cls.__qualname__} has no endpoint {name!r}")
    options = attr.options if is_endpoint(attr) else {}
    raw = is_raw(attr)
    explicit = not raw and bool(options.get("explicit_response_port"))
    concurrent = not raw and bool(options.get("concurrent")) and is_async(attr._fn if is_endpoint(attr) else attr)
    entry = (getattr(hosted.instance, name), raw, explicit, concurrent)
    hosted.endpoints[method] = entry
    return entry


def answer_port(port, f, explicit):
    """Done-callback of a concurrent endpoint's task."""
    try:
        exc = f.exception()
        if exc is not None:
            port.exception(exc)
        elif not explicit:
            port.send(f.result())
    except BaseException as e:  # noqa: BLE001 - e.g. an unpicklable result
        port_exception(port, e)


def takes_arg(fn) -> bool:
    """Upstream's ``__cleanup__(self, exc)`` takes the exception (or None)."""
    try:
        return len(inspect.signature(fn).parameters) >= 1
    except (TypeError, ValueError):
        return False
