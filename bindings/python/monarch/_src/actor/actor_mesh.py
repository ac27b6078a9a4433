"""Actors and actor meshes: ``Actor`` (the base class of actors) and
``ActorMesh`` (an n-d array of actors of one class, as spawned by
``ProcMesh.spawn``), with how a call's arguments become message parts.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from ..._lib import SupervisionError, call_error, check, ffi, lib, runtime, take_buffer
from .endpoint import ANY_ENDPOINT, CALL_ALL, CALL_BROADCAST, CALL_CHOOSE, CALL_ONE, EndpointRef, NotAnEndpoint
from .future import Future
from .pickle import dumps_call, to_c_parts
from .scratch import thread_scratch
from .shape import MeshFns, MeshTrait, Shape, owned_shape
from .value_mesh import RAW_CONVERT, convert_all, convert_one

_gc = ffi.gc
_new = ffi.new
_from_buffer = ffi.from_buffer
_future_free = lib.monarch_future_free
_am_call = lib.monarch_actor_mesh_call
_am_free = lib.monarch_actor_mesh_free


class Actor:
    """Base class of actors. Subclass it, define ``__init__`` and mark
    methods with ``@endpoint``; spawn with ``ProcMesh.spawn``.

    Optional hooks: ``__supervise__(self, failure)`` (sync or async) is
    called with a ``MeshFailure`` when a mesh this actor spawned fails;
    return True if handled, False to escalate to this actor's owner (raising
    escalates too, with the exception as cause). ``__cleanup__(self, exc)``
    runs when the actor is stopped (``exc`` is None) or its proc stops.

    ``self.logger`` is a ``logging`` logger (``monarch.actor.<Class>``)
    whose records carry the actor (``record.actor``: its id) and its rank
    (``record.rank``: its point in the mesh it was spawned into); the
    message is prefixed with both."""

    @property
    def logger(self) -> Any:
        adapter = self.__dict__.get("_monarch_logger")
        if adapter is None:
            # ``logging`` costs milliseconds to import: loaded by the actors
            # that log, not by every worker.
            from .logger import actor_logger

            adapter = self.__dict__["_monarch_logger"] = actor_logger(type(self))
        return adapter


A = TypeVar("A", bound=Actor)


class StopState:
    """Whether a mesh (or the mesh a view was made from) was stopped; every
    view holds the states of the meshes it derives from."""

    __slots__ = ("stopped", "what")

    def __init__(self, what: str) -> None:
        self.stopped = False
        self.what = what


def _rebuild_actor_mesh(ref: bytes, endpoints, class_name, name, raw=frozenset(), plain=frozenset()):
    out = _new("monarch_actor_mesh **")
    check(lib.monarch_actor_mesh_from_ref(runtime(), ref, len(ref), out), "cannot rebuild actor mesh")
    return ActorMesh._wrap(
        _gc(out[0], _am_free), class_name, endpoints, name, (StopState("actor mesh"),), raw, plain
    )


def raw_parts(args: tuple, what: str) -> tuple:
    """``monarch_bytes[]`` of bytes-like ``args`` (one part each)."""
    n = len(args)
    arr = _new("monarch_bytes[]", n) if n else thread_scratch().one
    keep = []
    for i, a in enumerate(args):
        if isinstance(a, str):
            raise TypeError(f"{what} takes bytes-like arguments (one part each), not str (encode it)")
        try:
            cp = _from_buffer(a)
        except TypeError as e:
            raise TypeError(
                f"{what} takes bytes-like arguments (one part each), not {type(a).__name__}"
            ) from e
        keep.append(cp)
        arr[i].ptr = cp
        arr[i].len = len(cp)
    return arr, n, keep


class ActorMesh(MeshTrait, Generic[A]):
    """An n-d array of actors of one class. ``mesh.endpoint_name`` gives the
    call adverbs; ``slice(**dims)``, ``flatten``, ``rename`` and ``split``
    give other views of it."""

    _fns = MeshFns("actor", _am_free)

    def __init__(self, *a: Any, **kw: Any) -> None:
        raise TypeError("actor meshes are created with ProcMesh.spawn()")

    @classmethod
    def _wrap(cls, handle, class_name, endpoints, name, states, raw=frozenset(), plain=frozenset()):
        self = object.__new__(cls)
        d = self.__dict__
        d["_plain"] = plain  # methods that are not endpoints (see as_endpoint)
        d["_h"] = handle
        d["_class_name"] = class_name
        d["_endpoints"] = endpoints
        d["_raw"] = raw  # names of raw endpoints (ANY_ENDPOINT for a native mesh)
        d["_name"] = name
        d["_states"] = states
        d["_shape_cache"] = None
        if isinstance(endpoints, frozenset):
            # An endpoint named like a mesh method is reached by its name;
            # the mesh method stays reachable as ``ActorMesh.method(mesh)``.
            for name in endpoints & _MESH_METHODS:
                d[name] = EndpointRef(self, name, name in raw)
        return self

    def __getattr__(self, attr: str) -> EndpointRef[Any]:
        if attr in self.__dict__.get("_plain", ()):
            return NotAnEndpoint(self, attr)
        if attr.startswith("__") or attr not in self.__dict__.get("_endpoints", ()):
            raise AttributeError(f"actor mesh {self._name!r} of {self._class_name} has no endpoint {attr!r}")
        ref = EndpointRef(self, attr, attr in self._raw)
        self.__dict__[attr] = ref
        return ref

    def endpoint(self, name: str) -> EndpointRef[Any]:
        """``mesh.endpoint("name")`` is ``mesh.name``, for endpoint names
        that are not Python identifiers or that clash with mesh methods
        (e.g. a native actor's ``slice`` or ``stop``)."""
        if name not in self._endpoints:
            raise AttributeError(f"actor mesh {self._name!r} of {self._class_name} has no endpoint {name!r}")
        return EndpointRef(self, name, name in self._raw)

    def _shape(self) -> Shape:
        s = self._shape_cache
        if s is None:
            s = self.__dict__["_shape_cache"] = owned_shape(lib.monarch_actor_mesh_shape, self._h)
        return s

    def _check_live(self):
        for st in self._states:
            if st.stopped:
                raise SupervisionError(
                    f"actor mesh {self._name!r} cannot be used: its {st.what} was stopped"
                )

    def _parts(self, ep: EndpointRef, args, kwargs, readers=None):
        """``(monarch_bytes[], n, keep)`` of a call's arguments (``readers``:
        how many actors receive them; default: all of this mesh)."""
        if ep._raw:
            what = f"{self._class_name}.{ep._name}"
            if kwargs:
                raise TypeError(f"raw endpoint {what} takes no keyword arguments")
            return raw_parts(args, f"raw endpoint {what}")
        try:
            parts = dumps_call(args, kwargs, readers or self.__len__)
        except Exception as e:
            raise TypeError(
                f"cannot send the arguments of {self._class_name}.{ep._name}: {type(e).__name__}: {e}"
            ) from e
        arr, keep = to_c_parts(parts)
        return arr, len(parts), keep

    def _send(self, ep: EndpointRef, args, kwargs, mode):
        for st in self._states:
            if st.stopped:
                self._check_live()
        if ep._raw:
            return self._send_raw(ep, args, kwargs, mode)
        try:
            parts = dumps_call(
                args, kwargs, 1 if mode == CALL_ONE or mode == CALL_CHOOSE else self.__len__
            )
        except Exception as e:
            raise TypeError(
                f"cannot send the arguments of {self._class_name}.{ep._name}: {type(e).__name__}: {e}"
            ) from e
        arr, keep = to_c_parts(parts, thread_scratch().one)
        convert = convert_all if mode == CALL_ALL else convert_one
        return self._call(ep, arr, len(parts), keep, mode, convert, f"{self._class_name}.{ep._name}")

    def _send_raw(self, ep: EndpointRef, args, kwargs, mode):
        what = f"{self._class_name}.{ep._name}"
        if kwargs:
            raise TypeError(f"raw endpoint {what} takes no keyword arguments")
        arr, n, keep = raw_parts(args, f"raw endpoint {what}")
        convert = RAW_CONVERT[(mode == CALL_ALL, self._raw is ANY_ENDPOINT)]
        return self._call(ep, arr, n, keep, mode, convert, what)

    def _call(self, ep: EndpointRef, arr, n, keep, mode, convert, what):
        """Hand prepared parts to libmonarch; a Future unless broadcasting."""
        s = thread_scratch()
        st = _am_call(self._h, ep._cname, arr, n, mode, s.fut)
        del keep
        if st:
            raise call_error(st, self._name, ep._name, f"cannot call {what}")
        if mode == CALL_BROADCAST:
            return None
        return Future(_gc(s.fut[0], _future_free), convert, (self, ep))

    def _derive(self, handle, what) -> ActorMesh:
        return ActorMesh._wrap(
            handle,
            self._class_name,
            self._endpoints,
            self._name,
            (StopState(f"actor mesh {what}"),) + self._states,
            self._raw,
            self._plain,
        )

    def stop(self) -> Future[Any]:
        """Stop these actors (their procs keep running)."""
        self._check_live()
        out = _new("monarch_future **")
        check(lib.monarch_actor_mesh_stop(self._h, out), f"cannot stop actor mesh {self._name!r}")
        self._states[0].stopped = True
        return Future(_gc(out[0], _future_free), convert_all, (self._shape, f"stopping {self._name}"))

    @staticmethod
    def check_endpoint_names(class_name: str, endpoints: frozenset) -> None:
        """Refuse endpoint names an actor mesh cannot hand out: its private
        attributes and its properties (an endpoint named like a mesh method
        is fine: it takes that name on the mesh)."""
        bad = sorted(endpoints & _MESH_RESERVED)
        if bad:
            raise TypeError(
                f"actor class {class_name} has endpoints named {', '.join(bad)}: an actor mesh "
                "uses these names itself; rename the endpoints"
            )

    def __reduce__(self):
        out = _new("uint8_t **")
        n = _new("size_t *")
        check(lib.monarch_actor_mesh_to_ref(self._h, out, n))
        ref = take_buffer(out[0], n[0])
        return (_rebuild_actor_mesh, (ref, self._endpoints, self._class_name, self._name, self._raw, self._plain))

    def __repr__(self) -> str:
        return f"<ActorMesh {self._name!r} of {self._class_name} {self._shape()}>"


# Public methods of an actor mesh; an endpoint of the same name replaces them on its mesh.
_MESH_METHODS = frozenset(
    n for n in dir(ActorMesh) if not n.startswith("_") and not isinstance(getattr(ActorMesh, n), property)
)
# Names an endpoint cannot take: the mesh's own private attributes and its properties.
_MESH_RESERVED = frozenset(
    n
    for n in dir(ActorMesh)
    if (n.startswith("_") and not n.startswith("__")) or isinstance(getattr(ActorMesh, n), property)
) | frozenset(("_h", "_class_name", "_endpoints", "_raw", "_plain", "_name", "_states", "_shape_cache"))
