"""Collectives between the workers of a tensor mesh, worker to worker (the
controller is not on the path): each worker has a mailbox (a channel of its
proc) whose port every other worker knows, and chunks travel as port
messages (large ones on the runtime's data plane).

Reduce is a reduce-scatter followed, unless scattering, by an all-gather:
worker ``g`` of a group of ``n`` owns chunk ``g`` of the flattened tensor,
receives that chunk from every other member, combines the contributions in
group order (so every member computes bit-identical values) and sends the
result chunk to every other member. Each worker sends and receives
``2 (n - 1) / n`` of the tensor.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import numpy as np
import torch

# How long a worker waits for a peer's chunk before the reduce fails.
PEER_TIMEOUT = 300.0

REDUCTIONS = ("sum", "avg", "max", "min", "product")


class PeerLostError(RuntimeError):
    """A peer worker this one waited for is gone (its proc died), or a
    member of the same collective failed and aborted it."""


# How often a waiting worker checks whether the peer it waits for is gone.
LOST_CHECK_EVERY = 0.2


class Mailbox:
    """Values received on this worker's channel, by tag. Several stream
    threads may wait at once: one of them receives, the others wait for it.
    ``is_lost(peer)`` tells whether a peer's proc is known to be gone: a
    wait for a message from it then fails at once instead of at the
    timeout."""

    def __init__(self, receiver: Any, is_lost: Callable[[Any], bool] = lambda peer: False) -> None:
        self._rx = receiver
        self._is_lost = is_lost
        self._got: dict[Any, Any] = {}
        self._cond = threading.Condition()
        self._receiving = False
        self._pending: Any = None

    def take(self, tag: Any, peer: Any = None, abort: Any = None, timeout: float = PEER_TIMEOUT) -> Any:
        """The message tagged ``tag`` from ``peer``. Raises PeerLostError
        once ``peer`` is known gone, or once a message tagged ``abort``
        arrived (a member of the same collective failed)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if tag in self._got:
                    return self._got.pop(tag)
                if abort is not None and abort in self._got:
                    raise PeerLostError(f"a peer worker aborted this collective: {self._got[abort]}")
                if peer is not None and self._is_lost(peer):
                    raise PeerLostError(f"peer worker {peer} is gone (its proc died)")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no message {tag!r} from a peer worker after {timeout} s")
                slice_ = min(left, LOST_CHECK_EVERY)
                if self._receiving:
                    self._cond.wait(slice_)
                    continue
                self._receiving = True
                if self._pending is None:
                    self._pending = self._rx.recv()
                self._cond.release()
                try:
                    # Every arrival completes this receive, whichever
                    # thread waits for it; one not completed in time is
                    # waited on again later.
                    got = self._pending.get(timeout=slice_)
                    self._pending = None
                except TimeoutError:
                    got = None
                finally:
                    self._cond.acquire()
                    self._receiving = False
                if got is not None:
                    self._got[got[0]] = got[1]
                self._cond.notify_all()

    def forget(self, keep: Callable[[Any], bool]) -> None:
        """Drop the received messages whose tag ``keep`` rejects (those of
        a collective that failed)."""
        with self._cond:
            for tag in [t for t in self._got if not keep(t)]:
                del self._got[tag]


def _to_wire(t: torch.Tensor) -> tuple:
    t = t.detach().contiguous()
    return (str(t.dtype), tuple(t.shape), t.view(torch.uint8).reshape(-1).numpy())


def _from_wire(w: tuple) -> torch.Tensor:
    dtype_name, shape, raw = w
    dtype = getattr(torch, dtype_name.split(".")[-1])
    buf = np.frombuffer(raw, dtype=np.uint8)
    if buf.size == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(buf.copy()).view(dtype).reshape(shape)


def _combine(acc: torch.Tensor, x: torch.Tensor, op: str) -> torch.Tensor:
    if op in ("sum", "avg"):
        return acc.add_(x)
    if op == "max":
        return torch.maximum(acc, x, out=acc)
    if op == "min":
        return torch.minimum(acc, x, out=acc)
    return acc.mul_(x)


def reduce(
    t: torch.Tensor,
    group: list[int],
    me: int,
    ports: list[Any],
    mailbox: Mailbox,
    seq: int,
    op: str,
    scatter: bool,
) -> torch.Tensor:
    """All-reduce (or reduce-scatter along dim 0 when ``scatter``) of ``t``
    over the workers ``group`` (global ranks, in group order) of which this
    one is ``me``; ``seq`` tags the messages of this collective. A member
    that fails (a peer gone, a bad tensor) tells the others, so none of
    them waits for its part."""
    try:
        return _reduce(t, group, me, ports, mailbox, seq, op, scatter)
    except BaseException as e:
        abort(group, me, ports, seq, f"{type(e).__name__}: {e}")
        mailbox.forget(lambda tag: not (isinstance(tag, tuple) and tag[:1] == (seq,)))
        raise


def abort(group: list[int], me: int, ports: list[Any], seq: int, why: str) -> None:
    """Tell the other members of collective ``seq`` that this one will not
    take part (its input failed, or the collective failed here)."""
    first = why.strip().splitlines()[-1] if why.strip() else why
    for peer in group:
        if peer != me:
            try:
                ports[peer].send(((seq, "abort"), f"worker {me}: {first}"))
            except Exception:  # noqa: BLE001 - a lost peer needs no notice
                pass


def _reduce(
    t: torch.Tensor,
    group: list[int],
    me: int,
    ports: list[Any],
    mailbox: Mailbox,
    seq: int,
    op: str,
    scatter: bool,
) -> torch.Tensor:
    n = len(group)
    g = group.index(me)
    abort = (seq, "abort")
    with torch.no_grad():
        src = t.detach().contiguous()
        if scatter:
            if src.dim() == 0 or src.shape[0] % n:
                raise ValueError(f"reduce(scatter=True) needs dim 0 ({tuple(src.shape)}) divisible by {n}")
        chunks = list(src.reshape(-1).tensor_split(n))
        for j, peer in enumerate(group):
            if j != g:
                ports[peer].send(((seq, 1, g), _to_wire(chunks[j])))
        acc = None
        for k in range(n):
            part = chunks[g] if k == g else _from_wire(mailbox.take((seq, 1, k), group[k], abort))
            acc = part.clone() if acc is None else _combine(acc, part, op)
        if op == "avg":
            acc = acc.div_(n) if acc.is_floating_point() else acc.div(n)
        if scatter:
            return acc.reshape((src.shape[0] // n,) + tuple(src.shape[1:]))
        for j, peer in enumerate(group):
            if j != g:
                ports[peer].send(((seq, 2, g), _to_wire(acc)))
        pieces = [acc if k == g else _from_wire(mailbox.take((seq, 2, k), group[k], abort)) for k in range(n)]
        return torch.cat(pieces).reshape(src.shape)
