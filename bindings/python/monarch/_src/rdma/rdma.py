"""Registered memory buffers read and written one-sided: ``RDMABuffer``,
and which backend (same-host, TCP, ibverbs) transfers use. The public
face, with an example, is ``monarch.rdma``."""

from __future__ import annotations

from typing import Any

from ..._lib import check, error_for, ffi, lib, runtime
from ..actor.future import Future, convert_none

READ_ONLY = lib.MONARCH_RDMA_READ_ONLY
_DEFAULT_TIMEOUT = 3.0


def _byte_view(data, what: str) -> memoryview:
    """A flat, C-contiguous byte memoryview over ``data`` (no copy)."""
    mod = type(data).__module__ or ""
    if mod.startswith("torch"):
        if getattr(data, "device", None) is not None and data.device.type != "cpu":
            raise ValueError(f"{what}: only CPU tensors are supported, not {data.device}")
        if not data.is_contiguous():
            raise ValueError(f"{what}: the tensor must be contiguous")
        data = data.detach().numpy()
    try:
        mv = memoryview(data)
    except TypeError:
        raise TypeError(
            f"{what}: needs a memoryview, a numpy array or a CPU torch tensor, "
            f"not {type(data).__name__}"
        ) from None
    if not mv.c_contiguous:
        raise ValueError(f"{what}: the memory must be contiguous")
    if mv.nbytes == 0:
        raise ValueError(f"{what}: the memory is empty")
    if mv.ndim != 1 or mv.format not in ("B", "b", "c"):
        mv = mv.cast("B")
    return mv


def _backend_name(fn, *args) -> str:
    out = ffi.new("char **")
    check(fn(*args, out))
    return ffi.string(out[0]).decode()


class _TransferFuture(Future):
    """A Future whose ``get()`` without a timeout waits the transfer's."""

    __slots__ = ("_timeout",)

    def get(self, timeout: float | None = None) -> None:
        if timeout is None:
            timeout = self._timeout
        return super().get(timeout)

    result = get


def transfer_future(fut: Any, keep: Any) -> Any:
    """Own a transfer's future: the local memory (``keep``) stays alive
    until the future is freed, and freeing it first waits for the transfer
    to end (it writes into that memory until then; transfers always end,
    their I/O is bounded by timeouts)."""

    def free(f, _keep=keep):
        lib.monarch_future_wait(f, -1)
        lib.monarch_future_free(f)

    return ffi.gc(fut, free)


class RDMABuffer:
    """A registered buffer (in its owner) or a handle on one (elsewhere)."""

    __slots__ = ("_h", "_size", "_keep", "_owner", "_dropped", "__weakref__")

    def __init__(self, data: Any) -> None:
        mv = _byte_view(data, "RDMABuffer")
        ptr = ffi.from_buffer("uint8_t[]", mv, require_writable=False)
        out = ffi.new("monarch_rdma_buffer **")
        flags = READ_ONLY if mv.readonly else 0
        check(
            lib.monarch_rdma_register(runtime(), ptr, mv.nbytes, flags, 1, out),
            "cannot register the RDMA buffer",
        )
        self._h = ffi.gc(out[0], lib.monarch_rdma_buffer_free)
        self._size = mv.nbytes
        self._keep = (data, mv, ptr)
        self._owner = True
        self._dropped = False

    @classmethod
    def _from_bytes(cls, desc: bytes) -> RDMABuffer:
        self = cls.__new__(cls)
        out = ffi.new("monarch_rdma_buffer **")
        check(
            lib.monarch_rdma_buffer_from_bytes(runtime(), desc, len(desc), out),
            "cannot rebuild an RDMA buffer handle",
        )
        self._h = ffi.gc(out[0], lib.monarch_rdma_buffer_free)
        size = ffi.new("uint64_t *")
        check(lib.monarch_rdma_buffer_size(self._h, size))
        self._size = int(size[0])
        self._keep = None
        self._owner = False
        self._dropped = False
        return self

    def _check(self):
        if self._dropped:
            raise ValueError("this RDMABuffer was dropped; it cannot be used any more")

    def __reduce__(self):
        self._check()
        out = ffi.new("uint8_t **")
        n = ffi.new("size_t *")
        check(lib.monarch_rdma_buffer_to_bytes(self._h, out, n))
        try:
            desc = ffi.buffer(out[0], n[0])[:]
        finally:
            lib.monarch_buffer_free(out[0], n[0])
        return (_rebuild, (desc,))

    def size(self) -> int:
        """Size in bytes."""
        return self._size

    def backend(self) -> str:
        """The backend transfers on this handle use: "same_host", "tcp"
        or "ibverbs"."""
        self._check()
        return _backend_name(lib.monarch_rdma_buffer_backend, self._h)

    def _transfer(self, local, offset, timeout, write, part=False):
        self._check()
        what = "write_from" if write else "read_into"
        mv = _byte_view(local, f"{what}()")
        if part:
            # A read of exactly len(local) bytes from offset.
            n = mv.nbytes
            if mv.readonly:
                raise ValueError("read_part(): the destination is read-only")
            if offset < 0 or offset + n > self._size:
                raise ValueError(
                    f"read_part(): {n} bytes at offset {offset} are outside the buffer of {self._size} bytes"
                )
            ptr = ffi.from_buffer("uint8_t[]", mv, require_writable=True)
            fn = lib.monarch_rdma_read_into
        elif write:
            n = mv.nbytes
            if offset < 0 or offset + n > self._size:
                raise ValueError(
                    f"write_from(): {n} bytes at offset {offset} do not fit the "
                    f"RDMA buffer of {self._size} bytes"
                )
            ptr = ffi.from_buffer("uint8_t[]", mv, require_writable=False)
            fn = lib.monarch_rdma_write_from
        else:
            if mv.readonly:
                raise ValueError("read_into(): the destination is read-only")
            if offset < 0 or offset > self._size:
                raise ValueError(f"read_into(): offset {offset} is outside the buffer")
            n = self._size - offset
            if mv.nbytes < n:
                raise ValueError(
                    f"read_into(): the destination has {mv.nbytes} bytes, smaller than "
                    f"the {n} bytes of the RDMA buffer"
                )
            ptr = ffi.from_buffer("uint8_t[]", mv, require_writable=True)
            fn = lib.monarch_rdma_read_into
        out = ffi.new("monarch_future **")
        st = fn(self._h, offset, ptr, n, out)
        if st:
            raise error_for(st, f"RDMABuffer.{what}")
        f = _TransferFuture(transfer_future(out[0], (local, mv, ptr, self)), convert_none, None)
        f._timeout = timeout
        return f

    def read_into(self, dst: Any, offset: int = 0, *, timeout: float | None = _DEFAULT_TIMEOUT) -> Future[None]:
        """Copy the buffer's bytes (from ``offset``) into the start of
        ``dst`` (a writable memoryview, numpy array or CPU tensor; bytes
        past the buffer's size are left untouched). A ``dst`` smaller than
        the bytes to copy is refused. Returns a Future (``.get()`` waits up
        to ``timeout`` seconds; None: no limit); ``dst`` must not be
        touched until it completes."""
        return self._transfer(dst, offset, timeout, False)

    def read_part(self, dst: Any, offset: int = 0, *, timeout: float | None = _DEFAULT_TIMEOUT) -> Future[None]:
        """Copy exactly as many bytes as ``dst`` holds, from ``offset`` of
        the buffer, into ``dst`` (a range outside the buffer is refused).
        A Future like ``read_into``."""
        return self._transfer(dst, offset, timeout, False, part=True)

    def write_from(self, src: Any, offset: int = 0, *, timeout: float | None = _DEFAULT_TIMEOUT) -> Future[None]:
        """Copy all of ``src`` into the buffer at ``offset`` (it must fit).
        Returns a Future like ``read_into``."""
        return self._transfer(src, offset, timeout, True)

    def drop(self) -> Future[None]:
        """Release the buffer: in its owner, unregister it (waiting for
        transfers in progress); elsewhere, ask the owner to release it.
        Any later use of this object raises. Done when this returns; the
        Future it returns (already complete) lets upstream code ``await``
        it or call ``.get()``."""
        self._check()
        self._dropped = True
        check(lib.monarch_rdma_buffer_drop(self._h), "RDMABuffer.drop")
        return Future._ready(None)

    def __repr__(self) -> str:
        state = "dropped" if self._dropped else ("owner" if self._owner else "handle")
        return f"<RDMABuffer {self._size} bytes ({state})>"


class RDMAReadTransferWarning(Warning):
    """Upstream's warning about a read transfer; never issued here (the
    data plane has no slow path it would warn about)."""


class RDMAWriteTransferWarning(Warning):
    """Upstream's warning about a write transfer; never issued here."""


class RDMAAction:
    """A batch of transfers submitted together, as upstream's
    ``RDMAAction``: queue reads and writes, then ``submit()`` starts them
    all at once (they run concurrently) and gives a Future of their end
    (the first failure raises)."""

    def __init__(self) -> None:
        self._ops: list = []  # (buffer, local memory, write)

    def read_into(self, src: RDMABuffer, dst: Any) -> RDMAAction:
        """Queue a read of all of RDMA buffer ``src`` into local ``dst``."""
        self._ops.append((src, dst, False))
        return self

    def write_from(self, dst: RDMABuffer, src: Any) -> RDMAAction:
        """Queue a write of all of local ``src`` into RDMA buffer ``dst``."""
        self._ops.append((dst, src, True))
        return self

    def read_remote(self, dst: Any, src: RDMABuffer) -> RDMAAction:
        """Queue a read of RDMA buffer ``src`` into local ``dst``."""
        return self.read_into(src, dst)

    def write_remote(self, dst: RDMABuffer, src: Any) -> RDMAAction:
        """Queue a write of local ``src`` into RDMA buffer ``dst``."""
        return self.write_from(dst, src)

    def submit(self, timeout: float | None = _DEFAULT_TIMEOUT) -> Future[None]:
        """Start every queued transfer, wait for all of them, and give a
        completed Future (the first failure is raised, after every transfer
        has ended)."""
        for buf, _, _ in self._ops:
            if not isinstance(buf, RDMABuffer):
                raise TypeError(f"RDMAAction needs RDMABuffer objects, not {type(buf).__name__}")
        started = [buf._transfer(local, 0, timeout, write) for buf, local, write in self._ops]
        self._ops = []
        first = None
        for f in started:
            try:
                f.get()
            except Exception as e:  # noqa: BLE001 - the first is raised once all ended
                first = first or e
        if first is not None:
            raise first
        return Future._ready(None)


def _rebuild(desc: bytes) -> RDMABuffer:
    return RDMABuffer._from_bytes(desc)


def get_rdma_backend() -> str:
    """The backend a transfer with a proc on this host uses by default:
    "same_host", "tcp" (forced by MONARCH_RDMA_BACKEND=tcp, or when the
    kernel refuses process_vm_*) or "ibverbs" (when this process found an
    active RDMA device; the peer must have one too)."""
    return _backend_name(lib.monarch_rdma_default_backend)


def is_rdma_available() -> bool:
    """Whether RDMA hardware (ibverbs) is usable in this process:
    libibverbs.so.1 loads and a device has an active port. When False,
    buffers still work over the same-host and TCP backends;
    ``ibverbs_status()`` says why."""
    avail = ffi.new("bool *")
    reason = ffi.new("char **")
    check(lib.monarch_rdma_ibverbs_status(avail, reason))
    return bool(avail[0])


def is_ibverbs_available() -> bool:
    """Whether the ibverbs (RDMA hardware) backend can be used here: the
    same as ``is_rdma_available()``."""
    return is_rdma_available()


def ibverbs_status() -> tuple[bool, str]:
    """(available, reason in words) of the ibverbs probe."""
    avail = ffi.new("bool *")
    reason = ffi.new("char **")
    check(lib.monarch_rdma_ibverbs_status(avail, reason))
    return bool(avail[0]), ffi.string(reason[0]).decode()
