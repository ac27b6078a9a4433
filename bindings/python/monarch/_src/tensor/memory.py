"""Large tensor memory kept for reuse, for the buffers the tensor engine
fills with a copy (fetched shards at the controller, collective results
and scratch on the workers).

On a VM the first touch of fresh memory costs more than the copy into it
(64 MiB: ~200 ms of page faults against ~15 ms of memcpy on the 2-vCPU
test machine), and allocators return large blocks to the system when they
are freed. The memory is private and asks for transparent huge pages
(shared anonymous memory would be shmem, which gets none with the usual
``shmem_enabled=never``): with them faults are 512 times fewer and a peer
reads the memory with ``process_vm_readv`` about as fast as memcpy (it
pins one huge page instead of 512 small ones). Memory taken here goes back to the pool when the last tensor over
it is gone, up to ``Pool.KEEP`` bytes (256 MiB) per process.
"""

from __future__ import annotations

import mmap
import threading
import weakref

import numpy
import torch


class Pool:
    KEEP = 256 << 20

    def __init__(self) -> None:
        self._free: dict[int, list[mmap.mmap]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> mmap.mmap:
        """``n`` bytes (``n`` > 0): memory given back before, or fresh."""
        with self._lock:
            free = self._free.get(n)
            if free:
                self._bytes -= n
                return free.pop()
        m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE)
        try:
            m.madvise(mmap.MADV_HUGEPAGE)
        except (AttributeError, OSError):  # advice only
            pass
        return m

    def give(self, m: mmap.mmap) -> None:
        """Memory nothing uses any more: kept for reuse if there is room."""
        n = len(m)
        with self._lock:
            if self._bytes + n <= self.KEEP:
                self._free.setdefault(n, []).append(m)
                self._bytes += n

    def tensor(self, m: mmap.mmap, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
        """A tensor over ``m`` (as many bytes as ``dtype`` and ``shape``
        need), which gives ``m`` back when its last view is gone."""
        arr = numpy.frombuffer(m, dtype=numpy.uint8)
        weakref.finalize(arr, self.give, m)
        return torch.from_numpy(arr).view(dtype).reshape(shape)

    def empty(self, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
        """``torch.empty(shape, dtype=dtype)`` over pool memory."""
        n = dtype.itemsize
        for d in shape:
            n *= d
        if n == 0:
            return torch.empty(shape, dtype=dtype)
        return self.tensor(self.take(n), dtype, shape)


# The pool of this process.
POOL = Pool()
