"""The data plane under message payloads: large out-of-band pickle buffers
(see ``monarch._src.actor.pickle``) are registered here by the sender, for a
given number of readers, and pulled one-sided by each receiver, which then
releases its reference. A registration stays alive (with its memory) until
every reader has released it; a sweeper thread forgets the released ones.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..._lib import check, error_for, ffi, lib, runtime
from .rdma import READ_ONLY, transfer_future

_pending = []  # (owner handle, memory) of payload buffers not yet pulled
_pending_lock = threading.Lock()
_sweeper = None


def _sweep():
    """Forget payload registrations that every reader has released."""
    if not _pending:
        return
    reg = ffi.new("bool *")
    with _pending_lock:
        keep = []
        for h, mem in _pending:
            if lib.monarch_rdma_buffer_is_registered(h, reg) == 0 and reg[0]:
                keep.append((h, mem))
        _pending[:] = keep


def _sweep_loop():
    """Runs while payloads are pending, so their memory is let go soon
    after the last reader released it, not only at the next large send."""
    global _sweeper
    while True:
        time.sleep(0.2)
        _sweep()
        with _pending_lock:
            if not _pending:
                _sweeper = None
                return


def register_payload(mv: memoryview, readers: int) -> bytes:
    """Register an out-of-band pickle buffer for ``readers`` receivers;
    kept alive until they have all pulled it. Returns its descriptor."""
    _sweep()
    ptr = ffi.from_buffer("uint8_t[]", mv, require_writable=False)
    out = ffi.new("monarch_rdma_buffer **")
    check(
        lib.monarch_rdma_register(runtime(), ptr, mv.nbytes, READ_ONLY, max(1, readers), out),
        "cannot register a payload buffer",
    )
    h = ffi.gc(out[0], lib.monarch_rdma_buffer_free)
    o = ffi.new("uint8_t **")
    n = ffi.new("size_t *")
    check(lib.monarch_rdma_buffer_to_bytes(h, o, n))
    try:
        desc = ffi.buffer(o[0], n[0])[:]
    finally:
        lib.monarch_buffer_free(o[0], n[0])
    global _sweeper
    with _pending_lock:
        _pending.append((h, (mv, ptr)))
        if _sweeper is None:
            _sweeper = threading.Thread(target=_sweep_loop, name="monarch-rdma-sweep", daemon=True)
            _sweeper.start()
    return desc


_new_bytes = None


def _uninitialized_bytes(n: int) -> bytes:
    """A new bytes object of ``n`` bytes whose contents are about to be
    written (PyBytes_FromStringAndSize(NULL, n), as C extensions build
    bytes); nobody else can see it before the pull fills it."""
    global _new_bytes
    if _new_bytes is None:
        f = ctypes.pythonapi.PyBytes_FromStringAndSize
        f.restype = ctypes.py_object
        f.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
        _new_bytes = f
    return _new_bytes(None, n)


# Receive memory for payloads pulled into numpy, kept for reuse once nothing
# refers to it any more: fresh pages cost the kernel a zeroing pass on first
# touch, as much as the copy itself, so a stream of large arrays into one
# proc reuses the same pages. At most this many bytes stay idle per proc.
_POOL_BYTES = int(os.environ.get("MONARCH_PAYLOAD_POOL_MB", "256")) << 20
_pool: list = []  # 1-D uint8 numpy arrays owned here
_pool_lock = threading.Lock()
# References to a pool array nobody else holds: the pool's list, the loop
# variable and getrefcount's argument.
_FREE_REFS = 3


def _pooled(n: int, numpy: Any):
    """``n`` bytes of numpy memory, from the pool when a free block of
    ``n`` to ``2n`` bytes is there; a new block (kept when it fits in the
    pool) otherwise. Whatever is built on the result (views, arrays
    unpickled over it) keeps its block in use."""
    with _pool_lock:
        for block in _pool:
            if n <= block.nbytes <= 2 * n and sys.getrefcount(block) == _FREE_REFS:
                return block[:n]
        block = numpy.empty(n, dtype=numpy.uint8)
        if n <= _POOL_BYTES:
            held = sum(b.nbytes for b in _pool)
            keep = []
            for b in _pool:
                # Free blocks go (oldest first) until the new one fits.
                if held + n > _POOL_BYTES and sys.getrefcount(b) == _FREE_REFS:
                    held -= b.nbytes
                    continue
                keep.append(b)
            if held + n <= _POOL_BYTES:
                keep.append(block)
            _pool[:] = keep
        return block[:n]


def _alloc(n: int, as_bytes: bool):
    """Fresh memory for a pulled payload, not touched yet (the pull asks
    for huge pages over it, so the first touch of 64 MiB costs a few dozen
    page faults instead of 16,384). A payload that was a ``bytes`` object is
    pulled into a new bytes object (unpickling it is then free); others into
    numpy memory when numpy is there (writable, as received arrays were),
    else a bytearray (zero-filled by Python, so slower)."""
    if as_bytes:
        return _uninitialized_bytes(n)
    try:
        import numpy  # optional: without it, pulled payloads are bytearrays
    except ImportError:
        return bytearray(n)
    return _pooled(n, numpy)


def pull_payloads(descs: Sequence[Any], as_bytes: Sequence[bool] | None = None) -> list:
    """Read payload buffers (started together), release them at their
    owner, and return them (as writable byte arrays)."""
    rt = runtime()
    started = []
    try:
        for k, d in enumerate(descs):
            d = bytes(d)
            out = ffi.new("monarch_rdma_buffer **")
            check(lib.monarch_rdma_buffer_from_bytes(rt, d, len(d), out), "payload buffer")
            h = ffi.gc(out[0], lib.monarch_rdma_buffer_free)
            size = ffi.new("uint64_t *")
            check(lib.monarch_rdma_buffer_size(h, size))
            dst = _alloc(size[0], bool(as_bytes and as_bytes[k]))
            ptr = ffi.from_buffer("uint8_t[]", dst, require_writable=False)
            fut = ffi.new("monarch_future **")
            check(lib.monarch_rdma_read_into(h, 0, ptr, len(dst), fut), "cannot pull a payload")
            started.append((h, dst, ptr, transfer_future(fut[0], (dst, ptr))))
        vm = ffi.new("monarch_value_mesh **")
        errors = []
        for _h, _dst, _ptr, fut in started:
            # Wait for every transfer (even after a failure): each writes
            # into its destination until it completes.
            check(lib.monarch_future_wait(fut, -1))
            st = lib.monarch_future_take(fut, vm)
            if st:
                errors.append(error_for(st, "cannot pull a payload from the sender"))
            else:
                lib.monarch_value_mesh_free(vm[0])
        if errors:
            raise errors[0]
        return [dst for _h, dst, _p, _f in started]
    finally:
        # Release our reference at the owner whether or not the pull worked
        # (after every started transfer has finished with its destination).
        for h, _dst, _ptr, fut in started:
            lib.monarch_future_wait(fut, -1)
            lib.monarch_rdma_buffer_drop(h)
