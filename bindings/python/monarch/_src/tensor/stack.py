"""``reduce(dims, "stack")``: the all-gather, and with ``scatter=True`` the
all-to-all, between the workers of a group, worker to worker over the same
mailboxes as the other collectives (``collective``).

- All-gather: every member gets ``[t_0, ..., t_{n-1}]`` stacked in group
  order (a new dim 0 of size ``n``).
- All-to-all: dim 0 of every member's tensor has size ``n``; member ``i``
  gets ``[t_0[i], ..., t_{n-1}[i]]`` (the same shape as its input).

Small tensors travel in port messages; large ones are read one-sided,
straight from a same-host peer's memory or on the data plane
(``plane.read_member``), followed by a last exchange so that no member
still reads another's memory when it returns.
"""

from __future__ import annotations

from typing import Any

import torch

from ..._lib import SupervisionError
from ..rdma.rdma import RDMABuffer
from . import plane
from .collective import (
    DATA_PLANE_MIN,
    Mailbox,
    PeerLostError,
    _bytes,
    _from_wire,
    _to_wire,
    aborting_on_failure,
)


def stack(
    t: torch.Tensor,
    group: list[int],
    me: int,
    ports: list[Any],
    mailbox: Mailbox,
    seq: int,
    scatter: bool,
) -> torch.Tensor:
    """The all-gather (or, with ``scatter``, the all-to-all) of ``t`` over
    the workers ``group`` (global ranks, in group order) of which this one
    is ``me``; ``seq`` tags the messages of this collective. A member that
    fails tells the others, so none of them waits for its part."""
    with aborting_on_failure(group, me, ports, mailbox, seq):
        return _stack(t, group, me, ports, mailbox, seq, scatter)


def _stack(t, group, me, ports, mailbox, seq, scatter) -> torch.Tensor:
    n = len(group)
    g = group.index(me)
    aborted = (seq, "abort")
    with torch.no_grad():
        src = t.detach().resolve_conj().resolve_neg().contiguous()
        if scatter and (src.dim() == 0 or src.shape[0] != n):
            raise ValueError(f"reduce('stack', scatter=True) needs dim 0 of {tuple(src.shape)} to be {n}")
        if n == 1:
            return src.clone() if scatter else src.unsqueeze(0).clone()
        out = torch.empty(tuple(src.shape) if scatter else (n, *src.shape), dtype=src.dtype)
        if src.numel() * src.element_size() >= DATA_PLANE_MIN:
            _read_peers(src, out, group, g, ports, mailbox, seq, scatter, aborted)
        else:
            _in_messages(src, out, group, g, ports, mailbox, seq, scatter, aborted)
        return out


def _piece(src: torch.Tensor, scatter: bool, k: int) -> torch.Tensor:
    """What member ``k`` gets of this member's tensor."""
    return src[k] if scatter else src


def _check(k: int, g: int, dtype: str, shape: tuple, src: torch.Tensor) -> None:
    if dtype != str(src.dtype) or tuple(shape) != tuple(src.shape):
        raise ValueError(
            f"reduce('stack'): member {k} of the group has a {dtype} tensor of shape {tuple(shape)}, "
            f"member {g} a {src.dtype} tensor of shape {tuple(src.shape)}; the shards must match"
        )


def _in_messages(src, out, group, g, ports, mailbox, seq, scatter, aborted) -> None:
    for k, peer in enumerate(group):
        if k != g:
            ports[peer].send(((seq, "stack", g), (str(src.dtype), tuple(src.shape), _to_wire(_piece(src, scatter, k)))))
    for k, peer in enumerate(group):
        if k == g:
            out[k].copy_(_piece(src, scatter, g))
            continue
        dtype, shape, wire = mailbox.take((seq, "stack", k), peer, aborted)
        _check(k, g, dtype, shape, src)
        out[k].copy_(_from_wire(wire).reshape(out[k].shape))


def _read_peers(src, out, group, g, ports, mailbox, seq, scatter, aborted) -> None:
    """Every member registers its tensor; each reads what it gets of every
    other member's (all of it, or row ``g`` for the all-to-all)."""
    buf = RDMABuffer(memoryview(_bytes(src.reshape(-1))).toreadonly())
    peers = [(k, peer) for k, peer in enumerate(group) if k != g]
    try:
        for _k, peer in peers:
            ports[peer].send(((seq, "stack", g), (buf, str(src.dtype), tuple(src.shape))))
        theirs = {k: mailbox.take((seq, "stack", k), peer, aborted) for k, peer in peers}
        # Every member sees every member's shape and dtype, so a mismatch
        # fails them all here (none reads or waits for another).
        for k, (_buf, dtype, shape) in sorted(theirs.items()):
            _check(k, g, dtype, shape, src)
        row = out[0].numel() * out.element_size()
        offset = g * row if scatter else 0
        for k in range(len(group)):
            if k == g:
                out[k].copy_(_piece(src, scatter, g))
            else:
                plane.read_member(theirs[k][0], offset, out[k])
        for _k, peer in peers:
            ports[peer].send(((seq, "stack-done", g), None))
        for k, peer in peers:
            mailbox.take((seq, "stack-done", k), peer, aborted)
    except SupervisionError as e:
        raise PeerLostError(f"a peer worker is gone (its proc died): {e}") from e
    finally:
        buf.drop()
