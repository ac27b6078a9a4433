"""Actors and meshes, mirroring upstream PyTorch Monarch's ``monarch.actor``.

::

    from monarch.actor import Actor, endpoint, this_host

    class Counter(Actor):
        def __init__(self, start):
            self.value = start

        @endpoint
        def incr(self, by=1):
            self.value += by
            return self.value

    procs = this_host().spawn_procs(per_host={"gpus": 4})
    counters = procs.spawn("counters", Counter, 10)
    print(counters.incr.call(2).get())
    procs.stop().get()

This module is the public face: the names below, re-exported from their
modules under ``monarch._src.actor`` (shapes and points in ``shape``,
futures in ``future``, ``ValueMesh`` in ``value_mesh``, ports in ``port``,
endpoints in ``endpoint``, ``Actor`` and ``ActorMesh`` in ``actor_mesh``,
``ProcMesh`` in ``proc_mesh``, ``HostMesh`` in ``host_mesh``, supervision in
``supervision``). The wire protocol between callers and actors is described
in ``monarch._src.actor.server``; serialization in
``monarch._src.actor.pickle``.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

from . import config
from ._lib import ActorError, MonarchError, SupervisionError
from ._src.actor import endpoint as _endpoint
from ._src.actor import shape as _shape
from ._src.actor import supervision as _supervision
from ._src.actor.actor_mesh import Actor, ActorMesh
from ._src.actor.context import ActorAbort, Context, context, current_actor_name, current_rank, current_size
from ._src.actor.controller import get_or_spawn_controller
from ._src.actor.endpoint import Accumulator, Endpoint, as_endpoint, concurrent_endpoint, endpoint, send
from ._src.actor.future import Future
from ._src.actor.host_mesh import (
    BootstrapCommand,
    HostMesh,
    attach_to_workers,
    default_bootstrap_cmd,
    monarch_binary,
    run_worker_loop_forever,
    shutdown_context,
    this_host,
)
from ._src.actor.port import Channel, Port, PortReceiver
from ._src.actor.proc_mesh import ProcMesh, this_proc
from ._src.actor.shape import Extent, Point
from ._src.actor.supervision import MeshFailure
from ._src.actor.value_mesh import ValueMesh

# Importable here too, not exported by ``*``: the type of ``mesh.method``,
# the C ABI's call modes and slice end, and the default unhandled-fault hook
# (for a hook that falls back to it).
EndpointRef = _endpoint.EndpointRef
CALL_ALL = _endpoint.CALL_ALL
CALL_ONE = _endpoint.CALL_ONE
CALL_CHOOSE = _endpoint.CALL_CHOOSE
CALL_BROADCAST = _endpoint.CALL_BROADCAST
SLICE_END = _shape.SLICE_END
default_unhandled_fault_hook = _supervision.default_unhandled_fault_hook

__all__ = [
    "Accumulator",
    "Actor",
    "ActorAbort",
    "ActorError",
    "ActorMesh",
    "BootstrapCommand",
    "Channel",
    "Context",
    "Endpoint",
    "Extent",
    "Future",
    "HostMesh",
    "MeshFailure",
    "MonarchError",
    "Point",
    "Port",
    "PortReceiver",
    "ProcMesh",
    "SupervisionError",
    "ValueMesh",
    "as_endpoint",
    "attach_to_workers",
    "concurrent_endpoint",
    "config",
    "context",
    "current_actor_name",
    "current_rank",
    "current_size",
    "default_bootstrap_cmd",
    "endpoint",
    "get_or_spawn_controller",
    "monarch_binary",
    "run_worker_loop_forever",
    "send",
    "shutdown_context",
    "this_host",
    "this_proc",
    "unhandled_fault_hook",  # noqa: F822 - a property of this module's type (below)
]


class _ActorModule(types.ModuleType):
    """This module's type: ``unhandled_fault_hook`` reads and writes the
    hook the supervision thread calls (``monarch._src.actor.supervision``),
    so ``monarch.actor.unhandled_fault_hook = f`` replaces it there."""

    @property
    def unhandled_fault_hook(self) -> Callable[[MeshFailure], Any]:
        """Called with a ``MeshFailure`` for each failure that reached this
        process's top level unhandled (a mesh the program spawned itself
        failed, or an actor owning one did not handle its failure). Replace
        it to decide what happens; the default reports the failure and exits
        with status 1."""
        return _supervision.unhandled_fault_hook

    @unhandled_fault_hook.setter
    def unhandled_fault_hook(self, hook: Callable[[MeshFailure], Any]) -> None:
        _supervision.unhandled_fault_hook = hook


sys.modules[__name__].__class__ = _ActorModule
