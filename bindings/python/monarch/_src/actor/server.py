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
  its own thread per proc; a task's first step may run on the thread that
  took the message, see ``event_loop``): a plain async endpoint is run to
  completion before the actor's next event is handled; a ``@concurrent_endpoint`` is
  started as a task, answers through its reply port when it finishes, and
  the actor's next event is handled at once. Inside a task,
  ``current_rank()``/``context()`` come from a context variable set for
  that task. An actor's tasks are cancelled when it stops, before its
  ``__cleanup__``.

Failures (upstream's semantics): a constructor that raises, an endpoint
that raises a BaseException that is not an Exception, and an
``explicit_response_port`` endpoint that raises fail the actor
(``monarch_event_fail``): the caller gets the failure report (a
SupervisionError), later messages are refused, and the actor's owner hears
of it once. A plain Exception with a caller waiting is answered to that
caller (ActorError) and the actor lives on.

Each actor is its own sequential worker: its events are handled one at a
time, in order of arrival, on one thread (its ``__init__``, sync endpoints,
``__supervise__`` and ``__cleanup__``, so thread-locals set in ``__init__``
are seen by its endpoints), while the other actors of the proc go on
independently: an endpoint may block on another actor of its own proc. A
worker is a thread with a queue; at most one worker at a time waits in
libmonarch for the next event (the leader), runs it itself when it is for
one of its own actors (waking an idle worker to lead meanwhile), and else
hands it to its actor's worker. The first actor of a proc lives on the
serving thread itself, so a proc with one actor hands no event to another
thread. An answer that cannot be delivered (its caller's proc is gone) is
logged, and the proc serves on.
"""

from __future__ import annotations

import pickle
import sys
import threading
from collections import deque
from collections.abc import Callable
from time import monotonic as _monotonic
from typing import Any

from ..._lib import ERR_TIMEOUT, check, ffi, lib
from .context import current_frame, message_point
from .debugger import post_mortem, post_mortem_enabled
from .event_loop import cancel_tasks, in_task, run_coroutine, run_on_loop, start_on_loop, tracked
from .hosted import (
    Hosted,
    answer_port,
    format_exc,
    kills,
    port_exception,
    raw_class,
    replied,
    resolve_endpoint,
    take_port,
    takes_arg,
)
from .pickle import HandleOwner, dumps, loads_parts, to_c_parts
from .supervision import MeshFailure, run_supervise

EVENT_SPAWN = lib.MONARCH_EVENT_SPAWN
EVENT_MESSAGE = lib.MONARCH_EVENT_MESSAGE
EVENT_STOP_ACTOR = lib.MONARCH_EVENT_STOP_ACTOR
EVENT_STOP_PROC = lib.MONARCH_EVENT_STOP_PROC
EVENT_SUPERVISE = lib.MONARCH_EVENT_SUPERVISE

_event_free = lib.monarch_event_free
_reply_one_and_free = lib.monarch_event_reply_one_and_free
_next_event_header = lib.monarch_runtime_next_event_header
_event_nparts = lib.monarch_event_nparts
_event_part = lib.monarch_event_part
_event_wants_reply = lib.monarch_event_wants_reply
_event_reply = lib.monarch_event_reply
_event_reply_error = lib.monarch_event_reply_error
_event_fail = lib.monarch_event_fail
_buffer = ffi.buffer
_string = ffi.string
_loads = pickle.loads
# What an endpoint returning None answers (the pickle of None).
_NONE_REPLY = dumps(None)[0]


_EMPTY_PARTS = ffi.new("monarch_bytes[1]")
# How long a stopping proc waits for its actors' threads to clean up.
_STOP_JOIN_S = 10.0


class Server:
    """Runs the actors hosted in this process, each on its own worker (see
    the module's doc): which worker is home to which actor, which workers
    wait idle, whether one of them is taking events from libmonarch."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self.actors: dict[bytes, Hosted] = {}
        self._lock = threading.Lock()
        self._homes: dict[bytes, Worker] = {}
        self._idle: list[Worker] = []
        self._workers: set[Worker] = set()  # every worker thread but the main one
        self._leading = False  # a worker is taking the next event
        self._stopping = False
        self._run_cleanups = True  # run __cleanup__ when stopping (not once the runtime is gone)
        self._main: Worker | None = None
        self._timeout_ms = -1
        # MONARCH_DEBUG_POSTMORTEM: an endpoint's exception opens a debug
        # session first. Read here, not at import: a proc forked from the
        # zygote gets its environment after the import.
        self.post_mortem = post_mortem_enabled()
        self._stop_when: Callable[[], bool] | None = None

    def serve(self, timeout_ms: int = -1, stop_when: Callable[[], bool] | None = None) -> None:
        """Handle events until a stop-proc event (or the runtime stops)."""
        self._timeout_ms = timeout_ms
        self._stop_when = stop_when
        main = self._main = Worker(self, threaded=False)
        main.run()
        # Every actor's __cleanup__ runs on its own thread before the proc
        # goes on to free its runtime.
        deadline = _monotonic() + _STOP_JOIN_S
        with self._lock:
            others = list(self._workers)
        for w in others:
            w.thread.join(max(0.0, deadline - _monotonic()))

    # -- routing (called with self._lock held) ---------------------------

    def _hand_off(self) -> None:
        """While nobody takes events, an idle worker must: wake one."""
        if not self._leading and self._idle:
            w = self._idle.pop()
            w.cv.notify()

    def _give(self, w: Worker, item) -> None:
        w.queue.append(item)
        if w in self._idle:
            self._idle.remove(w)
            w.cv.notify()

    def _begin_stop(self, clean_up: bool) -> None:
        self._stopping = True
        self._run_cleanups = self._run_cleanups and clean_up
        idle, self._idle = self._idle, []
        for w in idle:
            w.cv.notify()

    def _home_for_spawn(self, key: bytes) -> Worker:
        """The worker that will run a newly spawned actor: the main worker
        while it hosts none (a proc with one actor hands no event to another
        thread), else a new one."""
        main = self._main
        if not main.keys:
            home = main
        else:
            home = Worker(self, threaded=True)
            self._workers.add(home)
        home.keys.add(key)
        self._homes[key] = home
        return home

    def _forget(self, key: bytes, w: Worker) -> None:
        self.actors.pop(key, None)
        if self._homes.get(key) is w:
            del self._homes[key]
        w.keys.discard(key)


class Worker:
    """A thread that runs the events of the actors whose home it is, one at
    a time, in order of arrival. While no other worker does, it takes the
    next event from libmonarch itself, and runs it at once when it is for
    one of its own actors (after waking an idle worker to take over)."""

    def __init__(self, server: Server, threaded: bool) -> None:
        self.server = server
        self.keys: set[bytes] = set()  # keys of the actors it runs
        self.queue: deque = deque()  # (event, header) handed to it
        self.cv = threading.Condition(server._lock)
        self._frame = None  # current_frame() of its thread
        self._evp = ffi.new("monarch_event **")
        self._hdr = ffi.new("monarch_event_header *")
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
        self.thread = None
        if threaded:
            self.thread = threading.Thread(target=self.run, name="monarch-actor", daemon=True)

    # -- the loop ----------------------------------------------------------

    def run(self) -> None:
        srv = self.server
        lock = srv._lock
        self._frame = current_frame()
        while True:
            lock.acquire()
            if self.queue:
                ev, h = self.queue.popleft()
                srv._hand_off()
                lock.release()
                self._handle_given(ev, h)
                continue
            if srv._stopping:
                lock.release()
                self._stop_all()
                return
            if not srv._leading:
                srv._leading = True
                lock.release()
                self._lead()
                continue
            if self is not srv._main and not self.keys:
                # Its actors are gone: the thread ends.
                srv._workers.discard(self)
                lock.release()
                return
            srv._idle.append(self)
            self.cv.wait()
            if self in srv._idle:
                srv._idle.remove(self)
            lock.release()

    def _lead(self) -> None:
        """Take events until one is ours (run here, after giving up the
        lead) or the proc stops; hand the others to their actors' workers."""
        srv = self.server
        evp, h = self._evp, self._hdr
        while True:
            st = _next_event_header(srv.rt, srv._timeout_ms, evp, h)
            if st:
                stop = st != ERR_TIMEOUT or (srv._stop_when is not None and srv._stop_when())
                with srv._lock:
                    srv._leading = False
                    if stop:
                        # Stopped, or the runtime handle is gone (freed at
                        # exit): leave without running cleanups.
                        srv._begin_stop(clean_up=False)
                    srv._hand_off()
                return
            ev = evp[0]
            kind = h.kind
            if kind == EVENT_MESSAGE and not srv._workers:
                # No other worker thread exists (only a leader creates one,
                # and we lead), so the message is ours and nobody else reads
                # the routing state: run it here and keep leading, without
                # the hand-off below (the common proc with one actor).
                self._message(ev, h)
                continue
            start = None
            with srv._lock:
                if kind == EVENT_STOP_PROC:
                    srv._leading = False
                    srv._begin_stop(clean_up=True)
                    _event_free(ev)
                    return
                key = _string(h.actor)
                home = srv._homes.get(key)
                if kind == EVENT_SPAWN and home is None:
                    home = srv._home_for_spawn(key)
                    if home.thread is not None:
                        start = home
                mine = home is None or home is self
                if mine:
                    srv._leading = False
                    srv._hand_off()
                else:
                    # A copy of the header: ours is overwritten by the next event.
                    copy = ffi.new("monarch_event_header *")
                    copy[0] = h[0]
                    srv._give(home, (ev, copy))
            if start is not None:
                start.thread.start()
            if mine:
                self._handle(ev, h)
                return

    def _handle_given(self, ev, h) -> None:
        """An event another worker took for one of our actors: the meshes
        its handler spawns are owned by that actor."""
        if h.kind != EVENT_STOP_ACTOR:
            lib.monarch_runtime_set_owner(self.server.rt, h.actor)
        self._handle(ev, h)

    def _handle(self, ev, h) -> None:
        if h.kind == EVENT_MESSAGE:
            self._message(ev, h)
            return
        owner_box = [None]
        try:
            kind = h.kind
            key = _string(h.actor)
            if kind == EVENT_SPAWN:
                self._spawn(ev, key, _string(h.type_name), owner_box)
            elif kind == EVENT_STOP_ACTOR:
                self._stop_actor(ev, key)
            elif kind == EVENT_SUPERVISE:
                self._supervise(ev, key)
        finally:
            if owner_box[0] is None:
                _event_free(ev)
            # else: the owner frees the event once nothing views its memory

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
            replied(st)

    def _reply_raw(self, ev, result, method: bytes):
        """Answer a raw endpoint: its result as the reply's parts."""
        if result is None:
            replied(_event_reply(ev, _EMPTY_PARTS, 0))
            return
        parts = result if isinstance(result, (list, tuple)) else [result]
        if any(isinstance(p, str) for p in parts):
            raise TypeError(
                f"raw endpoint {method.decode()!r} must return bytes-like, a list of them, or None; got str"
            )
        arr, keep = to_c_parts(parts)
        replied(_event_reply(ev, arr, len(parts)))
        del keep

    def _reply_err(self, ev, exc: BaseException, what: str = ""):
        text = format_exc(exc)
        if what:
            text = f"{what}\n{text}"
        self._answer_exception(ev, _event_reply_error, exc, text)

    @staticmethod
    def _answer_exception(ev, answer, exc: BaseException, text: str) -> None:
        """Answer ``ev`` through ``answer`` (the C function) with ``text`` and
        ``exc`` pickled (None when it cannot be)."""
        try:
            parts = dumps(exc)
        except Exception:  # noqa: BLE001 - unpicklable exception
            parts = dumps(None)
        arr, keep = to_c_parts(parts)
        msg = text.encode("utf-8", "replace").replace(b"\0", b"")
        replied(answer(ev, msg, arr, len(parts)))
        del keep

    def _fail(self, ev, hosted: Hosted | None, exc: BaseException | None = None, what: str = "") -> None:
        """The actor of ``ev`` has failed (``exc`` raised, as ``what`` says;
        None: it had failed before): libmonarch marks it failed, tells its
        owner once, and answers the waiting caller with the failure report."""
        if hosted is not None:
            hosted.failed = True
        if exc is None:
            replied(_event_fail(ev, b"", _EMPTY_PARTS, 0))
            return
        text = f"{what} {type(exc).__name__}: {exc}\n{format_exc(exc)}"
        self._answer_exception(ev, _event_fail, exc, text)

    def _wants_reply(self, ev) -> bool:
        st = _event_wants_reply(ev, self._bool)
        if st:
            check(st)
        return self._bool[0]

    def _raw_args(self, ev) -> list:
        """The event's parts, copied into ``bytes`` (raw spawns and raw
        endpoints)."""
        return [_buffer(p, n)[:] for p, n in self._parts(ev)]

    # -- handlers ----------------------------------------------------------

    def _spawn(self, ev, key: bytes, type_name: bytes, owner_box):
        check(lib.monarch_event_rank(ev, self._rank, self._shape, self._shape_len))
        n = self._shape_len[0]
        shape_bytes = ffi.buffer(self._shape[0], n)[:] if n else b""
        hosted = Hosted(key, self._rank[0], shape_bytes)
        self.server.actors[key] = hosted
        current = self._frame
        prev_event, prev_actor = current.event, current.actor
        current.event, current.actor = ev, hosted
        cls = None
        try:
            if b":" in type_name:
                cls, args, kwargs = raw_class(type_name), self._raw_args(ev), {}
            else:
                cls, args, kwargs = self._load(ev, owner_box)
            obj = cls.__new__(cls)
            hosted.instance = obj
            obj.__init__(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - a failure of the actor
            name = cls.__qualname__ if isinstance(cls, type) else type_name.decode("utf-8", "replace")
            self._fail(ev, hosted, exc, f"the constructor of {name} raised")
            return
        finally:
            current.event, current.actor = prev_event, prev_actor
        replied(_event_reply(ev, _EMPTY_PARTS, 0))

    def _message(self, ev, h) -> None:
        """Handle a message event described by header ``h``; frees ``ev``
        (or hands it to the views of its out-of-band parts)."""
        wants = h.wants_reply
        if h.nparts != 1 or not wants:
            # Several parts (out-of-band buffers), none, or no reply:
            # the general path.
            self._message_general(ev, _string(h.actor), _string(h.method))
            return
        key = _string(h.actor)
        method = _string(h.method)
        hosted = self.server.actors.get(key)
        entry = hosted.endpoints.get(method) if hosted is not None else None
        if entry is None or entry[1] or entry[2] or entry[3] or hosted.failed:
            # Unknown actor or endpoint (resolved, or reported, by the
            # general path), raw, explicit-port or concurrent endpoints.
            self._message_general(ev, key, method)
            return
        fn = entry[0]
        current = self._frame
        prev_event, prev_actor = current.event, current.actor
        current.event, current.actor = ev, hosted
        try:
            args, kwargs = _loads(_buffer(h.part0, h.part0_len))
            result = fn(*args, **kwargs)
            if hasattr(result, "__await__"):
                result = run_coroutine(result, message_point(ev), hosted)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            current.event, current.actor = prev_event, prev_actor
            try:
                if kills(exc):
                    self._fail(ev, hosted, exc, f"endpoint {method.decode()!r} raised")
                else:
                    if self.server.post_mortem:
                        post_mortem(exc, hosted)
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
            except Exception as exc:  # noqa: BLE001 - unpicklable result
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
            replied(st)

    def _message_general(self, ev, key: bytes, method: bytes) -> None:
        owner_box = [None]
        try:
            self._message_slow(ev, key, method, owner_box)
        finally:
            if owner_box[0] is None:
                _event_free(ev)

    def _message_slow(self, ev, key: bytes, method: bytes, owner_box):
        hosted = self.server.actors.get(key)
        if hosted is not None and hosted.failed:
            self._fail(ev, hosted)
            return
        current = self._frame
        prev_event, prev_actor = current.event, current.actor
        current.event, current.actor = ev, hosted
        raw = False
        try:
            if hosted is None:
                raise RuntimeError(f"no actor {key.decode()!r} in this proc")
            entry = hosted.endpoints.get(method)
            if entry is None:
                entry = resolve_endpoint(hosted, method)
            fn, raw, explicit, concurrent = entry
            if raw:
                result = fn(*self._raw_args(ev))
            else:
                args, kwargs = self._load(ev, owner_box)
                if explicit or concurrent:
                    try:
                        self._with_port(ev, hosted, method, fn, args, kwargs, explicit, concurrent)
                    finally:
                        current.event, current.actor = prev_event, prev_actor
                    return
                result = fn(*args, **kwargs)
            if hasattr(result, "__await__"):
                result = run_coroutine(result, message_point(ev), hosted)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            current.event, current.actor = prev_event, prev_actor
            if hosted is not None and kills(exc):
                self._fail(ev, hosted, exc, f"endpoint {method.decode()!r} raised")
                return
            if self.server.post_mortem and hosted is not None:
                post_mortem(exc, hosted)
            if not self._wants_reply(ev):
                sys.stderr.write(
                    f"monarch: endpoint {method.decode()!r} of actor {key.decode()!r} "
                    f"raised with nobody waiting:\n{format_exc(exc)}"
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
            except Exception as exc:  # noqa: BLE001 - unpicklable result
                self._reply_err(
                    ev, exc, f"endpoint {method.decode()!r} returned a value that cannot be sent:"
                )

    def _with_port(self, ev, hosted, method, fn, args, kwargs, explicit, concurrent):
        """Run an endpoint that answers through its reply port: one with
        ``explicit_response_port`` (the port is its first argument; raising
        kills the actor, as upstream), or a concurrent one (a task on the
        event loop answers when it ends)."""
        port = take_port(ev)
        try:
            if explicit:
                args = (port, *args)
            result = fn(*args, **kwargs)
            if hasattr(result, "__await__"):
                coro = in_task(result, message_point(ev), hosted)
                if concurrent:
                    if hosted.tasks is None:
                        hosted.tasks = set()
                    cf = start_on_loop(tracked(coro, hosted.tasks))
                    cf.add_done_callback(lambda f: answer_port(port, f, explicit))
                    return
                result = run_on_loop(coro)
            if not explicit:
                port.send(result)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            if explicit or kills(exc):
                self._fail(ev, hosted, exc, f"endpoint {method.decode()!r} raised")
                return
            port_exception(port, exc)

    def _supervise(self, ev, key: bytes):
        """A mesh owned by actor ``key`` failed: ask its ``__supervise__``;
        answered OK when handled, with an error to escalate."""
        parts = self._parts(ev)
        failure = MeshFailure._decode(_buffer(parts[0][0], parts[0][1])[:])
        hosted = self.server.actors.get(key)
        handled, exc = False, None
        if hosted is not None and not hosted.failed:
            current = self._frame
            prev_event, prev_actor = current.event, current.actor
            current.event, current.actor = None, hosted
            try:
                handled, exc = run_supervise(hosted.instance, failure)
            finally:
                current.event, current.actor = prev_event, prev_actor
        if handled:
            replied(_event_reply(ev, _EMPTY_PARTS, 0))
        elif exc is not None:
            self._reply_err(ev, exc, f"__supervise__ of actor {key.decode()!r} raised on {failure.report()}\n")
        else:
            msg = f"actor {key.decode()!r} did not handle: {failure.report()}".encode("utf-8", "replace")
            replied(_event_reply_error(ev, msg.replace(b"\0", b""), _EMPTY_PARTS, 0))

    def _clean_up(self, hosted: Hosted, ev) -> None:
        """An actor stops: its concurrent endpoint tasks are cancelled, then
        its ``__cleanup__`` runs (when it was constructed)."""
        if hosted.tasks is not None:
            run_on_loop(cancel_tasks(hosted.tasks))
        if hosted.failed:
            return
        cleanup = getattr(hosted.instance, "__cleanup__", None)
        if cleanup is None:
            return
        current = self._frame
        prev_event, prev_actor = current.event, current.actor
        current.event, current.actor = ev, hosted
        try:
            r = cleanup(None) if takes_arg(cleanup) else cleanup()
            if hasattr(r, "__await__"):
                run_coroutine(r, hosted.point(), hosted)
        finally:
            current.event, current.actor = prev_event, prev_actor

    def _stop_all(self):
        """The proc is stopping: clean up each of our actors."""
        srv = self.server
        with srv._lock:
            keys = list(self.keys)
            for key in keys:
                srv._homes.pop(key, None)
            self.keys.clear()
            if self is not srv._main:
                srv._workers.discard(self)
        for key in keys:
            hosted = srv.actors.pop(key, None)
            if hosted is None or not srv._run_cleanups:
                continue
            try:
                self._clean_up(hosted, None)
            except Exception as exc:  # noqa: BLE001 - the proc stops anyway
                sys.stderr.write(f"monarch: __cleanup__ of {key.decode()!r} raised:\n{format_exc(exc)}")

    def _stop_actor(self, ev, key: bytes):
        srv = self.server
        hosted = srv.actors.get(key)
        try:
            if hosted is not None:
                self._clean_up(hosted, ev)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            with srv._lock:
                srv._forget(key, self)
            if self._wants_reply(ev):
                self._reply_err(ev, exc, "__cleanup__ raised:")
            return
        with srv._lock:
            srv._forget(key, self)
        if self._wants_reply(ev):
            replied(_event_reply(ev, _EMPTY_PARTS, 0))


