"""``get_or_spawn_controller``: named singleton actors of a job.

The job's root controller keeps the registry (name -> actor mesh). A name
asked for the first time spawns its actor on the root controller's own proc
(``this_proc()`` there), as upstream; later requests, from the root or from
any proc, get the same mesh.

Procs reach the registry through ``_Registry``, an actor on the root's
proc whose reference every proc spawned after it exists receives in the
environment variable ``MONARCH_PY_CONTROLLERS`` (procs pass it on to the
procs they spawn). The root starts it at its first
``get_or_spawn_controller`` call, and at its first ``spawn_procs`` when it
already serves actors of its own (``this_proc()``; not from the thread
that serves them, which cannot wait for the registry's constructor), so
that serving costs nothing extra; a proc spawned before either cannot reach
the registry (RuntimeError naming the fix).
"""

from __future__ import annotations

import base64
import os
import pickle
import threading
from typing import Any

from .actor_mesh import A, Actor, ActorMesh
from .endpoint import endpoint
from .future import Future
from .port import Port
from .proc_mesh import on_this_proc_server_thread, this_proc, this_proc_is_served

ENV = "MONARCH_PY_CONTROLLERS"

_lock = threading.Lock()
# name -> the actor mesh, or the ports waiting while it is being spawned.
_entries: dict[str, Any] = {}
_registry = None  # the _Registry mesh (in the root), once started


def _spawn(name: str, cls: type, args: tuple, kwargs: dict) -> None:
    """Spawn ``name`` on this proc and hand it to everyone waiting for it."""
    try:
        mesh = this_proc().spawn(name, cls, *args, **kwargs)
    except Exception as e:  # noqa: BLE001 - reported to each waiter
        with _lock:
            waiting = _entries.pop(name, [])
        for port in waiting:
            port.exception(e)
        return
    with _lock:
        waiting = _entries[name]
        _entries[name] = mesh
    for port in waiting:
        port.send(mesh)


def _request(name: str, cls: type, args: tuple, kwargs: dict, port: Port) -> None:
    """Answer ``port`` with the mesh ``name``, spawning it when it is new
    (on another thread: the spawn waits for the constructor, which this
    proc's serving thread runs)."""
    with _lock:
        entry = _entries.get(name)
        if isinstance(entry, ActorMesh):
            pass
        elif entry is not None:
            entry.append(port)
            return
        else:
            _entries[name] = [port]
    if isinstance(entry, ActorMesh):
        port.send(entry)
        return
    threading.Thread(target=_spawn, args=(name, cls, args, kwargs), name="monarch-controller-spawn").start()


class _Registry(Actor):
    """The root controller's registry, for requests from other procs."""

    @endpoint(explicit_response_port=True)
    def get_or_spawn(self, port: Port, name: str, cls: type, args: tuple, kwargs: dict) -> None:
        _request(name, cls, args, kwargs, port)


def _is_root() -> bool:
    return "MONARCH_CONTROLLER" not in os.environ


def _start_registry() -> None:
    global _registry
    if _registry is None:
        _registry = this_proc().spawn("controller_registry", _Registry)


def env_for_children() -> list[bytes]:
    """``NAME=value`` entries that give procs about to be spawned the
    registry's reference (empty when there is none to give)."""
    if _is_root():
        with _lock:
            start = _registry is None and this_proc_is_served() and not on_this_proc_server_thread()
        if start:
            _start_registry()
        if _registry is None:
            return []
        value = base64.b64encode(pickle.dumps(_registry)).decode()
        return [f"{ENV}={value}".encode()]
    inherited = os.environ.get(ENV)
    return [f"{ENV}={inherited}".encode()] if inherited else []


def get_or_spawn_controller(name: str, Class: type[A], *args: Any, **kwargs: Any) -> Future[ActorMesh[A]]:
    """The job's actor named ``name``, spawned as ``Class(*args, **kwargs)``
    on the root controller's proc the first time any proc asks for it; a
    Future of its (one-point) actor mesh."""
    if not isinstance(name, str) or not name:
        raise ValueError("get_or_spawn_controller() needs a non-empty name")
    if _is_root():
        with _lock:
            entry = _entries.get(name)
        if isinstance(entry, ActorMesh):
            return Future._ready(entry)
        _start_registry()
    else:
        ref = os.environ.get(ENV)
        if not ref:
            raise RuntimeError(
                "get_or_spawn_controller() in a proc needs the job's registry, which this proc was "
                "spawned without: call get_or_spawn_controller() (any name) in the controller "
                "before spawning the procs that use it"
            )
        registry = pickle.loads(base64.b64decode(ref))
        return registry.get_or_spawn.call_one(name, Class, args, kwargs)
    return _registry.get_or_spawn.call_one(name, Class, args, kwargs)
