"""The controller side of one tensor mesh: the worker actors on a proc mesh,
the ids of distributed tensors, and the commands sent to the workers.

Commands are batched and broadcast to every worker (``TensorWorker.run``);
a batch goes out when it is full or when the controller needs an answer
(a fetch, a sync before an actor call, leaving ``mesh.activate()``);
inside ``monarch.coalescing()`` not before the block ends unless an answer
is needed. One
sender, one receiver per proc and FIFO links keep every worker's commands
in issue order; fetches and syncs are direct calls on the same links, so
they arrive after the commands issued before them.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

import cloudpickle
import torch

from ..._lib import SupervisionError
from ..actor.future import Future
from . import coalescing
from .worker import TensorWorker

# Commands per batch before it is sent without waiting for a sync point.
BATCH = 512

_names = itertools.count()
# Tensor ids, unique in this controller process: meshes may share procs
# (a mesh and a slice of it), whose store is one per proc.
_ids = itertools.count(1)


class _IdRef(weakref.ref):
    """A weak reference to a distributed tensor that knows the tensor's id."""

    __slots__ = ("id",)

    def __new__(cls, obj: Any, callback: Any, id: int) -> _IdRef:
        return super().__new__(cls, obj, callback)

    def __init__(self, obj: Any, callback: Any, id: int) -> None:
        super().__init__(obj, callback)
        self.id = id


class MeshController:
    """Tensor state of one proc mesh (``controller_for(mesh)``)."""

    def __init__(self, procs: Any) -> None:
        self.procs = procs
        self.name = f"tensor_worker_{next(_names)}"
        self.workers = procs.spawn(self.name, TensorWorker)
        # The mailbox port of every worker, by rank.
        self.ports = [p for _, p in self.workers.mailbox_port.call().get().items()]
        self.workers.set_peers.call(self.ports, self.workers).get()
        self.extent: dict[str, int] = dict(procs.sizes)
        self._seq = itertools.count(1)
        self._fkeys: dict[Any, int] = {}
        self._batch: list = []
        self._deletes: list = []
        self._streams: set = {"main"}
        self._lock = threading.Lock()
        self._slices: dict = {}
        self._failure: SupervisionError | None = None
        self._live: dict[int, _IdRef] = {}

    # ------------------------------------------------------------ ids
    def new_id(self) -> int:
        return next(_ids)

    def next_seq(self) -> int:
        return next(self._seq)

    def track(self, tensor: Any, id: int) -> None:
        """Forget ``id`` on the workers once ``tensor`` is garbage."""
        self._live[id] = _IdRef(tensor, self._release, id)

    def _release(self, ref: _IdRef) -> None:
        self._live.pop(ref.id, None)
        self._deletes.append(ref.id)

    def forget(self, id: int) -> None:
        """Delete ``id`` on the workers with the next batch, before its
        tensor is garbage (``t.drop()``)."""
        if self._live.pop(id, None) is not None:
            self._deletes.append(id)

    # ------------------------------------------------------------ commands
    def func_ref(self, fn: Any) -> tuple[int, bytes | None]:
        """(key, pickled fn the first time, else None)."""
        try:
            key = self._fkeys.get(fn)
        except TypeError:  # unhashable callable: sent every time
            return (-1, cloudpickle.dumps(fn))
        if key is not None:
            return (key, None)
        key = self._fkeys[fn] = len(self._fkeys)
        return (key, cloudpickle.dumps(fn))

    def issue(self, cmd: tuple) -> None:
        self._streams.add(cmd[1])
        with self._lock:
            self._batch.append(cmd)
            if (len(self._batch) >= BATCH or len(self._deletes) >= BATCH) and not coalescing.holds(self):
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._deletes:
            ids, self._deletes = self._deletes, []
            self._batch.append(("del", sorted(self._streams, key=str), ids))
        if self._batch:
            batch, self._batch = self._batch, []
            # Local tensors in the batch pickle with torch calls, which
            # must not be taken as distributed ops.
            with torch._C.DisableTorchFunction():
                try:
                    self.workers.run.broadcast(batch)
                except SupervisionError as e:
                    # A lost proc: the next answer asked for raises it.
                    self._failure = e

    # ------------------------------------------------------------ answers
    def worker_at(self, coords: dict[str, int]) -> Any:
        """The worker mesh sliced to one proc; dims not given are 0."""
        unknown = set(coords) - set(self.extent)
        if unknown:
            raise ValueError(
                f"the mesh has no dimension {', '.join(sorted(unknown))} (it has {', '.join(self.extent)})"
            )
        full = {k: int(coords.get(k, 0)) for k in self.extent}
        for k, v in full.items():
            if not 0 <= v < self.extent[k]:
                raise IndexError(f"{k}={v} is out of range for a mesh of size {self.extent[k]} in {k!r}")
        key = tuple(full.values())
        w = self._slices.get(key)
        if w is None:
            # A mesh without dims (a point sliced out of one) is one proc.
            w = self._slices[key] = self.workers.slice(**full) if full else self.workers
        return w

    def fetch(self, id: int, stream: Any, coords: dict[str, int], landing: Any = None) -> Any:
        """A Future of the worker's answer (``TensorWorker.fetch``); with
        ``landing`` (``wire.Landing.request()``) the worker writes a
        tensor of that dtype and shape there instead of sending it."""
        w = self.worker_at(coords)
        self.flush()
        if self._failure is not None:
            return Future._failed(self._failure)
        return w.fetch.call_one(stream, id, landing)

    def sync(self, stream: Any, timeout: float | None = None) -> None:
        """Wait until every worker ran what was issued on ``stream``."""
        self.flush()
        if self._failure is not None:
            raise self._failure
        self.workers.sync.call(stream).get(timeout=timeout)

    def run_at(self, coords: dict[str, int], cmd: tuple) -> None:
        """Send ``cmd`` to the worker at ``coords`` only, after what was
        issued before."""
        w = self.worker_at(coords)
        self._streams.add(cmd[1])
        self.flush()
        with torch._C.DisableTorchFunction():
            w.run.broadcast([cmd])

    def check_alive(self, timeout: float | None) -> None:
        """Raise the SupervisionError of a lost proc of the mesh, if any: a
        call on the actor threads of the workers (free while their streams
        run ops) answers at once from live procs and fails for lost ones."""
        self.workers.stats.call().get(timeout=timeout)

    def call(self, stream: Any, fn: Any, args: tuple, kwargs: dict, coords: dict | None = None) -> Any:
        """``fn`` on every worker (a Future of the ValueMesh of the values),
        or on the one at ``coords`` (a Future of its value)."""
        if coords is not None:
            w = self.worker_at(coords)
        self.flush()
        if coords is not None and self._failure is not None:
            return Future._failed(self._failure)
        with torch._C.DisableTorchFunction():
            if coords is not None:
                return w.call_fn.call_one(stream, fn, args, kwargs)
            return self.workers.call_fn.call(stream, fn, args, kwargs)


def controller_for(procs: Any) -> MeshController:
    """The tensor controller of a proc mesh (made on first use)."""
    ctl = getattr(procs, "_tensor_controller", None)
    if ctl is None:
        ctl = MeshController(procs)
        procs._tensor_controller = ctl
    return ctl
