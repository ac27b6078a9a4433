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
* ``("reduce", stream, src, out, dims, op, scatter, inplace, seq, into)``:
  a collective over the workers that differ only in ``dims``
  (``monarch._src.tensor.collective``; ``op`` ``"stack"``:
  ``monarch._src.tensor.stack``); with ``into`` the result is copied
  into the tensor ``out`` holds already (``reduce(out=...)``).
* ``("borrow", stream, src, dst)``: ``dst`` is ``src`` (the same tensor,
  no copy) from this point of the lender's stream on;
  ``("borrow_done", stream, borrow, dst)`` on the borrower's stream marks
  that its ops issued before it ran (and forgets ``dst``);
  ``("borrow_wait", stream, borrow)`` on the lender's stream waits for that
  mark (``monarch._src.tensor.borrow``).
* ``("del", streams, ids)``: forget ``ids`` once every stream in
  ``streams`` has reached this point.
* ``("call", stream, port, fn, args, kwargs)``: call ``fn`` and send its
  value (or its error) to ``port``.
* ``("send", stream, src, tag, ports, extent, sel)`` / ``("recv", stream,
  out, tag, workers, name, extent, sel)``: ``to_mesh``
  (``monarch._src.tensor.dtensor``); the sender is this mesh's worker at
  the receiver's coordinates in the dims of ``extent`` (the sender mesh's),
  or, with ``sel`` (``slice_mesh``), at those coordinates mapped into the
  slice.

Peers: every worker watches every other worker of its mesh with a call
that is never answered (``watch``): the runtime fails it as soon as the
peer's proc is gone, and a wait for that peer's message then fails at once
(``collective.Mailbox``) instead of blocking the stream.
"""

from __future__ import annotations

import pickle
import queue
import threading
import time
import traceback
from typing import Any

import torch

from ..actor.actor_mesh import Actor
from ..actor.context import current_rank
from ..actor.endpoint import endpoint
from ..actor.port import Channel
from . import collective, stack, wire
from .store import STORE, WAIT_SECONDS, Failed, Local, Ref
from .tree import tree_flatten, tree_map

_current: TensorWorker | None = None
# The worker whose stream runs on this thread: a proc holds one worker per
# tensor mesh it is part of (a mesh and a slice of it share procs).
_thread = threading.local()


def current_worker() -> TensorWorker:
    """The tensor worker running the current op (for functions run as
    ops); outside a stream, the proc's latest worker."""
    w = getattr(_thread, "worker", None) or _current
    if w is None:
        raise RuntimeError("no tensor worker runs in this proc")
    return w


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


def coords_of(rank: int, extent: dict[str, int]) -> dict[str, int]:
    """The coordinates of ``rank`` in a mesh of ``extent`` (row-major)."""
    c = {}
    for k in reversed(list(extent)):
        c[k] = rank % extent[k]
        rank //= extent[k]
    return {k: c[k] for k in extent}


def in_slice(coords: dict[str, int], sel: dict) -> dict[str, int] | None:
    """The coordinates of ``coords`` within the mesh slice ``sel``
    (``dtensor._selection``), or None when the slice leaves it out."""
    out = {}
    for k, c in coords.items():
        s = sel.get(k)
        if s is None:
            out[k] = c
        elif isinstance(s, int):
            if c != s:
                return None
        else:
            q, r = divmod(c - s[0], s[1])
            if r or not 0 <= q < s[2]:
                return None
            out[k] = q
    return out


def rank_of(coords: dict[str, int], extent: dict[str, int]) -> int:
    r = 0
    for k, n in extent.items():
        r = r * n + coords[k]
    return r


class _Stream:
    def __init__(self, worker: TensorWorker, name: Any) -> None:
        self.worker = worker
        self.running: str | None = None  # the kind of command running now
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        # Items put and not finished yet (put by the actor thread, finished
        # by the stream's thread).
        self.pending = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name=f"tensor-stream-{name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        _thread.worker = self.worker
        execute = self.worker.execute
        while True:
            cmds = self.q.get()
            if cmds is None:
                return
            for cmd in cmds:
                self.running = cmd[0]
                try:
                    execute(cmd)
                except BaseException:  # noqa: BLE001 - a stream thread never dies
                    traceback.print_exc()
                finally:
                    self.running = None
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
        self.mailbox = collective.Mailbox(rx, self._peer_lost)
        self.peers: list = []
        self.watches: dict[Any, Any] = {}  # peer -> the Future of its watch call
        self.watched_by: list = []  # ports of peers' watch calls, never answered
        # Borrow id -> set once the borrower's stream reached the drop.
        self.borrows: dict[int, threading.Event] = {}
        self.borrows_lock = threading.Lock()
        _current = self

    # ------------------------------------------------------------ endpoints
    @endpoint
    def mailbox_port(self):
        return self.port

    @endpoint
    def set_peers(self, ports, workers):
        """The mailbox ports of every worker of the mesh, by rank, and the
        worker mesh (to watch the others)."""
        self.peers = list(ports)
        for r in range(len(ports)):
            if r != self.rank:
                self.watches[r] = workers.slice(**coords_of(r, self.extent)).watch.call_one()

    @endpoint(explicit_response_port=True)
    def watch(self, port):
        """Never answered: the caller's call fails when this proc is gone."""
        self.watched_by.append(port)

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
        """Answered by the actor thread while streams run: what is stored,
        and what each stream runs now (None: idle)."""
        return {
            "stored": len(STORE),
            "streams": sorted(map(str, self.streams)),
            "running": {str(k): s.running for k, s in self.streams.items()},
        }

    def _peer_lost(self, peer: Any) -> bool:
        f = self.watches.get(peer)
        return f is not None and f.done()

    def _watch(self, key: Any, workers: Any, coords: dict[str, int]) -> None:
        """Watch a worker of another mesh (a ``to_mesh`` sender), once."""
        if key not in self.watches:
            self.watches[key] = workers.slice(**coords).watch.call_one()

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
        elif kind == "send":
            self._send_shard(*cmd[2:])
        elif kind == "recv":
            self._recv_shard(*cmd[2:])
        elif kind == "borrow":
            STORE.put(cmd[3], STORE.get(cmd[2]))
        elif kind == "borrow_done":
            self._borrow_event(cmd[2]).set()
            STORE.delete((cmd[3],))
        elif kind == "borrow_wait":
            self._borrow_wait(cmd[2])

    def _reply(self, port: Any, produce: Any) -> None:
        try:
            value = produce()
            if isinstance(value, Failed):
                raise _error_of(value)
        except _Propagate as p:
            port.exception(_error_of(p.failed))
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
        ranks = []
        for r in range(self.rank_count()):
            c = coords_of(r, self.extent)
            if all(c[k] == self.coords[k] for k in self.extent if k not in dims):
                ranks.append(r)
        return ranks

    def rank_count(self) -> int:
        n = 1
        for v in self.extent.values():
            n *= v
        return n

    def _borrow_event(self, borrow: int) -> threading.Event:
        with self.borrows_lock:
            e = self.borrows.get(borrow)
            if e is None:
                e = self.borrows[borrow] = threading.Event()
            return e

    def _borrow_wait(self, borrow: int) -> None:
        """The lender's stream at a drop: wait until the borrower's stream
        ran what was issued on it before the drop."""
        start = time.monotonic()
        if not self._borrow_event(borrow).wait(WAIT_SECONDS):
            raise RuntimeError(
                f"borrow {borrow}: the borrowing stream did not reach the drop in "
                f"{time.monotonic() - start:.0f} s; the lender's stream goes on"
            )
        with self.borrows_lock:
            self.borrows.pop(borrow, None)

    def _reduce(self, src, out, dims, op, scatter, inplace, seq, into=False) -> None:
        group = self.group(dims)
        try:
            t = _resolve(Ref(src))
            if op == "stack":
                r = stack.stack(t, group, self.rank, self.peers, self.mailbox, seq, scatter)
            else:
                r = collective.reduce(t, group, self.rank, self.peers, self.mailbox, seq, op, scatter, inplace)
                if scatter:
                    r = r[0]  # this member's chunk of dim 0 is its one row
            if inplace:
                if r.data_ptr() != t.data_ptr():  # not written into t already
                    with torch.no_grad():
                        t.copy_(r)
                r = t
            elif into:
                dest = STORE.get(out)
                if isinstance(dest, Failed):
                    return  # out stays failed
                with torch.no_grad():
                    dest.copy_(r)
                r = dest
        except _Propagate as p:
            # No input here: the other members must not wait for it.
            collective.abort(group, self.rank, self.peers, seq, p.failed.text)
            self.mailbox.forget(lambda tag: not (isinstance(tag, tuple) and tag[:1] == (seq,)))
            STORE.put(out, p.failed)
            return
        except BaseException as e:  # noqa: BLE001 - stored, raised at the controller's fetch
            STORE.put(out, Failed(traceback.format_exc(), e))
            return
        STORE.put(out, r)

    def _send_shard(self, src, tag, ports, extent, sel=None) -> None:
        """``to_mesh``, sending side: this shard to every worker of the
        destination whose coordinates in this mesh's dims (in the slice
        ``sel`` of it) are ours."""
        mine = self.coords if sel is None else in_slice(self.coords, sel)
        if mine is None:
            return  # not in the slice that moves
        msg = _shard_message(STORE.get(src))
        for r, port in enumerate(ports):
            at = coords_of(r, extent)
            if all(at[k] == v for k, v in mine.items()):
                port.send((tag, msg))

    def _recv_shard(self, out, tag, workers, name, extent, sel=None) -> None:
        """``to_mesh``, receiving side: the shard of the sender at our
        coordinates in its mesh's dims ``extent`` (mapped into the slice
        ``sel`` of that mesh)."""
        if sel is None:
            at = {k: self.coords[k] for k in extent}
        else:
            at = {}
            for k in extent:
                s = sel.get(k)
                at[k] = self.coords[k] if s is None else s if isinstance(s, int) else s[0] + s[1] * self.coords[k]
        key = (name, rank_of(at, extent))
        try:
            self._watch(key, workers, at)
            kind, payload = self.mailbox.take(tag, key)
        except BaseException as e:  # noqa: BLE001 - stored, raised at the controller's fetch
            STORE.put(out, Failed(traceback.format_exc(), e))
            return
        if kind == "failed":
            STORE.put(out, Failed(payload, None))
        elif kind == "scalar":
            STORE.put(out, collective._from_wire(payload).reshape(()))
        else:
            STORE.put(out, collective._from_wire(payload))

    def _delete(self, streams, ids) -> None:
        key = id(ids)
        with self.del_lock:
            left = self.pending_deletes.get(key, len(streams)) - 1
            if left:
                self.pending_deletes[key] = left
                return
            self.pending_deletes.pop(key, None)
        STORE.delete(ids)


def _shard_message(value: Any) -> tuple:
    """A ``to_mesh`` shard as sent: its bytes (a 0-d tensor as 1-d, since
    it has no byte view), or the failure that replaced it, or the error of
    sending it (the receivers must not wait for a shard that never
    comes)."""
    if isinstance(value, Failed):
        return ("failed", value.text)
    try:
        if isinstance(value, torch.Tensor) and value.dim() == 0:
            return ("scalar", collective._to_wire(value.reshape(1)))
        return ("ok", collective._to_wire(value))
    except BaseException:  # noqa: BLE001 - reported to the receivers
        return ("failed", traceback.format_exc())


class RemoteTensorError(RuntimeError):
    """An op failed on a worker; the message holds the worker's traceback."""


class PeerLostTensorError(RemoteTensorError):
    """An op failed on a worker because a peer worker it waited for is gone
    (the controller raises the SupervisionError of the loss instead)."""


def _error_of(failed: Failed) -> RemoteTensorError:
    if isinstance(failed.exc, collective.PeerLostError):
        return PeerLostTensorError(failed.text)
    return RemoteTensorError(failed.text)


def rank_tensor(dims: tuple) -> torch.Tensor:
    """This worker's rank in the mesh dims ``dims`` (row-major over them;
    one dim: its coordinate). The op behind ``mesh.rank(dims)``."""
    w = current_worker()
    r = 0
    for d in dims:
        r = r * w.extent[d] + w.coords[d]
    return torch.tensor(r)
