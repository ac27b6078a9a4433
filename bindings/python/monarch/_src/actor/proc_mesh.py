"""Proc meshes: ``ProcMesh`` (an n-d array of procs, on which actors are
spawned) and ``this_proc()`` (the controller's own proc, whose actors a
daemon thread of this process serves).
"""

from __future__ import annotations

import atexit
import importlib
import sys
import threading
from typing import Any

from ..._lib import SupervisionError, check, error_for, ffi, lib, runtime, runtime_is_live, take_buffer
from . import interrupt
from .actor_mesh import A, Actor, ActorMesh, StopState, raw_parts
from .endpoint import ANY_ENDPOINT, check_endpoint_kinds, endpoint, endpoint_names, plain_method_names
from .future import Future, convert_none
from .pickle import dumps, to_c_parts
from .server import Server
from .shape import MeshFns, MeshTrait, Shape, owned_shape
from .supervision import claim_spawn_owner, ensure_watcher
from .value_mesh import RAW_CONVERT

_gc = ffi.gc
_new = ffi.new
_future_free = lib.monarch_future_free
_am_free = lib.monarch_actor_mesh_free
_pm_free = lib.monarch_proc_mesh_free


_this_proc_server = None
_this_proc_lock = threading.Lock()
# Actor meshes spawned on this_proc(), stopped (so their __cleanup__ runs)
# when the controller exits.
_this_proc_meshes: list = []


def _check_no_nul(what: str, name: str) -> None:
    """C strings end at NUL: a name holding one would be cut short, not refused."""
    if "\0" in name:
        raise ValueError(f"{what} {name[:64]!r} contains the control character '\\0'")


def _keep_for_exit(mesh) -> None:
    with _this_proc_lock:
        _this_proc_meshes[:] = [m for m in _this_proc_meshes if not m._states[0].stopped]
        _this_proc_meshes.append(mesh)


def _stop_this_proc_actors() -> None:
    """At exit, before the runtime is freed: stop the actors this process
    hosts, in the thread that serves them, so each one's ``__cleanup__``
    runs as it would on a worker proc that stops."""
    with _this_proc_lock:
        meshes, _this_proc_meshes[:] = list(_this_proc_meshes), []
    for mesh in meshes:
        if mesh._states[0].stopped or not runtime_is_live():
            continue
        try:
            ActorMesh.stop(mesh).get(timeout=10)
        except Exception as e:  # noqa: BLE001 (exiting: report, go on)
            sys.stderr.write(f"monarch: stopping actor mesh {mesh._name!r} at exit: {e}\n")


def this_proc_is_served() -> bool:
    """Whether this process already serves actors of its own (a worker
    proc, or a controller that spawned on ``this_proc()``)."""
    with _this_proc_lock:
        if _this_proc_server is not None:
            return True
    b = _new("bool *")
    check(lib.monarch_runtime_is_worker(runtime(), b))
    return bool(b[0])


def on_this_proc_server_thread() -> bool:
    """Whether the calling thread is the one serving ``this_proc()``'s
    actors (which cannot wait for a constructor it must run itself)."""
    with _this_proc_lock:
        served = _this_proc_server
    return served is not None and served[1] is threading.current_thread()


def _ensure_this_proc_server():
    """Start the daemon thread that serves actors spawned on this_proc()."""
    global _this_proc_server
    with _this_proc_lock:
        if _this_proc_server is not None:
            return
        rt = runtime()
        b = _new("bool *")
        check(lib.monarch_runtime_is_worker(rt, b))
        if b[0]:
            # A worker proc already serves its actors from its main loop.
            _this_proc_server = (None, None)
            return
        # Ctrl-C also interrupts the actors' threads blocked in get().
        interrupt.install()
        server = Server(rt)
        t = threading.Thread(target=server.serve, name="monarch-this-proc", daemon=True)
        t.start()
        _this_proc_server = (server, t)
        # Registered after the runtime's own exit hook, so it runs first.
        atexit.register(_stop_this_proc_actors)


class ProcMesh(MeshTrait):
    """An n-d array of procs (OS processes); ``slice(**dims)``, ``flatten``,
    ``rename`` and ``split`` give other views of it."""

    _fns = MeshFns("proc", _pm_free)

    def __init__(self, *a: Any, **kw: Any) -> None:
        raise TypeError("proc meshes are created with HostMesh.spawn_procs() or this_proc()")

    @classmethod
    def _wrap(cls, handle, states, is_this_proc=False, is_ref=False):
        self = object.__new__(cls)
        self._h = handle
        self._states = states
        self._is_this_proc = is_this_proc
        self._is_ref = is_ref  # received in a message: the procs are not ours to stop
        self._shape_cache = None
        return self

    def __reduce__(self):
        """A reference to these procs (this view of them): the receiver can
        spawn actors on them, not stop them."""
        if self._is_this_proc:
            # Actors spawned on this proc from elsewhere are served by it.
            _ensure_this_proc_server()
        out = _new("uint8_t **")
        n = _new("size_t *")
        check(lib.monarch_proc_mesh_to_ref(self._h, out, n))
        return (_rebuild_proc_mesh, (take_buffer(out[0], n[0]),))

    def _shape(self) -> Shape:
        if self._shape_cache is None:
            self._shape_cache = owned_shape(lib.monarch_proc_mesh_shape, self._h)
        return self._shape_cache

    def _check_live(self):
        for st in self._states:
            if st.stopped:
                raise SupervisionError(f"this proc mesh cannot be used: its {st.what} was stopped")

    def spawn(self, name: str, cls: type[A], *args: Any, **kwargs: Any) -> ActorMesh[A]:
        """Spawn one actor of ``cls`` on every proc, constructed with
        ``cls(*args, **kwargs)``. Returns at once, without waiting for the
        constructors (as upstream): a constructor that raises is a
        supervision failure of its actor (the owner's ``__supervise__``,
        else ``unhandled_fault_hook``), and calls to the mesh then raise
        SupervisionError naming the constructor's exception."""
        if not isinstance(cls, type) or not issubclass(cls, Actor):
            raise TypeError(f"spawn() needs a subclass of monarch.actor.Actor, not {cls!r}")
        if not isinstance(name, str) or not name:
            raise ValueError("spawn() needs a non-empty mesh name")
        _check_no_nul("actor mesh name", name)
        check_endpoint_kinds(cls)
        ActorMesh.check_endpoint_names(cls.__qualname__, endpoint_names(cls))
        self._check_live()
        try:
            parts = dumps((cls, args, kwargs), self.__len__)
        except Exception as e:
            raise TypeError(
                f"cannot send {cls.__qualname__} and its constructor arguments: {type(e).__name__}: {e}"
            ) from e
        if self._is_this_proc:
            _ensure_this_proc_server()
        arr, keep = to_c_parts(parts)
        out_mesh = _new("monarch_actor_mesh **")
        out_ready = _new("monarch_future **")
        type_name = f"{cls.__module__}.{cls.__qualname__}".encode()
        ensure_watcher()
        claim_spawn_owner()
        st = lib.monarch_actor_mesh_spawn(
            self._h, name.encode(), type_name, arr, len(parts), out_mesh, out_ready
        )
        del keep
        if st:
            raise error_for(st, f"cannot spawn {cls.__qualname__}")
        mesh = ActorMesh._wrap(
            _gc(out_mesh[0], _am_free),
            cls.__qualname__,
            endpoint_names(cls),
            name,
            (StopState("actor mesh"),) + self._states,
            endpoint_names(cls, raw_only=True),
            plain_method_names(cls) - endpoint_names(cls),
        )
        mesh.__dict__["_actor_class"] = cls
        if self._is_this_proc:
            _keep_for_exit(mesh)
        # As upstream, spawn does not wait for the constructors: one that
        # raises fails its actor (a supervision failure for the mesh's
        # owner; calls to the mesh raise SupervisionError).
        _future_free(out_ready[0])
        return mesh

    def spawn_native(self, name: str, type_name: str, *args: Any) -> ActorMesh[Any]:
        """Spawn one actor of type ``type_name`` on every proc, by name and
        without pickle: ``args`` are bytes-like, one payload part each.

        For procs running ``monarch worker --plugin LIB`` (see
        ``HostMesh.spawn_procs(plugins=...)``) ``type_name`` is a type the
        plugin registered (e.g. a C++ class exported with
        ``MONARCH_ACTOR``); for Python procs it is ``"module:Class"`` (the
        class is imported there and constructed with one ``bytes`` argument
        per part; see ``monarch._src.actor.server``).

        Every endpoint of the result is raw: ``mesh.incr.call(b"...")`` sends
        its bytes-like arguments as parts and gives back ``bytes`` per
        point (``None`` for a reply without parts, a tuple of ``bytes`` for
        several). A failing endpoint raises ActorError with the actor's
        message. Waits until every constructor has run (ActorError if one
        failed)."""
        if not isinstance(name, str) or not name:
            raise ValueError("spawn_native() needs a non-empty mesh name")
        if not isinstance(type_name, str) or not type_name:
            raise ValueError("spawn_native() needs a non-empty actor type name")
        _check_no_nul("actor mesh name", name)
        _check_no_nul("actor type name", type_name)
        self._check_live()
        arr, n, keep = raw_parts(args, f"spawn_native({type_name!r})")
        if self._is_this_proc:
            _ensure_this_proc_server()
        out_mesh = _new("monarch_actor_mesh **")
        out_ready = _new("monarch_future **")
        ensure_watcher()
        claim_spawn_owner()
        st = lib.monarch_actor_mesh_spawn(
            self._h, name.encode(), type_name.encode(), arr, n, out_mesh, out_ready
        )
        del keep
        if st:
            raise error_for(st, f"cannot spawn {type_name}")
        mesh = ActorMesh._wrap(
            _gc(out_mesh[0], _am_free),
            type_name,
            ANY_ENDPOINT,
            name,
            (StopState("actor mesh"),) + self._states,
            ANY_ENDPOINT,
        )
        if self._is_this_proc:
            _keep_for_exit(mesh)
        ready = Future(
            _gc(out_ready[0], _future_free), RAW_CONVERT[(True, True)], (mesh._shape, f"constructor of {type_name}")
        )
        ready.get()
        return mesh

    def _derive(self, handle, what) -> ProcMesh:
        return ProcMesh._wrap(
            handle, (StopState(f"proc mesh {what}"),) + self._states, self._is_this_proc, self._is_ref
        )

    def stop(self) -> Future[None]:
        """Stop the procs (asked first, killed after a grace period). The
        future completes when all have exited."""
        if self._is_this_proc:
            raise ValueError("this_proc() cannot be stopped; it is the controller's own proc")
        if self._is_ref:
            raise ValueError(
                "this proc mesh was received in a message: only the process that spawned it can stop it"
            )
        if self._states[0].stopped:
            return Future._ready(None)
        out = _new("monarch_future **")
        check(lib.monarch_proc_mesh_stop(self._h, out), "cannot stop proc mesh")
        self._states[0].stopped = True
        return Future(_gc(out[0], _future_free), convert_none)

    def activate(self) -> Any:
        """``with mesh.activate():`` torch calls in the block make and use
        distributed tensors on these procs (see ``monarch.fetch_shard``)."""
        return _tensor_api().activate(self)

    def rank(self, dims: Any) -> Any:
        """A distributed int64 scalar: each proc's coordinate along ``dims``
        (a name), or its row-major rank over several (a sequence of names)."""
        return _tensor_api().rank(self, dims)

    def logging_option(
        self,
        stream_to_client: bool = True,
        aggregate_window_sec: float | None = None,
        level: int | None = None,
    ) -> Future[None]:
        """How procs' output reaches this process, as upstream: each
        stdout/stderr line is printed here with a ``[rank N]`` prefix when
        ``stream_to_client`` (the default). With ``aggregate_window_sec``,
        lines arriving within that window that differ only in numbers or
        ids are printed once, as the first of them with their count and
        ranks: ``[8 similar lines, ranks 0-7] step 12 loss 0.53``. Stream and
        window apply to the whole controller process. ``level`` (a
        ``logging`` level) is set on the root logger of every proc of this
        mesh. Applied when this returns; the Future (complete) may be
        awaited, as upstream code does."""
        if aggregate_window_sec is not None and (
            isinstance(aggregate_window_sec, bool) or not aggregate_window_sec >= 0
        ):
            raise ValueError(f"aggregate_window_sec must be >= 0 seconds, not {aggregate_window_sec!r}")
        ms = 0 if not aggregate_window_sec else max(1, int(aggregate_window_sec * 1000))
        check(lib.monarch_runtime_logging_option(runtime(), bool(stream_to_client), ms))
        if level is not None:
            if isinstance(level, bool) or not isinstance(level, int):
                raise TypeError(f"level must be a logging level (an int), not {level!r}")
            setter = self.spawn("logging_level", _LogLevel)
            setter.set_level.call(level).get()
            setter.stop().get()
        return Future._ready(None)

    def __repr__(self) -> str:
        return f"<ProcMesh {self._shape()}>"


def _rebuild_proc_mesh(ref: bytes) -> ProcMesh:
    out = _new("monarch_proc_mesh **")
    check(lib.monarch_proc_mesh_from_ref(runtime(), ref, len(ref), out), "cannot rebuild proc mesh")
    return ProcMesh._wrap(_gc(out[0], _pm_free), (StopState("proc mesh"),), is_ref=True)


class _LogLevel(Actor):
    """Sets the root logger's level in a proc (``logging_option(level=...)``)."""

    @endpoint
    def set_level(self, level: int) -> None:
        import logging

        logging.getLogger().setLevel(level)


def _tensor_api():
    # Tensor support needs torch, so it is loaded on first use.
    return importlib.import_module("monarch._src.tensor.api")


_this_proc = None


def this_proc() -> ProcMesh:
    """The controller's own proc as a mesh with no dimensions; actors spawned
    on it run in this process (served by a daemon thread)."""
    global _this_proc
    if _this_proc is None:
        out = _new("monarch_proc_mesh **")
        check(lib.monarch_runtime_this_proc(runtime(), out))
        _this_proc = ProcMesh._wrap(_gc(out[0], _pm_free), (StopState("proc"),), is_this_proc=True)
    return _this_proc
