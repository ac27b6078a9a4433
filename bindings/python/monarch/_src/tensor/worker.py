"""The tensor worker: one actor per proc of a mesh that runs distributed
tensor ops with the proc's ``torch``.

The controller broadcasts batches of commands to ``run``; the actor only
queues each command on the thread of its stream, so its proc's event loop
stays free (for other actors of the proc, and for fetches). Each stream
thread runs its commands in order; an op reading a tensor that another
stream produces waits for it in the store.

Commands (tuples, built by ``monarch._src.tensor.controller``):

* ``("op", stream, key, fn_bytes, args, kwargs, out_ids, grad)``: call the
  function (unpickled from ``fn_bytes`` the first time ``key`` is seen)
  with the arguments, ``Ref`` replaced by stored values, under
  ``torch.set_grad_enabled(grad)``; leaf ``i`` of the flattened result is
  stored as ``out_ids[i]`` (``None``: not stored).
* ``("reduce", stream, src, out, dims, op, scatter, inplace, seq)``: a
  collective over the workers that differ only in ``dims``
  (``monarch._src.tensor.collective``).
* ``("del", streams, ids)``: forget ``ids`` once every stream in
  ``streams`` has reached this point.
"""

from __future__ import annotations

import pickle
import queue
import threading
import traceback
from typing import Any

import torch

from ..actor.actor_mesh import Actor
from ..actor.context import current_rank
from ..actor.endpoint import endpoint
from ..actor.port import Channel
from . import collective, wire
from .store import STORE, Failed, Local, Ref
from .tree import tree_flatten, tree_map

_current: TensorWorker | None = None


def current_worker() -> TensorWorker:
    """The tensor worker of this proc (for functions run as ops)."""
    if _current is None:
        raise RuntimeError("no tensor worker runs in this proc")
    return _current


class _Propagate(Exception):
    def __init__(self, failed: Failed) -> None:
        self.failed = failed


def _resolve(x: Any) -> Any:
    if isinstance(x, Ref):
        v = STORE.get(x.id)
        if isinstance(v, Failed):
            raise _Propagate(v)
        return v
    if isinstance(x, Local):
        return pickle.loads(x.blob)
    return x


class _Stream:
    def __init__(self, worker: TensorWorker, name: Any) -> None:
        self.worker = worker
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        # Items put and not finished yet (put by the actor thread, finished
        # by the stream's thread).
        self.pending = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name=f"tensor-stream-{name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        execute = self.worker.execute
        while True:
            cmds = self.q.get()
            if cmds is None:
                return
            for cmd in cmds:
                try:
                    execute(cmd)
                except BaseException:  # noqa: BLE001 - a stream thread never dies
                    traceback.print_exc()
            with self.lock:
                self.pending -= 1

    def put(self, cmds: list) -> None:
        with self.lock:
            self.pending += 1
        self.q.put(cmds)

    def idle(self) -> bool:
        """Every item put has run."""
        return self.pending == 0


class TensorWorker(Actor):
    def __init__(self) -> None:
        global _current
        point = current_rank()
        self.rank = point.rank
        self.extent = dict(point.extent)
        self.coords = {k: point[k] for k in self.extent}
        self.streams: dict[Any, _Stream] = {}
        self.funcs: dict[int, Any] = {}
        self.pending_deletes: dict[int, int] = {}
        self.del_lock = threading.Lock()
        self.port, rx = Channel.open()
        self.mailbox = collective.Mailbox(rx)
        self.peers: list = []
        _current = self

    # ------------------------------------------------------------ endpoints
    @endpoint
    def mailbox_port(self):
        return self.port

    @endpoint
    def set_peers(self, ports):
        self.peers = list(ports)

    @endpoint
    def greet(self, r):
        """Connection round ``r`` (``collective.greet``)."""
        collective.greet(r, self.rank, self.peers, self.mailbox)

    @endpoint
    def run(self, cmds):
        # Each stream's thread gets its commands of the batch as one item.
        per_stream: dict = {}
        for cmd in cmds:
            if cmd[0] == "del":
                for s in cmd[1]:
                    per_stream.setdefault(s, []).append(cmd)
            else:
                per_stream.setdefault(cmd[1], []).append(cmd)
        for s, part in per_stream.items():
            self._stream(s).put(part)

    @endpoint(explicit_response_port=True)
    def fetch(self, port, stream, id, landing):
        s = self._stream(stream)
        if landing is None and s.idle() and STORE.has(id):
            # Everything issued before this fetch has run: answer here,
            # without a hand-over to the stream's thread.
            self._reply(port, lambda: self._fetched(id, None))
        else:
            s.put([("fetch", stream, port, id, landing)])

    @endpoint(explicit_response_port=True)
    def sync(self, port, stream):
        self._stream(stream).put([("sync", stream, port)])

    @endpoint(explicit_response_port=True)
    def call_fn(self, port, stream, fn, args, kwargs):
        self._stream(stream).put([("call", stream, port, fn, args, kwargs)])

    @endpoint
    def stats(self):
        return {"stored": len(STORE), "streams": sorted(map(str, self.streams))}

    def __cleanup__(self, exc):
        for s in self.streams.values():
            s.q.put(None)

    # ------------------------------------------------------------ streams
    def _stream(self, name: Any) -> _Stream:
        s = self.streams.get(name)
        if s is None:
            s = self.streams[name] = _Stream(self, name)
        return s

    def execute(self, cmd: tuple) -> None:
        kind = cmd[0]
        if kind == "op":
            self._op(*cmd[2:])
        elif kind == "reduce":
            self._reduce(*cmd[2:])
        elif kind == "del":
            self._delete(cmd[1], cmd[2])
        elif kind == "fetch":
            self._reply(cmd[2], lambda: self._fetched(cmd[3], cmd[4]))
        elif kind == "sync":
            cmd[2].send(None)
        elif kind == "call":
            port, fn, args, kwargs = cmd[2:]
            self._reply(port, lambda: wire.wrap(fn(*tree_map(_resolve, args), **tree_map(_resolve, kwargs))))

    def _reply(self, port: Any, produce: Any) -> None:
        try:
            value = produce()
            if isinstance(value, Failed):
                raise RemoteTensorError(value.text)
        except _Propagate as p:
            port.exception(RemoteTensorError(p.failed.text))
            return
        except BaseException as e:  # noqa: BLE001 - answered to the controller
            port.exception(e)
            return
        port.send(value)

    def _fetched(self, id: int, landing: Any) -> Any:
        """A fetch's answer: ``(True, None)`` when the value was written
        into the controller's landing, else ``(False, value)`` (pickled
        here when it can be, see ``wire.answer``)."""
        value = STORE.get(id)
        if isinstance(value, Failed):
            return value
        if landing is not None and wire.land(value, landing):
            return (True, None)
        return wire.answer((False, wire.wrap(value)))

    def _fail(self, out_ids, failed: Failed) -> None:
        for i in out_ids:
            if i is not None:
                STORE.put(i, failed)

    def _op(self, key, fn_bytes, args, kwargs, out_ids, grad) -> None:
        fn = self.funcs.get(key)
        try:
            if fn_bytes is not None:
                fn = pickle.loads(fn_bytes)
                if key >= 0:
                    self.funcs[key] = fn
            args = tree_map(_resolve, args)
            kwargs = tree_map(_resolve, kwargs)
            if torch.is_grad_enabled() == grad:
                result = fn(*args, **kwargs)
            else:
                with torch.set_grad_enabled(grad):
                    result = fn(*args, **kwargs)
        except _Propagate as p:
            self._fail(out_ids, p.failed)
            return
        except BaseException as e:  # noqa: BLE001 - stored, raised at the controller's fetch
            self._fail(out_ids, Failed(traceback.format_exc(), e))
            return
        leaves, _ = tree_flatten(result)
        for i, v in zip(out_ids, leaves):
            if i is not None:
                STORE.put(i, v)

    def group(self, dims) -> list[int]:
        """Global ranks of the workers that differ from this one only in ``dims``."""
        labels = list(self.extent)
        sizes = [self.extent[k] for k in labels]
        ranks = []
        for r in range(self.rank_count()):
            rem, c = r, {}
            for k, n in zip(reversed(labels), reversed(sizes)):
                c[k] = rem % n
                rem //= n
            if all(c[k] == self.coords[k] for k in labels if k not in dims):
                ranks.append(r)
        return ranks

    def rank_count(self) -> int:
        n = 1
        for v in self.extent.values():
            n *= v
        return n

    def _reduce(self, src, out, dims, op, scatter, inplace, seq) -> None:
        try:
            t = _resolve(Ref(src))
            r = collective.reduce(t, self.group(dims), self.rank, self.peers, self.mailbox, seq, op, scatter)
            if inplace:
                with torch.no_grad():
                    t.copy_(r)
                r = t
        except _Propagate as p:
            STORE.put(out, p.failed)
            return
        except BaseException as e:  # noqa: BLE001 - stored, raised at the controller's fetch
            STORE.put(out, Failed(traceback.format_exc(), e))
            return
        STORE.put(out, r)

    def _delete(self, streams, ids) -> None:
        key = id(ids)
        with self.del_lock:
            left = self.pending_deletes.get(key, len(streams)) - 1
            if left:
                self.pending_deletes[key] = left
                return
            self.pending_deletes.pop(key, None)
        STORE.delete(ids)


class RemoteTensorError(RuntimeError):
    """An op failed on a worker; the message holds the worker's traceback."""


def rank_tensor(dim: str) -> torch.Tensor:
    """This worker's coordinate along ``dim`` (the op behind ``mesh.rank(dim)``)."""
    w = current_worker()
    if dim not in w.coords:
        raise ValueError(f"the mesh has no dimension {dim!r} (it has {', '.join(w.coords)})")
    return torch.tensor(w.coords[dim])
