"""``to_mesh``: a distributed tensor moved to another proc mesh, worker to
worker. The worker at each coordinate of the tensor's mesh sends its shard
to the worker(s) at the same coordinates of the destination; dimensions
match by name and size, and a dimension the destination has in addition
receives copies (a broadcast)."""

from __future__ import annotations

import itertools
from typing import Any

from torch.utils._pytree import tree_map

from .controller import controller_for
from .dtensor import DTensor, _desc
from .stream import Stream

_transfers = itertools.count(1)


def to_mesh(t: DTensor, mesh: Any, stream: Stream | None = None) -> DTensor:
    """``t`` on the proc mesh ``mesh`` (on ``stream``, default: ``t``'s)."""
    if not isinstance(t, DTensor):
        raise TypeError(f"to_mesh() moves a distributed tensor, not {type(t).__name__}")
    src = t._ctl
    extent = dict(mesh.sizes)
    missing = [k for k in src.extent if k not in extent]
    if missing:
        raise ValueError(
            f"to_mesh(): the destination mesh {extent} does not have dimension(s) "
            f"{', '.join(missing)} of the tensor's mesh {src.extent}"
        )
    for k, n in src.extent.items():
        if extent[k] != n:
            raise ValueError(
                f"to_mesh(): dimension {k!r} has size {extent[k]} in the destination mesh "
                f"and {n} in the tensor's mesh ({extent} vs {src.extent})"
            )
    if t._rg:
        raise ValueError("to_mesh() of a tensor that requires grad: detach() it first")
    dst = controller_for(mesh)
    stream_name = t._stream if stream is None else stream.name
    tag = ("to_mesh", next(_transfers))
    out = dst.new_id()
    src.issue(("send", t._stream, t._id, tag, dst.ports, dict(dst.extent)))
    # The receivers wait for the senders: send now, whatever the
    # destination does next.
    src.flush()
    dst.issue(("recv", stream_name, out, tag, src.workers, src.name, dict(src.extent)))
    return DTensor(dst, out, _desc(t._meta().detach()), stream_name)


def to_mesh_tree(tensors: Any, mesh: Any, stream: Stream | None = None) -> Any:
    """``monarch.to_mesh``: every distributed tensor of a pytree moved."""
    return tree_map(lambda x: to_mesh(x, mesh, stream) if isinstance(x, DTensor) else x, tensors)
