"""Endpoints: the ``@endpoint`` decorator on the actor's side, and the call
adverbs on the caller's side.

``@endpoint`` wraps an actor method in an ``Endpoint`` (options: ``raw``,
``explicit_response_port``, ``concurrent``); ``ActorMesh`` finds its
endpoints by these markers. ``mesh.method`` is an ``EndpointRef``, whose
``call``/``call_one``/``choose``/``broadcast``/``stream`` send the call
through the mesh; ``send`` and ``Accumulator`` are upstream's free-standing
forms of the same.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any, Generic, ParamSpec, TypeVar

from ..._lib import call_error, error_for, ffi, lib
from .future import Future
from .port import Port, PortContext, PortReceiver
from .value_mesh import RAW_CONVERT, ValueMesh, convert_one

T = TypeVar("T")
A = TypeVar("A")
P = ParamSpec("P")
R = TypeVar("R")

CALL_ALL = lib.MONARCH_CALL_ALL
CALL_ONE = lib.MONARCH_CALL_ONE
CALL_CHOOSE = lib.MONARCH_CALL_CHOOSE
CALL_BROADCAST = lib.MONARCH_CALL_BROADCAST

_new = ffi.new


class Endpoint(Generic[P, R]):
    """An actor method that may be called through a mesh. Inside the actor
    it behaves like the plain method. ``Endpoint[[int], str]`` names the
    type of an endpoint taking an int and returning a str, as upstream."""

    def __init__(self, fn: Callable[..., Any], **options: Any) -> None:
        self._fn = fn
        self.options = options
        self.__name__ = getattr(fn, "__name__", "endpoint")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __set_name__(self, owner: type, name: str) -> None:
        self.__name__ = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        return self._fn.__get__(obj, objtype)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)


def endpoint(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Mark an actor method as an endpoint: ``@endpoint`` or
    ``@endpoint(...)`` (other options are accepted for compatibility).

    ``@endpoint(raw=True)``: a raw-bytes endpoint, callable without pickle
    from any language (e.g. a C++ controller). It is called with one
    ``bytes`` positional argument per payload part of the message, and
    returns a bytes-like object (one reply part), ``None`` (no parts) or a
    list/tuple of bytes-like objects (one part each). Python callers pass
    bytes-like arguments (one part each) and get replies back as ``bytes``
    / ``None`` / tuple of ``bytes``. An exception is answered as usual (a
    text message; C/C++ callers see it as the error of the point).

    ``@endpoint(explicit_response_port=True)``: the endpoint is called with
    the caller's reply ``Port`` as its first argument (after ``self``) and
    its return value is ignored; it answers with ``port.send(value)`` /
    ``port.exception(exc)``, now or later, from any thread, or hands the
    port to another actor. An endpoint that never answers leaves the caller
    waiting."""
    if fn is None:
        return lambda f: _make_endpoint(f, options)
    return _make_endpoint(fn, options)


def _make_endpoint(fn: Callable[..., Any], options: dict) -> Endpoint:
    if isinstance(fn, Endpoint) and (options.get("concurrent") or fn.options.get("concurrent")):
        raise ValueError(
            f"@concurrent_endpoint cannot be combined with another endpoint decorator "
            f"(on {getattr(fn, '__qualname__', fn)!r}); use it alone"
        )
    if options.get("concurrent") and not is_async(fn):
        raise ValueError(
            f"@concurrent_endpoint needs an `async def` method, not {getattr(fn, '__qualname__', fn)!r}"
        )
    return Endpoint(fn, **options)


def concurrent_endpoint(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """An ``async def`` endpoint whose bodies may interleave: each message
    starts a task on the actor's event loop and the actor goes on to its
    next message while the task awaits (plain async endpoints run one
    message at a time). The tasks still running when the actor stops are
    cancelled before its ``__cleanup__``. On a sync function, or combined
    with another endpoint decorator, it raises ValueError."""
    options["concurrent"] = True
    return endpoint(fn, **options)


def is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(inspect.unwrap(fn))


def check_endpoint_kinds(cls: type) -> None:
    """As upstream: an actor's (non-raw) endpoints are all ``def`` or all
    ``async def``."""
    sync, asyn = [], []
    seen = set()
    for klass in cls.__mro__:
        for name, attr in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            if isinstance(attr, Endpoint) and not is_raw(attr):
                (asyn if is_async(attr._fn) else sync).append(name)
    if sync and asyn:
        raise TypeError(
            f"actor class {cls.__qualname__} mixes synchronous endpoints ({', '.join(sorted(sync))}) "
            f"and async endpoints ({', '.join(sorted(asyn))}); make them all `def` or all `async def`"
        )


def is_endpoint(attr: Any) -> bool:
    return isinstance(attr, Endpoint)


def plain_method_names(cls: type) -> frozenset:
    """Public methods of ``cls`` that are not endpoints: ``mesh.name`` gives
    a ``NotAnEndpoint`` for them, which ``as_endpoint`` makes callable."""
    names = set()
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name, None)
        if inspect.isfunction(attr) and not isinstance(attr, Endpoint):
            names.add(name)
    return frozenset(names)


def is_raw(attr: Any) -> bool:
    return isinstance(attr, Endpoint) and bool(attr.options.get("raw"))


def endpoint_names(cls: type, raw_only: bool = False) -> frozenset:
    names = set()
    seen = set()
    for klass in cls.__mro__:
        for name, attr in vars(klass).items():
            if name in seen:
                continue  # overridden in a subclass
            seen.add(name)
            if isinstance(attr, Endpoint) and (not raw_only or is_raw(attr)):
                names.add(name)
    return frozenset(names)


class _AnyName:
    """The endpoint set of a native actor mesh: every name (the type's
    endpoints are not known on this side), all raw."""

    __slots__ = ()

    def __contains__(self, name):
        return isinstance(name, str) and not name.startswith("_")

    def __reduce__(self):
        return "ANY_ENDPOINT"

    def __repr__(self):
        return "<any endpoint>"


ANY_ENDPOINT = _AnyName()


class EndpointRef(Generic[T]):
    """``mesh.method``: the adverbs to call endpoint ``method`` of every
    actor of ``mesh``."""

    __slots__ = ("_mesh", "_name", "_cname", "_raw")

    def __init__(self, mesh: Any, name: str, raw: bool = False) -> None:
        self._mesh = mesh
        self._name = name
        self._cname = name.encode()
        self._raw = raw

    def call(self, *args: Any, **kwargs: Any) -> Future[ValueMesh[T]]:
        """Call every actor; a Future of the ValueMesh of replies."""
        return self._mesh._send(self, args, kwargs, CALL_ALL)

    def call_one(self, *args: Any, **kwargs: Any) -> Future[T]:
        """Call the only actor of a mesh of size 1; a Future of its reply."""
        return self._mesh._send(self, args, kwargs, CALL_ONE)

    def choose(self, *args: Any, **kwargs: Any) -> Future[T]:
        """Call one actor chosen by the runtime; a Future of its reply."""
        return self._mesh._send(self, args, kwargs, CALL_CHOOSE)

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        """Send to every actor; nobody replies."""
        self._mesh._send(self, args, kwargs, CALL_BROADCAST)

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Future[T]]:
        """Call every actor; an iterator of one Future per actor, which
        complete in the order the replies arrive (the first future gets the
        first reply to come back, whichever rank sent it). The call is made
        at once, not when iteration starts."""
        mesh = self._mesh
        mesh._check_live()
        arr, n, keep = mesh._parts(self, args, kwargs)
        out = _new("monarch_port_receiver **")
        st = lib.monarch_actor_mesh_stream(mesh._h, self._cname, arr, n, out)
        del keep
        if st:
            raise call_error(st, mesh._name, self._name, f"cannot call {mesh._class_name}.{self._name}")
        rx = PortReceiver(out[0], f"{mesh._class_name}.{self._name}")
        convert = RAW_CONVERT[(False, mesh._raw is ANY_ENDPOINT)] if self._raw else convert_one
        return _stream_futures(rx, mesh._shape().size, convert, (mesh, self))

    def rref(self, *args: Any, **kwargs: Any) -> Any:
        """The endpoint's result on every proc as a distributed tensor (an
        endpoint with ``@endpoint(propagate=...)``, which gives the result's
        metadata from meta tensors of the arguments); see ``monarch.remote``."""
        # Tensor support needs torch, so it is loaded on first use.
        return importlib.import_module("monarch._src.tensor.api").rref(self, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"endpoint {self._name!r} cannot be called directly; use "
            f".call(), .call_one(), .choose() or .broadcast()"
        )

    def __repr__(self) -> str:
        return f"<endpoint {self._name!r} of {self._mesh!r}>"


class NotAnEndpoint:
    """``mesh.method`` for a method that is not an endpoint: it cannot be
    called through the mesh until ``as_endpoint(mesh.method)`` makes it one."""

    __slots__ = ("_mesh", "_name")

    def __init__(self, mesh: Any, name: str) -> None:
        self._mesh = mesh
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr in ("call", "call_one", "choose", "broadcast", "stream"):
            raise AttributeError(
                f"{self._name!r} is not an endpoint of {self._mesh._class_name}: mark it with @endpoint, "
                f"or call it through as_endpoint(mesh.{self._name})"
            )
        raise AttributeError(attr)

    def __repr__(self) -> str:
        return f"<method {self._name!r} (not an endpoint) of {self._mesh!r}>"


def as_endpoint(
    not_an_endpoint: Any, *, propagate: Any = None, explicit_response_port: bool = False
) -> EndpointRef[Any]:
    """Call a method that is not marked ``@endpoint`` through the mesh, as
    upstream: ``as_endpoint(mesh.method).call(...)``. The method runs in the
    actor as a synchronous endpoint would. ``propagate`` is accepted as
    upstream does and has no effect; ``explicit_response_port=True`` is not
    supported for such methods (ValueError)."""
    if isinstance(not_an_endpoint, EndpointRef):
        return not_an_endpoint
    if not isinstance(not_an_endpoint, NotAnEndpoint):
        raise TypeError(f"as_endpoint() takes a method of an actor mesh (mesh.method), not {not_an_endpoint!r}")
    if explicit_response_port:
        raise ValueError("as_endpoint(explicit_response_port=True) is not supported")
    return EndpointRef(not_an_endpoint._mesh, not_an_endpoint._name)


def _stream_futures(rx, n, convert, ctx):
    for _ in range(n):
        f = rx.recv()
        f._convert = convert
        f._ctx = PortContext(ctx, rx)
        yield f


def send(
    endpoint: EndpointRef[Any],
    args: tuple = (),
    kwargs: dict[str, Any] | None = None,
    port: Port[Any] | None = None,
    selection: str = "all",
) -> None:
    """Send a message to ``endpoint`` (``mesh.method``) of every actor
    (``selection="all"``) or of one chosen by the runtime
    (``selection="choose"``). With ``port`` (a ``Port``, e.g. from
    ``Channel.open()``), each actor's reply goes to that port; without,
    nobody replies. ``endpoint`` may also be a remote function
    (``monarch.remote``): it runs on the procs of the active mesh, each
    sending its return value to ``port``."""
    if selection not in ("all", "choose"):
        raise ValueError(f"send(selection=...) must be 'all' or 'choose', not {selection!r}")
    kwargs = dict(kwargs or {})
    args = tuple(args)
    if not isinstance(endpoint, EndpointRef):
        # A remote function (``monarch.remote``) runs on the procs of the
        # active tensor mesh instead.
        to_port = getattr(endpoint, "_send_to_port", None)
        if to_port is None:
            raise TypeError(
                f"send() needs an endpoint of an actor mesh (mesh.method) or a remote function, not {endpoint!r}"
            )
        to_port(args, kwargs, port, selection)
        return
    mesh = endpoint._mesh
    if port is None:
        if selection == "all":
            mesh._send(endpoint, args, kwargs, CALL_BROADCAST)
        else:
            mesh._send(endpoint, args, kwargs, CALL_CHOOSE)
        return
    if not isinstance(port, Port):
        raise TypeError(f"send(port=...) takes a Port, not {type(port).__name__}")
    if port._ref is None:
        return send(endpoint, args, kwargs, None, selection)
    mesh._check_live()
    arr, n, keep = mesh._parts(endpoint, args, kwargs, None if selection == "all" else 1)
    mode = CALL_ALL if selection == "all" else CALL_CHOOSE
    st = lib.monarch_actor_mesh_send(mesh._h, endpoint._cname, arr, n, port._ref, len(port._ref), mode)
    del keep
    if st:
        raise error_for(st, f"cannot send to {mesh._class_name}.{endpoint._name}")


class Accumulator(Generic[P, R, A]):
    """``Accumulator(mesh.method, identity, combine).accumulate(*args)``:
    call every actor and fold the replies, ``combine(acc, value)`` from
    ``identity``, left to right in rank order (``identity`` for an empty
    mesh). The fold runs in the caller when the replies are in (a Python
    ``combine`` is not run inside the multicast tree)."""

    def __init__(self, endpoint: EndpointRef[R], identity: A, combine: Callable[[A, R], A]) -> None:
        if not isinstance(endpoint, EndpointRef):
            raise TypeError(f"Accumulator needs an endpoint of an actor mesh (mesh.method), not {endpoint!r}")
        self._endpoint = endpoint
        self._identity = identity
        self._combine = combine

    def accumulate(self, *args: Any, **kwargs: Any) -> Future[A]:
        fut = self._endpoint.call(*args, **kwargs)
        inner, identity, combine = fut._convert, self._identity, self._combine

        def convert(vm, ctx):
            acc = identity
            for v in inner(vm, ctx).values():
                acc = combine(acc, v)
            return acc

        fut._convert = convert
        return fut
