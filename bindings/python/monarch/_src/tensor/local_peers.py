"""Reading a same-host peer worker's memory straight, for collectives.

A large reduce on the data plane copies each peer's chunk into scratch
memory and then reads it again to combine it. Between procs of one host a
worker can instead read a peer's tensor with ``process_vm_readv`` (the
syscall the data plane's same-host backend uses) a cache-sized block at a
time, right before combining that block: the block is written into cache
and read from there, so the peer's memory is read once from RAM and
nothing is written back but the result (see ``collective``).

Same host means the same kernel boot and pid namespace (pids name the same
processes). The kernel checks ptrace permission; the owner granted it when
it registered its tensor on the data plane (``PR_SET_PTRACER_ANY`` under
Yama). A refusal (EPERM/EACCES/ENOSYS) sends that peer back to the data
plane. ``MONARCH_RDMA_BACKEND=tcp`` or ``ibverbs`` (the data plane's own
choice, read per collective) turns this path off as well.

A peer that dies while it is read: its pid could be taken by another
process, whose memory would then be read. A pidfd opened before the reads
tells whether the process read is the peer and still alive afterwards.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
from typing import Any

import torch

# Elements per block: torch's intra-op grain (``at::internal::GRAIN_SIZE``),
# so each elementwise op of a block runs on the calling thread (no worker
# threads woken by every one of four procs on two cores), and a few blocks
# of every dtype stay in L2.
BLOCK = 32768


def _host_identity() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot}/{ns}"


IDENTITY = _host_identity()

_UNSUPPORTED = (errno.EPERM, errno.EACCES, errno.ENOSYS)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _load():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        f = libc.process_vm_readv
    except (OSError, AttributeError):
        return None
    f.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(_IoVec),
        ctypes.c_ulong,
        ctypes.POINTER(_IoVec),
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    f.restype = ctypes.c_ssize_t
    return f


_readv = _load()

# Peers (by pid) the kernel refused: they are read on the data plane.
_refused: set[int] = set()


def enabled() -> bool:
    """Whether this worker reads same-host peers straight."""
    backend = os.environ.get("MONARCH_RDMA_BACKEND", "auto")
    return _readv is not None and bool(IDENTITY) and backend in ("auto", "same_host")


def me() -> tuple[str, int] | None:
    """What a member tells the others so they can read it straight."""
    return (IDENTITY, os.getpid()) if enabled() else None


class PeerGone(OSError):
    """The peer process being read exited."""

    def __init__(self, pid: int) -> None:
        super().__init__(errno.ESRCH, f"peer process {pid} is gone")
        self.pid = pid


class Peer:
    """A same-host peer process, read with ``process_vm_readv``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd = os.pidfd_open(pid)
        self._l = _IoVec()
        self._r = _IoVec()

    @classmethod
    def open(cls, who: Any, probe_addr: int) -> Peer | None:
        """The peer that sent ``who`` (from its ``me()``), when it runs on
        this host and the kernel lets us read it (one byte at
        ``probe_addr`` is tried); else None."""
        if not enabled() or who is None:
            return None
        ident, pid = who
        if ident != IDENTITY or pid in _refused:
            return None
        try:
            p = cls(pid)
        except OSError:
            return None
        one = ctypes.c_uint8()
        try:
            p.read(probe_addr, ctypes.addressof(one), 1)
        except OSError as e:
            p.close()
            if e.errno in _UNSUPPORTED:
                _refused.add(pid)
            return None
        return p

    def read(self, addr: int, into: int, n: int) -> None:
        """Copy ``n`` bytes at ``addr`` in the peer into ``into`` here."""
        done = 0
        while done < n:
            self._l.base = into + done
            self._l.len = n - done
            self._r.base = addr + done
            self._r.len = n - done
            got = _readv(self.pid, ctypes.byref(self._l), 1, ctypes.byref(self._r), 1, 0)
            if got < 0:
                e = ctypes.get_errno()
                if e == errno.EINTR:
                    continue
                if not self.alive():
                    raise PeerGone(self.pid)
                raise OSError(e, f"reading peer process {self.pid}: {os.strerror(e)}")
            if got == 0:
                raise OSError(errno.EIO, f"reading peer process {self.pid} made no progress")
            done += got

    def read_into(self, addr: int, t: torch.Tensor) -> torch.Tensor:
        """Fill the contiguous tensor ``t`` from ``addr`` in the peer."""
        self.read(addr, t.data_ptr(), t.numel() * t.element_size())
        return t

    def alive(self) -> bool:
        """Whether the process read (the same one, not a reuse of its pid)
        is still running: its pidfd turns readable when it exits."""
        return not select.select([self._fd], [], [], 0)[0]

    def check(self) -> None:
        """Raise PeerGone when the peer exited (so what was read of it may
        be another process's memory)."""
        if not self.alive():
            raise PeerGone(self.pid)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
