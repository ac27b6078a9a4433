"""The tensor store of a worker proc: values by id, shared by the proc's
stream threads and by the actors of the proc (which receive their local
shard of a distributed tensor from here).

A value is whatever an op produced (usually a ``torch.Tensor``) or a
``Failed`` record when the op failed; ops that read a failed value fail
with the same record, so the error reaches the controller at the fetch of
any tensor that depends on it.
"""

from __future__ import annotations

import threading
from typing import Any

# How long a reader waits for an id that another stream has not produced yet.
WAIT_SECONDS = 600.0


class Failed:
    """The error of the op that should have produced a value: the worker's
    formatted traceback and the exception (when it pickles)."""

    __slots__ = ("text", "exc")

    def __init__(self, text: str, exc: BaseException | None) -> None:
        self.text = text
        self.exc = exc


class Ref:
    """A distributed tensor in an op's arguments: its id in the store."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:
        self.id = id

    def __reduce__(self):
        return (Ref, (self.id,))

    def __repr__(self) -> str:
        return f"Ref({self.id})"


class Local:
    """A controller-local tensor in an op's arguments, pickled when the op
    is issued (later changes to it at the controller do not reach the op)."""

    __slots__ = ("blob",)

    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def __reduce__(self):
        return (Local, (self.blob,))


class Store:
    """id -> value, with waiting for ids that are not produced yet."""

    def __init__(self) -> None:
        self._values: dict[int, Any] = {}
        self._cond = threading.Condition()

    def put(self, id: int, value: Any) -> None:
        with self._cond:
            self._values[id] = value
            self._cond.notify_all()

    def get(self, id: int) -> Any:
        with self._cond:
            if id in self._values:
                return self._values[id]
            if not self._cond.wait_for(lambda: id in self._values, WAIT_SECONDS):
                raise RuntimeError(f"tensor {id} was never produced on this worker")
            return self._values[id]

    def has(self, id: int) -> bool:
        return id in self._values

    def delete(self, ids) -> None:
        with self._cond:
            for i in ids:
                self._values.pop(i, None)

    def __len__(self) -> int:
        return len(self._values)


# The store of this proc (one per proc: every tensor worker of the proc uses it).
STORE = Store()


def local_shard(id: int) -> Any:
    """The value of distributed tensor ``id`` on this proc (what an actor
    receives in place of a distributed tensor argument)."""
    value = STORE.get(id)
    if isinstance(value, Failed):
        raise RuntimeError(f"the tensor passed to this actor failed to compute on this worker:\n{value.text}")
    return value
