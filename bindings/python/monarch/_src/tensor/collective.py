"""Collectives between the workers of a tensor mesh, worker to worker (the
controller is not on the path): each worker has a mailbox (a channel of its
proc) whose port every other worker knows.

Reduce is a reduce-scatter followed, unless scattering, by an all-gather:
worker ``g`` of a group of ``n`` owns chunk ``g`` of the flattened tensor,
combines that chunk of every member's tensor in group order (so every
member computes bit-identical values) and hands the result chunk to every
other member. Small tensors travel in port messages; large ones are read
one-sided on the runtime's data plane (``_reduce_on_data_plane``), and
combined by the Rust tensor plane (``plane``). Each worker moves
``2 (n - 1) / n`` of the tensor.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from ..._lib import SupervisionError
from ..rdma.rdma import RDMABuffer
from . import plane
from .memory import POOL

# How long a worker waits for a peer's chunk before the reduce fails.
PEER_TIMEOUT = 300.0

# Tensors of at least this many bytes are reduced with one-sided reads on
# the data plane; smaller ones in messages.
DATA_PLANE_MIN = 1 << 20

REDUCTIONS = ("sum", "avg", "max", "min", "product", "band", "bor", "bxor")

# How many large reduces ran with at least one same-host peer read
# straight, and how many only on the data plane (tests check the path).
PATHS: Counter = Counter()


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
    """``acc = op(acc, x)`` in place: the tensor plane's kernel where it
    has one, else torch's."""
    if plane.supported(acc.dtype, op) and acc.is_contiguous() and x.is_contiguous():
        return plane.combine(acc, x, op)
    if op in ("sum", "avg"):
        return acc.add_(x)
    if op == "max":
        return torch.maximum(acc, x, out=acc)
    if op == "min":
        return torch.minimum(acc, x, out=acc)
    if op == "band":
        return acc.bitwise_and_(x)
    if op == "bor":
        return acc.bitwise_or_(x)
    if op == "bxor":
        return acc.bitwise_xor_(x)
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
    inplace: bool = False,
) -> torch.Tensor:
    """All-reduce (or reduce-scatter along dim 0 when ``scatter``) of ``t``
    over the workers ``group`` (global ranks, in group order) of which this
    one is ``me``; ``seq`` tags the messages of this collective. A member
    that fails (a peer gone, a bad tensor) tells the others, so none of
    them waits for its part. ``inplace``: the result may be written into
    ``t`` itself (then it is returned over ``t``'s memory; a failure may
    leave ``t`` partly reduced)."""
    with aborting_on_failure(group, me, ports, mailbox, seq):
        return _reduce(t, group, me, ports, mailbox, seq, op, scatter, inplace)


@contextlib.contextmanager
def aborting_on_failure(group: list[int], me: int, ports: list[Any], mailbox: Mailbox, seq: int) -> Iterator[None]:
    """Run this member's part of collective ``seq``; if it fails, tell the
    other members (so none waits for it) and drop what they sent for it."""
    try:
        yield
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
    inplace: bool,
) -> torch.Tensor:
    n = len(group)
    abort = (seq, "abort")
    with torch.no_grad():
        src = t.detach().resolve_conj().resolve_neg().contiguous()
        if scatter:
            if src.dim() == 0 or src.shape[0] % n:
                raise ValueError(f"reduce(scatter=True) needs dim 0 ({tuple(src.shape)}) divisible by {n}")
        out_shape = (src.shape[0] // n,) + tuple(src.shape[1:]) if scatter else tuple(src.shape)
        if n == 1:
            acc = src.clone()
        elif src.numel() * src.element_size() >= DATA_PLANE_MIN:
            same = src.data_ptr() == t.data_ptr() and t.is_contiguous()
            into = src if inplace and same and not scatter else None
            # Finished (avg divided) by the chunk reduce.
            acc = _reduce_on_data_plane(src, group, me, ports, mailbox, seq, op, scatter, abort, into)
            return acc.reshape(out_shape)
        else:
            acc = _reduce_in_messages(src, group, me, ports, mailbox, seq, op, scatter, abort)
        if op == "avg":
            acc = _divide(acc, n)
        return acc.reshape(out_shape)


def _divide(acc: torch.Tensor, n: int) -> torch.Tensor:
    if acc.is_floating_point() or acc.is_complex():
        return acc.div_(n)
    return torch.div(acc, n, rounding_mode="trunc")  # integers stay integers


def _reduce_in_messages(src, group, me, ports, mailbox, seq, op, scatter, abort) -> torch.Tensor:
    """Small tensors: chunks travel in port messages. Worker ``g`` owns
    chunk ``g``: it receives that chunk from every member, combines them
    in group order and (unless scattering) sends the result to every
    member."""
    n = len(group)
    g = group.index(me)
    chunks = list(src.reshape(-1).tensor_split(n))
    for j, peer in enumerate(group):
        if j != g:
            ports[peer].send(((seq, 1, g), _to_wire(chunks[j])))
    acc = None
    for k in range(n):
        part = chunks[g] if k == g else _from_wire(mailbox.take((seq, 1, k), group[k], abort))
        acc = part.clone() if acc is None else _combine(acc, part, op)
    if scatter:
        return acc
    for j, peer in enumerate(group):
        if j != g:
            ports[peer].send(((seq, 2, g), _to_wire(acc)))
    pieces = [acc if k == g else _from_wire(mailbox.take((seq, 2, k), group[k], abort)) for k in range(n)]
    return torch.cat(pieces)


def _bounds(numel: int, n: int) -> list[int]:
    """Element offsets of the ``n`` chunks of ``tensor_split``, and the end."""
    q, r = divmod(numel, n)
    out = [0]
    for k in range(n):
        out.append(out[-1] + q + (1 if k < r else 0))
    return out


def _reduce_on_data_plane(src, group, me, ports, mailbox, seq, op, scatter, abort, into=None) -> torch.Tensor:
    """Large tensors: every member registers its tensor (for one-sided
    reads) and its result (writable). Worker ``g`` combines chunk ``g`` of
    every member's tensor in group order (so every member computes
    bit-identical values) into chunk ``g`` of its result, and every other
    chunk of the result comes from the member that computed it. A last
    exchange (where a member reads another's result) makes sure no member
    still reads or writes this one's memory when it returns. The result is finished (avg divided) here.

    The reduce of chunk ``g`` is the tensor plane's
    (``plane.reduce_chunk_push``, in Rust): a same-host peer is read
    straight from its memory a cache-sized block at a time as the block is
    combined, and each finished block is written straight into the result
    of every same-host peer while it is in cache (its "ready" message says
    so); a peer on another host (or one the kernel does not let us read)
    is read on the data plane into scratch memory first and reads chunk
    ``g`` of the result itself. Per worker on one host: ``n`` chunks read,
    ``n`` written. Types the plane has no kernel for (complex) read every
    peer's chunk on the data plane and combine with torch.

    ``into`` (the contiguous input itself, for ``reduce_``) receives the
    result instead of new memory: chunk ``k`` of it is read by member
    ``k`` only, which writes its result there block by block after reading
    each block, or which this worker reads after member ``k`` said it is
    ready."""
    n = len(group)
    g = group.index(me)
    flat = src.reshape(-1)
    esize = flat.element_size()
    bounds = _bounds(flat.numel(), n)
    lo, hi = bounds[g], bounds[g + 1]
    mine = hi - lo
    if scatter:
        out = POOL.empty(flat.dtype, (mine,))
        acc = out
    else:
        out = into.reshape(-1) if into is not None else POOL.empty(flat.dtype, (flat.numel(),))
        acc = out[lo:hi]
    src_buf = RDMABuffer(memoryview(_bytes(flat)).toreadonly())
    # Writable: same-host members write their chunk of the result here.
    out_buf = None if scatter else RDMABuffer(memoryview(_bytes(out)))
    peers = [(k, peer) for k, peer in enumerate(group) if k != g]
    direct = [False] * n
    pushed = [False] * n
    came_pushed: set[int] = set()  # members that pushed their chunk here
    try:
        mine_info = (src_buf, out_buf, str(flat.dtype))
        for _k, peer in peers:
            ports[peer].send(((seq, "buffers", g), mine_info))
        theirs = {k: mailbox.take((seq, "buffers", k), peer, abort) for k, peer in peers}
        # Every member sees every member's size and dtype, so a mismatch
        # fails them all here (none reads or waits for another).
        for k, (buf, _out, dtype) in sorted(theirs.items()):
            if buf.size() != src_buf.size() or dtype != str(flat.dtype):
                raise ValueError(
                    f"reduce: member {k} of the group has {buf.size()} bytes of {dtype}, "
                    f"member {g} has {src_buf.size()} bytes of {flat.dtype}; the shards must match"
                )
        # Reduce-scatter: chunk g of every member.
        if mine:
            if plane.supported(flat.dtype, op):
                members = [src_buf if k == g else theirs[k][0] for k in range(n)]
                results = [None if scatter or k == g else theirs[k][1] for k in range(n)]
                direct, pushed = plane.reduce_chunk_push(members, results, lo * esize, acc, op)
            else:
                _reduce_with_torch(flat, acc, theirs, g, lo, hi, op)
        PATHS["same_host" if any(direct) else "data_plane"] += 1
        if any(pushed):
            PATHS["pushed"] += 1
        if not scatter:
            # "ready" says whether chunk g is already in the peer's result.
            for k, peer in peers:
                ports[peer].send(((seq, "ready", g), pushed[k]))
            # All-gather: chunk k of the result from member k, as it is
            # ready, unless member k wrote it here.
            gathers = []
            for k, peer in peers:
                if mailbox.take((seq, "ready", k), peer, abort):
                    came_pushed.add(k)
                    continue
                a, b = bounds[k], bounds[k + 1]
                if b <= a:
                    continue
                if direct[k]:
                    plane.read_member(theirs[k][1], a * esize, out[a:b])
                else:
                    gathers.append(theirs[k][1].read_part(_bytes(out[a:b]), a * esize, timeout=PEER_TIMEOUT))
            for f in gathers:
                f.get()
        # "done": this member no longer touches the peer's memory. Not
        # needed where chunks were pushed both ways: a member that pushed
        # into another is not read by it after its "ready", which came
        # after all its own reads and writes of that member.
        for k, peer in peers:
            if k not in came_pushed:
                ports[peer].send(((seq, "done", g), None))
        for k, peer in peers:
            if not pushed[k]:
                mailbox.take((seq, "done", k), peer, abort)
    except SupervisionError as e:
        raise PeerLostError(f"a peer worker is gone (its proc died): {e}") from e
    finally:
        src_buf.drop()
        if out_buf is not None:
            out_buf.drop()
    return out


def _reduce_with_torch(flat, acc, theirs, g, lo, hi, op) -> None:
    """Chunk ``g`` for element types the tensor plane has no kernel for:
    every peer's chunk read on the data plane (all at once), combined with
    torch ops in group order, then finished."""
    esize = flat.element_size()
    n = len(theirs) + 1
    parts: list[torch.Tensor] = []
    reads = []
    for k in range(n):
        if k == g:
            parts.append(flat[lo:hi])
        else:
            scratch = POOL.empty(flat.dtype, (hi - lo,))
            reads.append(theirs[k][0].read_part(_bytes(scratch), lo * esize, timeout=PEER_TIMEOUT))
            parts.append(scratch)
    for f in reads:
        f.get()
    # The first step writes a fresh accumulator (acc may be this member's
    # own part, for reduce_).
    first = _combine(parts[0].clone(), parts[1], op)
    for p in parts[2:]:
        _combine(first, p, op)
    if op == "avg":
        first = _divide(first, n)
    acc.copy_(first)


def _bytes(t: torch.Tensor) -> Any:
    """The bytes of a contiguous tensor, as a numpy array over them."""
    return t.view(torch.uint8).numpy() if t.dim() == 1 else t.reshape(-1).view(torch.uint8).numpy()
