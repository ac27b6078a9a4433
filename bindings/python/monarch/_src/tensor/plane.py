"""The Rust tensor plane (``monarch_tensor_*`` of the C ABI) for torch
tensors: combine kernels and one member's chunk of a collective, on the
tensors' own memory (``data_ptr()``; nothing is copied on the way in or
out). The C call runs without the GIL.

Only the element types the plane has kernels for are accepted
(``supported``); a collective of another type (complex, the wider
unsigned ints) combines with torch ops instead.
"""

from __future__ import annotations

from typing import Any

import torch

from ..._lib import check, ffi, lib

DTYPES = {
    torch.float32: lib.MONARCH_DTYPE_F32,
    torch.float64: lib.MONARCH_DTYPE_F64,
    torch.float16: lib.MONARCH_DTYPE_F16,
    torch.bfloat16: lib.MONARCH_DTYPE_BF16,
    torch.int8: lib.MONARCH_DTYPE_I8,
    torch.int16: lib.MONARCH_DTYPE_I16,
    torch.int32: lib.MONARCH_DTYPE_I32,
    torch.int64: lib.MONARCH_DTYPE_I64,
    torch.uint8: lib.MONARCH_DTYPE_U8,
    torch.bool: lib.MONARCH_DTYPE_BOOL,
}

OPS = {
    "sum": lib.MONARCH_OP_SUM,
    "avg": lib.MONARCH_OP_AVG,
    "min": lib.MONARCH_OP_MIN,
    "max": lib.MONARCH_OP_MAX,
    "product": lib.MONARCH_OP_PRODUCT,
    "band": lib.MONARCH_OP_BAND,
    "bor": lib.MONARCH_OP_BOR,
    "bxor": lib.MONARCH_OP_BXOR,
}
BITWISE = ("band", "bor", "bxor")


def supported(dtype: torch.dtype, op: str) -> bool:
    """Whether the plane combines ``dtype`` with ``op`` (avg of bool and
    the bitwise ops on floats are not defined)."""
    if dtype not in DTYPES or op not in OPS:
        return False
    if op in BITWISE:
        return not dtype.is_floating_point
    return not (dtype == torch.bool and op == "avg")


def _ptr(t: torch.Tensor) -> Any:
    if not t.is_contiguous() or t.device.type != "cpu":
        raise ValueError("the tensor plane needs contiguous CPU tensors")
    return ffi.cast("void *", t.data_ptr())


def combine(out: torch.Tensor, src: torch.Tensor, op: str) -> torch.Tensor:
    """``out = op(out, src)`` elementwise, in place (avg: the sum; see
    ``finish``)."""
    if out.dtype != src.dtype or out.numel() != src.numel():
        raise ValueError(f"combine of {out.dtype}[{out.numel()}] with {src.dtype}[{src.numel()}]")
    check(lib.monarch_tensor_combine(DTYPES[out.dtype], OPS[op], _ptr(out), _ptr(src), out.numel()), "combine")
    return out


def finish(out: torch.Tensor, op: str, members: int) -> torch.Tensor:
    """The last step of a reduce over ``members``: avg divides."""
    check(lib.monarch_tensor_finish(DTYPES[out.dtype], OPS[op], _ptr(out), out.numel(), members), "reduce")
    return out


def reduce_chunk(members: list[Any], offset: int, out: torch.Tensor, op: str) -> list[bool]:
    """``out`` = the ``out.numel()`` elements at byte ``offset`` of every
    member's buffer (``RDMABuffer``s, in group order) combined, then
    finished (avg divides). Returns, per member, whether it was read
    straight from a same-host peer's memory."""
    handles = ffi.new("monarch_rdma_buffer *[]", [m._h for m in members])
    direct = ffi.new("bool[]", len(members))
    check(
        lib.monarch_tensor_reduce_chunk(
            DTYPES[out.dtype], OPS[op], handles, len(members), offset, _ptr(out), out.numel(), direct
        ),
        "reduce",
    )
    return [bool(d) for d in direct]


def read_member(buf: Any, offset: int, out: torch.Tensor) -> bool:
    """Fill ``out`` from byte ``offset`` of ``buf`` (an ``RDMABuffer``):
    straight from a same-host peer's memory (True) or on the data plane."""
    direct = ffi.new("bool *")
    n = out.numel() * out.element_size()
    check(lib.monarch_tensor_read_member(buf._h, offset, _ptr(out), n, direct), "reduce")
    return bool(direct[0])


def reduce_chunk_push(
    members: list[Any], results: list[Any], offset: int, out: torch.Tensor, op: str
) -> tuple[list[bool], list[bool]]:
    """``reduce_chunk`` that also writes each finished block into
    ``results[k]`` (member ``k``'s result ``RDMABuffer``, registered
    writable; None to skip) at ``offset`` for every same-host peer this
    process may write. Returns, per member, whether it was read straight
    and whether the chunk was written into its result."""
    n = len(members)
    handles = ffi.new("monarch_rdma_buffer *[]", [m._h for m in members])
    outs = ffi.new("monarch_rdma_buffer *[]", [ffi.NULL if r is None else r._h for r in results])
    direct = ffi.new("bool[]", n)
    pushed = ffi.new("bool[]", n)
    check(
        lib.monarch_tensor_reduce_chunk_push(
            DTYPES[out.dtype], OPS[op], handles, outs, n, offset, _ptr(out), out.numel(), direct, pushed
        ),
        "reduce",
    )
    return [bool(d) for d in direct], [bool(p) for p in pushed]
