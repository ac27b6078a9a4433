"""``monarch.coalescing()``: the tensor ops issued in a block reach the
workers together, as one message per mesh when the block ends.

Ops are batched anyway (``MeshController``): a batch goes out when it is
full, when the controller needs an answer, or when ``mesh.activate()``
ends. Inside ``coalescing()`` the first and the last of these wait for the
end of the block; an answer asked for inside it (``fetch_shard``, sending a
tensor to an actor, ``to_mesh``) still sends what was issued before it, so
nothing waits on ops held back. A block inside another is part of it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_local = threading.local()


@contextlib.contextmanager
def coalescing() -> Iterator[None]:
    """Send the tensor ops of the block together at its end (also when the
    block raises: the ops issued before the error run, and the error
    propagates). Usable as a decorator: ``@coalescing()``."""
    if getattr(_local, "held", None) is not None:
        yield  # inside an outer block: it sends
        return
    held: dict[int, Any] = {}
    _local.held = held
    try:
        yield
    finally:
        _local.held = None
        for ctl in held.values():
            ctl.flush()


def holds(ctl: Any) -> bool:
    """Whether a coalescing block of this thread holds back ``ctl``'s batch
    (it then sends it when the block ends)."""
    held = getattr(_local, "held", None)
    if held is None:
        return False
    held[id(ctl)] = ctl
    return True
