"""The public tensor functions: ``fetch_shard``, ``inspect``, ``show``,
``reduce``, ``reduce_``, ``slice_mesh``,
``remote`` (and ``send(remote_fn, ..., port=...)``), ``get_active_mesh``,
``mesh.activate()``, ``mesh.rank(dims)`` and ``endpoint.rref(...)``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..actor.future import Future
from . import borrow, dtensor
from .controller import controller_for
from .dtensor import DTensor, MeshSliceTensor, _meta_of, active_controller, controller_of, issue_call, to_wire
from .stream import get_active_stream
from .tree import tree_flatten, tree_map
from .wire import LANDING_MIN, Landing, opened
from .worker import PeerLostTensorError

# Seconds a fetch waits before it checks that every proc of the mesh lives.
LIVENESS_EVERY = 1.0
# Bound of the liveness check after a worker reported a lost peer.
LOST_CHECK_TIMEOUT = 60.0


def _peer_lost(e: BaseException | None) -> bool:
    """Whether ``e`` (or its cause) is a worker's report of a lost peer."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, PeerLostTensorError):
            return True
        e, seen = e.__cause__, seen + 1
    return False


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
            except Exception as e:
                if not _peer_lost(e):
                    raise
                # A worker gave up on a lost peer: the loss itself.
                self._ctl.check_alive(LOST_CHECK_TIMEOUT)
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


def _identity(x: Any) -> Any:
    return x


def fetch_shard(obj: Any, shard: dict | None = None, **kw: int) -> LocalFuture:
    """A Future of the shard on the proc at coordinates ``shard`` (and
    keyword coordinates; dims not given are 0) of the distributed tensor
    ``obj`` (of a ``slice_mesh`` of one: coordinates within the slice), or
    of every distributed tensor in the pytree ``obj``, as
    ``torch.Tensor``s at the controller. Ops issued before run first. A
    worker error in the ops that made a tensor is raised by
    ``.result()``/``.get()`` with the worker's traceback."""
    coords = _coords(shard, kw)
    if isinstance(obj, DTensor):
        return _fetch_one(obj, coords)
    if isinstance(obj, MeshSliceTensor):
        return _fetch_one(obj.tensor, obj.coords(coords))
    dts = [x for x in tree_flatten(obj)[0] if isinstance(x, DTensor)]
    if not dts:
        return LocalFuture(Future._ready(obj))
    if borrow.restricted:
        borrow.check("fetch_shard()", dts)
    ctl = controller_of((obj,), {}, None)
    return LocalFuture(ctl.call(dts[0]._stream, _identity, (to_wire(obj),), {}, coords), ctl)


def _fetch_one(t: DTensor, coords: dict) -> ShardFuture:
    """One shard; from 1 MiB on, written into memory set aside here."""
    ctl = t._ctl
    if borrow.restricted:
        borrow.check("fetch_shard()", (t,))
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


def inspect(obj: Any, shard: dict | None = None, **kw: int) -> Any:
    """``fetch_shard(obj, shard, **kw)``, waited for."""
    return fetch_shard(obj, shard, **kw).result()


def show(obj: Any, shard: dict | None = None, **kw: int) -> Any:
    """Fetch the shard (as ``inspect``) and show it: with ``torchshow``
    installed as upstream does (an image), else printed with the
    coordinates it comes from."""
    value = inspect(obj, shard, **kw)
    try:
        from torchshow import show as torchshow_show  # type: ignore[import-not-found]
    except ImportError:
        torchshow_show = None
    with dtensor.no_mesh.activate():
        if torchshow_show is not None:
            return torchshow_show(value)
        at = ", ".join(f"{k}={v}" for k, v in _coords(shard, kw).items()) or "every dim 0"
        print(f"shard at {at}:\n{value}")
    return None


def get_active_mesh() -> Any:
    """The proc mesh of the innermost ``mesh.activate()``."""
    ctl = active_controller()
    if ctl is None:
        raise ValueError("no device mesh is active")
    return ctl.procs


def to_mesh(tensors: Any, mesh: Any, stream: Any = None) -> Any:
    """Every distributed tensor of the pytree ``tensors`` moved to the proc
    mesh ``mesh`` (``DTensor.to_mesh``)."""
    return dtensor.to_mesh_tree(tensors, mesh, stream)


@contextlib.contextmanager
def activate(procs: Any) -> Iterator[Any]:
    with dtensor.activate(controller_for(procs)):
        yield procs


def rank(procs: Any, dims: Any) -> DTensor:
    return dtensor.rank(controller_for(procs), dims)


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
        ctl = controller_of(args, kwargs, active_controller())
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
        ctl = controller_of(args, kwargs, active_controller())
        if ctl is None:
            raise ValueError(f"{self.__name__}.call() needs an active mesh or a distributed tensor argument")
        fn, pre = self._target()
        return LocalFuture(ctl.call(get_active_stream().name, fn, pre + to_wire(args), to_wire(kwargs)))

    def call_on_shard_and_fetch(self, *args: Any, shard: dict | None = None, **kwargs: Any) -> LocalFuture:
        """Run on the one proc at coordinates ``shard`` (dims not given
        are 0) of the active mesh (or of the distributed tensors among
        the arguments, which it receives as its local shards); a Future
        of its return value at the controller, tensors in it as
        ``torch.Tensor``s. A worker error is raised by ``.result()``."""
        ctl = controller_of(args, kwargs, active_controller())
        if ctl is None:
            raise ValueError(
                f"{self.__name__}.call_on_shard_and_fetch() needs an active mesh or a distributed tensor argument"
            )
        if borrow.restricted:
            dts = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, DTensor)]
            borrow.check("call_on_shard_and_fetch()", dts)
        fn, pre = self._target()
        coords = _coords(shard, {})
        stream = get_active_stream().name
        return LocalFuture(ctl.call(stream, fn, pre + to_wire(args), to_wire(kwargs), coords), ctl)

    def _send_to_port(self, args: tuple, kwargs: dict, port: Any, selection: str) -> None:
        """``monarch.actor.send(remote_fn, args, kwargs, port=port)``: run
        on every proc of the active mesh (``selection="all"``) or on one
        (``"choose"``); each sends its return value (or its error) to
        ``port``. Without a port the values are dropped."""
        from ..actor.port import Port

        ctl = controller_of(args, kwargs, active_controller())
        if ctl is None:
            raise ValueError(
                f"send({self.__name__}, ...) needs an active mesh (with mesh.activate():) "
                "or a distributed tensor argument"
            )
        if port is None:
            port = Port(None)
        elif not isinstance(port, Port):
            raise TypeError(f"send(port=...) takes a Port, not {type(port).__name__}")
        fn, pre = self._target()
        cmd = ("call", get_active_stream().name, port, fn, pre + to_wire(args), to_wire(kwargs))
        with torch._C.DisableTorchFunction():
            if selection == "all":
                ctl.issue(cmd)
                ctl.flush()
            else:
                ctl.run_at({}, cmd)

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


def call_on_shard_and_fetch(fn: Any, *args: Any, shard: dict | None = None, **kwargs: Any) -> LocalFuture:
    """``fn`` (a ``@remote`` function, or a function or its dotted name)
    run on the one proc at coordinates ``shard`` (dims not given are 0) of
    the active mesh, or of the distributed tensors among the arguments; a
    Future of its return value (see ``Remote.call_on_shard_and_fetch``)."""
    if not isinstance(fn, Remote):
        fn = Remote(fn)
    return fn.call_on_shard_and_fetch(*args, shard=shard, **kwargs)


def _call_actor(actors: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """On a worker: call endpoint ``name`` of the actor of ``actors`` in
    this proc with local shards, and wait for its value."""
    from .worker import current_worker

    here = actors.slice(**current_worker().coords)
    return getattr(here, name).call_one(*args, **kwargs).get()


def rref(endpoint_ref: Any, args: tuple, kwargs: dict) -> DTensor:
    """``actors.method.rref(*args)``: the endpoint's result on every proc as
    a distributed tensor, its metadata from ``@endpoint(propagate=...)``."""
    ctl = controller_of(args, kwargs, active_controller())
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


def reduce(
    tensors: Any,
    dims: Any,
    reduction: str = "sum",
    scatter: bool = False,
    mesh: Any = None,
    _inplace: bool = False,
) -> Any:
    """``monarch.reduce``: ``t.reduce(dims, reduction, scatter, mesh)`` of
    every distributed tensor of the pytree ``tensors``."""
    return tree_map(
        lambda t: dtensor.reduce(t, dims, reduction, scatter, _inplace, None, mesh) if isinstance(t, DTensor) else t,
        tensors,
    )


def reduce_(tensors: Any, dims: Any, reduction: str = "sum", scatter: bool = False, mesh: Any = None) -> Any:
    """``monarch.reduce_``: ``reduce`` in place."""
    return reduce(tensors, dims, reduction, scatter, mesh, _inplace=True)


def slice_mesh(tensors: Any, **dims: int | slice) -> Any:
    """``monarch.slice_mesh``: ``t.slice_mesh(**dims)`` of every distributed
    tensor of the pytree ``tensors``."""
    return tree_map(lambda t: t.slice_mesh(**dims) if isinstance(t, DTensor) else t, tensors)
