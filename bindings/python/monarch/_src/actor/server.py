"""Hosting Python actors: the event loop run by worker procs (see
``monarch._bootstrap``) and by the controller's ``this_proc()`` thread.

Protocol between Python callers and Python actors (all parts are produced by
``monarch._src.actor.pickle``: part 0 a pickle stream, the rest out-of-band
buffers):

* spawn event: ``type_name`` is ``f"{cls.__module__}.{cls.__qualname__}"``,
  the parts are the pickled ``(cls, args, kwargs)``. Success is answered
  with no parts; a raising constructor is answered with an error (below),
  after which the runtime refuses messages to that actor.
* message event: ``method`` is the endpoint name, the parts are the pickled
  ``(args, kwargs)``. The answer is the pickled return value (an endpoint
  returning a coroutine is run to completion first).
* error answer: the message is the formatted remote traceback; the parts are
  the pickled exception when it pickles (else the pickled ``None``), so an
  error answer from Python always has at least one part. Error points with
  no parts come from the runtime itself (a proc died, an actor is gone).
* raw-bytes actors, for callers in other languages (a C/C++ controller
  through the C ABI, or Python's ``ProcMesh.spawn_native``), no pickle:

  - raw spawn event: ``type_name`` is ``"module:Class"`` (a colon, which a
    pickled spawn's ``module.qualname`` never has; ``Class`` may be a
    dotted qualname). The worker imports ``module`` (it must be importable
    there, e.g. through ``PYTHONPATH``), checks that ``Class`` is a
    subclass of ``monarch.actor.Actor`` and constructs it with one
    ``bytes`` positional argument per part (no parts: ``Class()``).
    Answered like a pickled spawn.
  - raw endpoint (``@endpoint(raw=True)``), whoever spawned the actor: a
    message to it is not unpickled; the endpoint is called with one
    ``bytes`` positional argument per part. Its return value is sent as
    the reply's parts: bytes-like -> one part, ``None`` -> no parts, a
    list/tuple of bytes-like -> one part each. Anything else, or an
    exception, is an error answer (below): its message is the text a C/C++
    caller sees.

* stop-actor event: ``__cleanup__`` is called when the actor defines it,
  then the event is answered with no parts.
* stop-proc event: the loop ends; the worker then frees its runtime and
  exits.
* ``@endpoint(explicit_response_port=True)``: the worker takes the reply
  port from the event (``monarch_event_take_port``) and passes it, as a
  ``Port``, before the arguments; the endpoint answers through it.
* ``async def`` endpoints run on the proc's event loop (one asyncio loop on
  its own thread per proc): a plain async endpoint is run to completion
  before the next event is handled; a ``@concurrent_endpoint`` is started
  as a task, answers through its reply port when it finishes, and the next
  event is handled at once. Inside a task, ``current_rank()``/``context()``
  come from a context variable set for that task.

Events are handled one at a time, in order of arrival. An answer that
cannot be delivered (its caller's proc is gone) is logged, and the proc
serves on.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import sys
import traceback
from typing import Any, Callable

from ..._lib import ERR_STOPPED, ERR_TIMEOUT, check, error_for, ffi, lib, take_buffer
from .actor_mesh import Actor
from .context import current_frame, message_point
from .endpoint import is_async, is_endpoint, is_raw
from .event_loop import in_task, run_coroutine, run_on_loop, start_on_loop
from .pickle import HandleOwner, dumps, loads_parts, to_c_parts
from .port import Port
from .shape import Point, shape_from_bytes
from .supervision import MeshFailure, run_supervise

EVENT_SPAWN = lib.MONARCH_EVENT_SPAWN
EVENT_MESSAGE = lib.MONARCH_EVENT_MESSAGE
EVENT_STOP_ACTOR = lib.MONARCH_EVENT_STOP_ACTOR
EVENT_STOP_PROC = lib.MONARCH_EVENT_STOP_PROC
EVENT_SUPERVISE = lib.MONARCH_EVENT_SUPERVISE

_event_free = lib.monarch_event_free
_reply_one_and_free = lib.monarch_event_reply_one_and_free
_next_event_header = lib.monarch_runtime_next_event_header
_event_info = lib.monarch_event_info
_event_nparts = lib.monarch_event_nparts
_event_part = lib.monarch_event_part
_event_wants_reply = lib.monarch_event_wants_reply
_event_reply = lib.monarch_event_reply
_event_reply_error = lib.monarch_event_reply_error
_next_event = lib.monarch_runtime_next_event
_NULL = ffi.NULL
_buffer = ffi.buffer
_string = ffi.string
_loads = pickle.loads
# What an endpoint returning None answers (the pickle of None).
_NONE_REPLY = dumps(None)[0]


_EMPTY_PARTS = ffi.new("monarch_bytes[1]")


class Hosted:
    """An actor hosted in this process: its instance, its key and point, and
    its endpoints as resolved so far."""

    __slots__ = ("instance", "rank", "shape_bytes", "_point", "key", "endpoints")
    # endpoints: method (bytes) -> (bound method, raw, explicit port, concurrent)

    def __init__(self, key: bytes, rank: int, shape_bytes: bytes) -> None:
        self.key = key
        self.instance = None
        self.rank = rank
        self.shape_bytes = shape_bytes
        self._point = None
        self.endpoints = {}

    def point(self) -> Point:
        """The actor's own point in the mesh it was spawned into."""
        if self._point is None:
            shape = shape_from_bytes(self.shape_bytes)
            self._point = Point._make(self.rank, shape)
        return self._point


def _format_exc(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _replied(status: int) -> None:
    """The status of sending an answer. An answer that cannot be delivered
    (typically its caller's proc is gone) is logged, and this proc serves
    on: a dead caller must not take a healthy proc down with it."""
    if status:
        sys.stderr.write(f"monarch: cannot deliver a reply: {error_for(status)}\n")


def _port_exception(port: Port, exc: BaseException) -> None:
    """Answer ``port`` with ``exc``; logged when that cannot be delivered."""
    try:
        port.exception(exc)
    except Exception as e:  # noqa: BLE001 - the caller is gone
        sys.stderr.write(f"monarch: cannot answer through a reply port: {e}\n{_format_exc(exc)}")


def _take_port(ev) -> Port:
    out = ffi.new("uint8_t **")
    n = ffi.new("size_t *")
    check(lib.monarch_event_take_port(ev, out, n))
    if out[0] == _NULL:
        return Port(None)
    return Port(take_buffer(out[0], n[0]))


class Server:
    """Runs the actors hosted in this process."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self.actors: dict[bytes, Hosted] = {}
        self._evp = ffi.new("monarch_event **")
        self._hdr = ffi.new("monarch_event_header *")
        self._current = None  # current_frame() of the thread in serve()
        self._kind = ffi.new("uint32_t *")
        self._actor = ffi.new("char **")
        self._method = ffi.new("char **")
        self._type = ffi.new("char **")
        self._n = ffi.new("size_t *")
        self._data = ffi.new("uint8_t **")
        self._len = ffi.new("size_t *")
        self._bool = ffi.new("bool *")
        self._rank = ffi.new("uint64_t *")
        self._shape = ffi.new("uint8_t **")
        self._shape_len = ffi.new("size_t *")
        self._one = ffi.new("monarch_bytes[1]")

    # -- helpers ---------------------------------------------------------

    def _parts(self, ev):
        st = _event_nparts(ev, self._n)
        if st:
            check(st)
        n = self._n[0]
        data, length = self._data, self._len
        if n == 1:
            st = _event_part(ev, 0, data, length)
            if st:
                check(st)
            return [(data[0], length[0])]
        out = []
        for i in range(n):
            check(_event_part(ev, i, data, length))
            out.append((data[0], length[0]))
        return out

    def _load(self, ev, owner_box):
        """Unpickle the event's parts; out-of-band parts become views that
        keep the event alive (owner_box[0] then owns it)."""
        parts = self._parts(ev)
        if not parts:
            return None
        if len(parts) == 1:
            return loads_parts(parts, None)
        owner = HandleOwner(ev, _event_free)
        owner_box[0] = owner
        return loads_parts(parts, owner)

    def _reply_ok(self, ev, value, parts=None):
        if parts is None:
            parts = dumps(value)
        arr, keep = to_c_parts(parts, self._one)
        st = _event_reply(ev, arr, len(parts))
        del keep
        if st:
            _replied(st)

    def _reply_raw(self, ev, result, method: bytes):
        """Answer a raw endpoint: its result as the reply's parts."""
        if result is None:
            _replied(_event_reply(ev, _EMPTY_PARTS, 0))
            return
        parts = result if isinstance(result, (list, tuple)) else [result]
        if any(isinstance(p, str) for p in parts):
            raise TypeError(
                f"raw endpoint {method.decode()!r} must return bytes-like, a list of them, or None; got str"
            )
        arr, keep = to_c_parts(parts)
        _replied(_event_reply(ev, arr, len(parts)))
        del keep

    def _reply_err(self, ev, exc: BaseException, what: str = ""):
        text = _format_exc(exc)
        if what:
            text = f"{what}\n{text}"
        try:
            parts = dumps(exc)
        except Exception:  # noqa: BLE001 - unpicklable exception
            parts = dumps(None)
        arr, keep = to_c_parts(parts)
        msg = text.encode("utf-8", "replace").replace(b"\0", b"")
        _replied(_event_reply_error(ev, msg, arr, len(parts)))
        del keep

    def _wants_reply(self, ev) -> bool:
        st = _event_wants_reply(ev, self._bool)
        if st:
            check(st)
        return self._bool[0]

    # -- the loop ----------------------------------------------------------

    def serve(self, timeout_ms: int = -1, stop_when: Callable[[], bool] | None = None) -> None:
        """Handle events until a stop-proc event (or the runtime stops)."""
        rt = self.rt
        evp = self._evp
        hdr = self._hdr
        # The loop's thread is the one whose handlers _message runs.
        self._current = current_frame()
        message = self._message
        handle = self.handle
        while True:
            st = _next_event_header(rt, timeout_ms, evp, hdr)
            if st:
                if st == ERR_TIMEOUT:
                    if stop_when is not None and stop_when():
                        return
                    continue
                if st == ERR_STOPPED:
                    return
                # The runtime handle is gone (freed at exit) or broken.
                return
            ev = evp[0]
            if hdr.kind == EVENT_MESSAGE:
                message(ev, hdr)
            elif not handle(ev):
                return

    def handle(self, ev: Any) -> bool:
        """Handle one event; returns False on stop-proc."""
        owner_box = [None]
        try:
            st = _event_info(ev, self._kind, self._actor, self._method, self._type)
            if st:
                check(st)
            kind = self._kind[0]
            if kind == EVENT_MESSAGE:
                self._message_slow(ev, _string(self._actor[0]), _string(self._method[0]), owner_box)
            elif kind == EVENT_SPAWN:
                self._spawn(ev, _string(self._actor[0]), _string(self._type[0]), owner_box)
            elif kind == EVENT_STOP_ACTOR:
                self._stop_actor(ev, _string(self._actor[0]))
            elif kind == EVENT_SUPERVISE:
                self._supervise(ev, _string(self._actor[0]))
            elif kind == EVENT_STOP_PROC:
                self._cleanup_all()
                return False
            return True
        finally:
            if owner_box[0] is None:
                _event_free(ev)
            # else: the owner frees the event once nothing views its memory

    def _raw_args(self, ev) -> list:
        """The event's parts, copied into ``bytes`` (raw spawns and raw
        endpoints)."""
        return [_buffer(p, n)[:] for p, n in self._parts(ev)]

    def _raw_class(self, type_name: bytes) -> type:
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

    def _spawn(self, ev, key: bytes, type_name: bytes, owner_box):
        check(lib.monarch_event_rank(ev, self._rank, self._shape, self._shape_len))
        n = self._shape_len[0]
        shape_bytes = ffi.buffer(self._shape[0], n)[:] if n else b""
        hosted = Hosted(key, self._rank[0], shape_bytes)
        current = current_frame()
        prev_event, prev_actor = current.event, current.actor
        current.event, current.actor = ev, hosted
        try:
            if b":" in type_name:
                cls, args, kwargs = self._raw_class(type_name), self._raw_args(ev), {}
            else:
                cls, args, kwargs = self._load(ev, owner_box)
            obj = cls.__new__(cls)
            hosted.instance = obj
            obj.__init__(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            self._reply_err(ev, exc)
            return
        finally:
            current.event, current.actor = prev_event, prev_actor
        self.actors[key] = hosted
        _replied(_event_reply(ev, _EMPTY_PARTS, 0))

    def _message(self, ev, h) -> None:
        """Handle a message event described by header ``h``; frees ``ev``
        (or hands it to the views of its out-of-band parts)."""
        wants = h.wants_reply
        if h.nparts != 1 or not wants:
            # Several parts (out-of-band buffers), none, or no reply:
            # the general path.
            owner_box = [None]
            try:
                self._message_slow(ev, _string(h.actor), _string(h.method), owner_box)
            finally:
                if owner_box[0] is None:
                    _event_free(ev)
            return
        key = _string(h.actor)
        method = _string(h.method)
        hosted = self.actors.get(key)
        entry = hosted.endpoints.get(method) if hosted is not None else None
        if entry is None or entry[1] or entry[2] or entry[3]:
            # Unknown actor or endpoint (resolved, or reported, by the
            # general path), raw, explicit-port or concurrent endpoints.
            owner_box = [None]
            try:
                self._message_slow(ev, key, method, owner_box)
            finally:
                if owner_box[0] is None:
                    _event_free(ev)
            return
        fn = entry[0]
        current = self._current
        prev_event, prev_actor = current.event, current.actor
        current.event, current.actor = ev, hosted
        try:
            args, kwargs = _loads(_buffer(h.part0, h.part0_len))
            result = fn(*args, **kwargs)
            if hasattr(result, "__await__"):
                result = run_coroutine(result, message_point(ev), hosted)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            current.event, current.actor = prev_event, prev_actor
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                _event_free(ev)
                raise
            try:
                self._reply_err(ev, exc)
            finally:
                _event_free(ev)
            return
        current.event, current.actor = prev_event, prev_actor
        if result is None:
            data = _NONE_REPLY
        else:
            try:
                parts = dumps(result)
                if len(parts) == 1:
                    data = parts[0]
                else:
                    data = None
                    self._reply_ok(ev, result, parts)
            except BaseException as exc:  # noqa: BLE001 - unpicklable result
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    _event_free(ev)
                    raise
                try:
                    self._reply_err(
                        ev, exc, f"endpoint {method.decode()!r} returned a value that cannot be sent:"
                    )
                finally:
                    _event_free(ev)
                return
            if data is None:
                _event_free(ev)
                return
        st = _reply_one_and_free(ev, data, len(data))
        if st:
            _replied(st)

    def _message_slow(self, ev, key: bytes, method: bytes, owner_box):
        hosted = self.actors.get(key)
        current = current_frame()
        prev_event, prev_actor = current.event, current.actor
        current.event, current.actor = ev, hosted
        try:
            if hosted is None:
                raise RuntimeError(f"no actor {key.decode()!r} in this proc")
            entry = hosted.endpoints.get(method)
            if entry is None:
                entry = self._endpoint(hosted, method)
            fn, raw, explicit, concurrent = entry
            if raw:
                result = fn(*self._raw_args(ev))
            else:
                args, kwargs = self._load(ev, owner_box)
                if explicit or concurrent:
                    try:
                        self._with_port(ev, hosted, fn, args, kwargs, explicit, concurrent)
                    finally:
                        current.event, current.actor = prev_event, prev_actor
                    return
                result = fn(*args, **kwargs)
            if hasattr(result, "__await__"):
                result = run_coroutine(result, message_point(ev), hosted)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            current.event, current.actor = prev_event, prev_actor
            if not self._wants_reply(ev):
                sys.stderr.write(
                    f"monarch: endpoint {method.decode()!r} of actor {key.decode()!r} "
                    f"raised with nobody waiting:\n{_format_exc(exc)}"
                )
            # With nobody waiting, the runtime fails the actor and reports
            # it to the mesh's owner.
            self._reply_err(ev, exc)
            return
        current.event, current.actor = prev_event, prev_actor
        if self._wants_reply(ev):
            try:
                if raw:
                    self._reply_raw(ev, result, method)
                else:
                    self._reply_ok(ev, result)
            except BaseException as exc:  # noqa: BLE001 - unpicklable result
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                self._reply_err(
                    ev, exc, f"endpoint {method.decode()!r} returned a value that cannot be sent:"
                )

    def _with_port(self, ev, hosted, fn, args, kwargs, explicit, concurrent):
        """Run an endpoint that answers through its reply port: one with
        ``explicit_response_port`` (the port is its first argument), or a
        concurrent one (a task on the event loop answers when it ends)."""
        port = _take_port(ev)
        try:
            if explicit:
                args = (port, *args)
            result = fn(*args, **kwargs)
            if hasattr(result, "__await__"):
                coro = in_task(result, message_point(ev), hosted)
                if concurrent:
                    cf = start_on_loop(coro)
                    cf.add_done_callback(lambda f: _answer_port(port, f, explicit))
                    return
                result = run_on_loop(coro)
            if not explicit:
                port.send(result)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            _port_exception(port, exc)

    def _endpoint(self, hosted: Hosted, method: bytes):
        name = method.decode()
        cls = type(hosted.instance)
        attr = getattr(cls, name, None)
        if attr is None or not (is_endpoint(attr) or (inspect.isfunction(attr) and not name.startswith("_"))):
            # A public plain method is called through as_endpoint(mesh.method).
            raise AttributeError(f"actor {cls.__qualname__} has no endpoint {name!r}")
        options = attr.options if is_endpoint(attr) else {}
        raw = is_raw(attr)
        explicit = not raw and bool(options.get("explicit_response_port"))
        concurrent = not raw and bool(options.get("concurrent")) and is_async(inspect.unwrap(attr))
        entry = (getattr(hosted.instance, name), raw, explicit, concurrent)
        hosted.endpoints[method] = entry
        return entry

    def _supervise(self, ev, key: bytes):
        """A mesh owned by actor ``key`` failed: ask its ``__supervise__``;
        answered OK when handled, with an error to escalate."""
        parts = self._parts(ev)
        failure = MeshFailure._decode(_buffer(parts[0][0], parts[0][1])[:])
        hosted = self.actors.get(key)
        handled, exc = False, None
        if hosted is not None:
            current = current_frame()
            prev_event, prev_actor = current.event, current.actor
            current.event, current.actor = None, hosted
            try:
                handled, exc = run_supervise(hosted.instance, failure)
            finally:
                current.event, current.actor = prev_event, prev_actor
        if handled:
            _replied(_event_reply(ev, _EMPTY_PARTS, 0))
        elif exc is not None:
            self._reply_err(ev, exc, f"__supervise__ of actor {key.decode()!r} raised on {failure.report()}\n")
        else:
            msg = f"actor {key.decode()!r} did not handle: {failure.report()}".encode("utf-8", "replace")
            _replied(_event_reply_error(ev, msg.replace(b"\0", b""), _EMPTY_PARTS, 0))

    def _cleanup_all(self):
        """The proc is stopping: run every actor's ``__cleanup__``."""
        for key in list(self.actors):
            hosted = self.actors.pop(key)
            cleanup = getattr(hosted.instance, "__cleanup__", None)
            if cleanup is None:
                continue
            current = current_frame()
            prev_event, prev_actor = current.event, current.actor
            current.event, current.actor = None, hosted
            try:
                r = cleanup(None) if _takes_arg(cleanup) else cleanup()
                if hasattr(r, "__await__"):
                    run_coroutine(r, hosted.point(), hosted)
            except Exception as exc:  # noqa: BLE001 - the proc stops anyway
                sys.stderr.write(f"monarch: __cleanup__ of {key.decode()!r} raised:\n{_format_exc(exc)}")
            finally:
                current.event, current.actor = prev_event, prev_actor

    def _stop_actor(self, ev, key: bytes):
        hosted = self.actors.pop(key, None)
        try:
            cleanup = getattr(hosted.instance, "__cleanup__", None) if hosted else None
            if cleanup is not None:
                current = current_frame()
                prev_event, prev_actor = current.event, current.actor
                current.event, current.actor = ev, hosted
                try:
                    r = cleanup(None) if _takes_arg(cleanup) else cleanup()
                    if hasattr(r, "__await__"):
                        run_coroutine(r)
                finally:
                    current.event, current.actor = prev_event, prev_actor
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            if self._wants_reply(ev):
                self._reply_err(ev, exc, "__cleanup__ raised:")
            return
        if self._wants_reply(ev):
            _replied(_event_reply(ev, _EMPTY_PARTS, 0))


def _answer_port(port, f, explicit):
    """Done-callback of a concurrent endpoint's task."""
    try:
        exc = f.exception()
        if exc is not None:
            port.exception(exc)
        elif not explicit:
            port.send(f.result())
    except BaseException as e:  # noqa: BLE001 - e.g. an unpicklable result
        _port_exception(port, e)


def _takes_arg(fn) -> bool:
    """Upstream's ``__cleanup__(self, exc)`` takes the exception (or None)."""
    try:
        return len(inspect.signature(fn).parameters) >= 1
    except (TypeError, ValueError):
        return False
