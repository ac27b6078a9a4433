"""Tensors between the workers and the controller without torch's
pickling, which copies a tensor's bytes into the pickle stream more than
once and rebuilds small tensors slowly.

* ``WireTensor``: a tensor in a message as its dtype, shape and bytes (a
  copy taken when it is pickled, so later writes to the tensor do not
  change what is received); rebuilt as a tensor over the received bytes.
* ``Landing``: the controller's destination for a large fetch: memory
  (reused from earlier fetches when it can) registered as an RDMA buffer. The worker's
  stream writes the shard into it one-sided (same host: one copy between
  the two processes) before it runs the next op, then answers with a small
  message; the fetched tensor is a view of that memory.
"""

from __future__ import annotations

import mmap
import pickle
from typing import Any

import torch

from ..rdma.rdma import RDMABuffer
from .memory import POOL

# Fetches of at least this many bytes land by a one-sided write.
LANDING_MIN = 1 << 20

# Seconds a worker's write into a landing may take before the fetch fails.
WRITE_TIMEOUT = 300.0

_DTYPES = {str(d): d for d in vars(torch).values() if isinstance(d, torch.dtype)}


def plain(t: Any) -> bool:
    """A dense CPU tensor without a subclass (what the wire forms carry)."""
    return type(t) is torch.Tensor and t.layout == torch.strided and t.device.type == "cpu" and not t.is_quantized


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().resolve_conj().resolve_neg()  # lazy conjugate/negative views
    if not t.is_contiguous():
        t = t.contiguous()
    return t.reshape(-1).view(torch.uint8)


class WireTensor:
    """A CPU tensor as sent: unpickles as a contiguous ``torch.Tensor``
    with the same values, dtype, shape and requires-grad flag."""

    __slots__ = ("t",)

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __reduce_ex__(self, protocol: int) -> Any:
        t = self.t
        data = _bytes_of(t).numpy().tobytes()
        return (_rebuild, (str(t.dtype), tuple(t.shape), bool(t.requires_grad), data))


def _rebuild(dtype: str, shape: tuple, requires_grad: bool, data: bytes) -> torch.Tensor:
    if not data:
        t = torch.empty(shape, dtype=_DTYPES[dtype])
    else:
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(_DTYPES[dtype]).reshape(shape)
    if requires_grad:
        t.requires_grad_(True)
    return t


def wrap(value: Any) -> Any:
    """``value`` with its plain CPU tensors (at the top or in plain
    tuples, lists and dicts) as ``WireTensor``; others pickle as torch does."""
    t = type(value)
    if t is torch.Tensor:
        return WireTensor(value) if plain(value) else value
    if t is tuple or t is list:
        return t(wrap(v) for v in value)
    if t is dict:
        return {k: wrap(v) for k, v in value.items()}
    return value


def answer(value: Any) -> Any:
    """``value`` pickled with the standard pickler, as ``bytes``: the
    runtime sends bytes as they are, without its cloudpickle pass (tens of
    microseconds). Values the standard pickler refuses are returned as
    they are. ``opened`` undoes it at the receiver."""
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:  # noqa: BLE001 - lambdas and the like: cloudpickle
        return value


def opened(value: Any) -> Any:
    return pickle.loads(value) if type(value) is bytes else value


class Landing:
    """Where a large fetched shard is written (at the controller)."""

    __slots__ = ("mem", "buf", "dtype", "shape", "requires_grad")

    def __init__(self, dtype: torch.dtype, shape: tuple, nbytes: int, requires_grad: bool) -> None:
        self.mem: mmap.mmap | None = POOL.take(nbytes)
        self.buf = RDMABuffer(self.mem)
        self.dtype = dtype
        self.shape = shape
        self.requires_grad = requires_grad

    def request(self) -> tuple:
        """What the worker needs to write the shard here."""
        return (self.buf, str(self.dtype), self.shape)

    def tensor(self) -> torch.Tensor:
        """The shard, once written: a view of the landing memory, which
        goes back to the pool when the last tensor over it is gone."""
        self.buf.drop()
        mem, self.mem = self.mem, None
        t = POOL.tensor(mem, self.dtype, self.shape)
        return t.requires_grad_(True) if self.requires_grad else t

    def close(self) -> None:
        if not self.buf._dropped:
            self.buf.drop()
        if self.mem is not None:
            POOL.give(self.mem)
            self.mem = None


def land(value: Any, request: tuple) -> bool:
    """On the worker: write ``value`` into the controller's landing
    ``request`` if it is the tensor the controller expects (dtype, shape);
    False otherwise (it then travels in the answer)."""
    buf, dtype, shape = request
    if not plain(value) or str(value.dtype) != dtype or tuple(value.shape) != tuple(shape):
        return False
    raw = _bytes_of(value)
    if raw.numel() != buf.size():
        return False
    buf.write_from(raw.numpy(), timeout=WRITE_TIMEOUT).get()
    return True
