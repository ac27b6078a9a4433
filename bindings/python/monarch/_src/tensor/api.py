"""The public tensor functions: ``fetch_shard``, ``inspect``, ``remote``,
``mesh.activate()``, ``mesh.rank(dim)`` and ``endpoint.rref(...)``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, Callable

import torch

from ..actor.future import Future
from . import dtensor
from .controller import controller_for
from .dtensor import DTensor, _meta_of, controller_of, issue_call, to_wire
from .stream import get_active_stream
from .tree import tree_flatten, tree_map
from .wire import LANDING_MIN, Landing, opened

# Seconds a fetch waits before it checks that every proc of the mesh lives.
LIVENESS_EVERY = 1.0


def _coords(coordinates: dict | None, kw: dict) -> dict:
    c = dict(coordinates or {})
    c.update(kw)
    return c


class LocalFuture:
    """A Future whose value is unpickled as local tensors, also when waited
    on under ``mesh.activate()``. With ``ctl``, a wait that lasts also
    watches the mesh: a lost proc fails it with the SupervisionError of
    the loss (workers waiting for that proc's part of a collective would
    otherwise never answer)."""

    __slots__ = ("_fut", "_ctl")

    def __init__(self, fut: Future, ctl: Any = None) -> None:
        self._fut = fut
        self._ctl = ctl

    def get(self, timeout: float | None = None) -> Any:
        with torch._C.DisableTorchFunction():
            return self._get(timeout)

    def _get(self, timeout: float | None) -> Any:
        if self._ctl is None:
            return self._fut.get(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return self._fut.get(LIVENESS_EVERY if left is None else min(LIVENESS_EVERY, left))
            except TimeoutError:
                if left is not None and left <= LIVENESS_EVERY:
                    raise
            self._ctl.check_alive(None if deadline is None else max(0.0, deadline - time.monotonic()))

    result = get

    def done(self) -> bool:
        return self._fut.done()

    # Future's own, over this class's get.
    exception = Future.exception

    def __await__(self):
        with torch._C.DisableTorchFunction():
            return (yield from self._fut.__await__())


class ShardFuture(LocalFuture):
    """The Future of ``fetch_shard``: the worker's answer is the shard, or
    word that it wrote the shard into ``landing``."""

    __slots__ = ("_landing", "_value")

    def __init__(self, fut: Future, ctl: Any, landing: Landing | None) -> None:
        super().__init__(fut, ctl)
        self._landing = landing
        self._value: Any = None

    def _get(self, timeout: float | None) -> Any:
        if self._value is not None:
            return self._value[0]
        try:
            landed, value = opened(super()._get(timeout))
            if landed:
                value = self._landing.tensor()
        except TimeoutError:
            raise  # may be waited on again
        except BaseException:
            self._close()
            raise
        self._close()
        self._value = (value,)
        return value

    def _close(self) -> None:
        if self._landing is not None:
            self._landing.close()
            self._landing = None


def fetch_shard(t: Any, coordinates: dict | None = None, **kw: int) -> LocalFuture:
    """A Future of the shard of ``t`` on the proc at ``coordinates`` (dims
    not given are 0), as a ``torch.Tensor`` at the controller. Ops on the
    tensor issued before run first. A worker error in the ops that made it
    is raised by ``.result()``/``.get()`` with the worker's traceback."""
    if not isinstance(t, DTensor):
        return LocalFuture(Future._ready(t))
    ctl = t._ctl
    coords = _coords(coordinates, kw)
    landing = None
    with torch._C.DisableTorchFunction():
        shape, dtype = tuple(t.shape), t.dtype
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    if nbytes >= LANDING_MIN:
        ctl.worker_at(coords)  # a bad coordinate raises before memory is set aside
        landing = Landing(dtype, shape, nbytes, t._rg)
    fut = ctl.fetch(t._id, t._stream, coords, None if landing is None else landing.request())
    return ShardFuture(fut, ctl, landing)


def inspect(t: Any, coordinates: dict | None = None, **kw: int) -> Any:
    """The shard of ``t`` at ``coordinates``, waited for."""
    return fetch_shard(t, coordinates, **kw).result()


@contextlib.contextmanager
def activate(procs: Any) -> Iterator[Any]:
    with dtensor.activate(controller_for(procs)):
        yield procs


def rank(procs: Any, dim: str) -> DTensor:
    return dtensor.rank(controller_for(procs), dim)


def _active_controller():
    mode = torch.overrides._get_current_function_mode()
    return getattr(mode, "ctl", None)


def _resolve_fn(fn: Any) -> Any:
    if isinstance(fn, str):
        import importlib

        mod, _, name = fn.rpartition(".")
        return getattr(importlib.import_module(mod), name)
    return fn


def _run_named(name: str, *args: Any, **kwargs: Any) -> Any:
    return _resolve_fn(name)(*args, **kwargs)


class Remote:
    """A function run on every proc of a mesh (``@remote``). Called with
    distributed tensors (or under ``mesh.activate()``) it returns
    distributed tensors, their metadata from ``propagate`` (called with
    meta tensors; default: the function itself on meta tensors).
    ``.call(...)`` runs it and gathers every proc's return value."""

    def __init__(self, fn: Callable | str, propagate: Callable | None = None) -> None:
        self._fn = fn
        self._propagate = propagate
        self.__name__ = fn if isinstance(fn, str) else getattr(fn, "__name__", "remote")

    def _target(self) -> tuple[Any, tuple]:
        if isinstance(self._fn, str):
            return _run_named, (self._fn,)
        return self._fn, ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        ctl = controller_of(args, kwargs, _active_controller())
        if ctl is None:
            return _resolve_fn(self._fn)(*args, **kwargs)
        metas: dict = {}
        with torch._C.DisableTorchFunctionSubclass():
            meta_args = tree_map(lambda x: _meta_of(x, metas), args)
            meta_kwargs = tree_map(lambda x: _meta_of(x, metas), kwargs)
            prop = self._propagate or _resolve_fn(self._fn)
            with _no_mode():
                result = prop(*meta_args, **meta_kwargs)
            fn, pre = self._target()
            # A remote function's result is never one of its arguments.
            return issue_call(ctl, fn, pre + tuple(args), kwargs, result, {})

    def call(self, *args: Any, **kwargs: Any) -> LocalFuture:
        """Run on every proc of the active mesh (or of the distributed
        tensors among the arguments); a Future of the ValueMesh of the
        return values."""
        ctl = controller_of(args, kwargs, _active_controller())
        if ctl is None:
            raise ValueError(f"{self.__name__}.call() needs an active mesh or a distributed tensor argument")
        fn, pre = self._target()
        return LocalFuture(ctl.call(get_active_stream().name, fn, pre + to_wire(args), to_wire(kwargs)))

    def __repr__(self) -> str:
        return f"<remote {self.__name__}>"


@contextlib.contextmanager
def _no_mode() -> Iterator[None]:
    with torch._C.DisableTorchFunction():
        yield


def remote(fn: Callable | str | None = None, *, propagate: Callable | None = None) -> Any:
    """``@remote`` / ``@remote(propagate=...)`` / ``remote("pkg.mod.fn", propagate=...)``."""
    if fn is None:
        return lambda f: Remote(f, propagate)
    return Remote(fn, propagate)


def _call_actor(actors: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """On a worker: call endpoint ``name`` of the actor of ``actors`` in
    this proc with local shards, and wait for its value."""
    from .worker import current_worker

    here = actors.slice(**current_worker().coords)
    return getattr(here, name).call_one(*args, **kwargs).get()


def rref(endpoint_ref: Any, args: tuple, kwargs: dict) -> DTensor:
    """``actors.method.rref(*args)``: the endpoint's result on every proc as
    a distributed tensor, its metadata from ``@endpoint(propagate=...)``."""
    ctl = controller_of(args, kwargs, _active_controller())
    if ctl is None:
        raise ValueError("rref() needs an active mesh or a distributed tensor argument")
    mesh = endpoint_ref._mesh
    propagate = _propagate_of(mesh, endpoint_ref._name)
    if propagate is None:
        raise ValueError(f"rref() needs @endpoint(propagate=...) on {endpoint_ref._name!r}")
    metas: dict = {}
    with torch._C.DisableTorchFunctionSubclass():
        meta_args = tree_map(lambda x: _meta_of(x, metas), args)
        meta_kwargs = tree_map(lambda x: _meta_of(x, metas), kwargs)
        with _no_mode():
            result = propagate(*meta_args, **meta_kwargs)
        if not any(isinstance(x, torch.Tensor) for x in tree_flatten(result)[0]):
            raise TypeError("propagate must return the meta tensors of the endpoint's result")
        return issue_call(ctl, _call_actor, (mesh, endpoint_ref._name) + tuple(args), kwargs, result, {})


def _propagate_of(mesh: Any, name: str) -> Callable | None:
    cls = mesh.__dict__.get("_actor_class")
    if cls is None:
        return None
    attr = getattr(cls, name, None)
    return getattr(attr, "options", {}).get("propagate")
