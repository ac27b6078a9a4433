"""``monarch.rdma``: registered memory buffers that other actors read and
write one-sided, like upstream Monarch's ``RDMABuffer``.

    class ParameterServer(Actor):
        def __init__(self):
            self.w = numpy.zeros(1 << 20, dtype=numpy.float32)
            self.buf = RDMABuffer(self.w.view(numpy.uint8))   # keep it alive

        @endpoint
        def weights(self):
            return self.buf                                    # picklable

    # in another actor (or the controller):
    buf = server.weights.call_one().get()
    local = numpy.empty(buf.size(), dtype=numpy.uint8)
    buf.read_into(local).get()        # one-sided: the server's actor is not involved

Bytes move on the data plane (see docs/data-plane.md): between procs of one
host with ``process_vm_readv``/``process_vm_writev`` (no socket in the
path), else over dedicated TCP data connections; RDMA READ/WRITE through
libibverbs when both sides have an active RDMA device (never exercised on
RDMA hardware: see the docs). ``MONARCH_RDMA_BACKEND=same_host|tcp|ibverbs|auto`` forces
a backend; ``get_rdma_backend()`` says which one is used by default.

Lifetime: the buffer is registered as long as the ``RDMABuffer`` made from
the data lives in its owner (or until ``drop()``); the owner must keep it
(and so the memory) alive while others use it. A handle received in a
message is a reference: reading after the owner dropped the buffer or died
raises.
"""

from __future__ import annotations

import threading
import time

from ._lib import check, error_for, ffi, lib, runtime
from .actor import Future

__all__ = ["RDMABuffer", "get_rdma_backend", "is_rdma_available"]

_READ_ONLY = lib.MONARCH_RDMA_READ_ONLY
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

    def get(self, timeout: float | None = None):
        if timeout is None:
            timeout = self._timeout
        return super().get(timeout)

    result = get


def _transfer_future(fut, keep):
    """Own a transfer's future: the local memory (``keep``) stays alive
    until the future is freed, and freeing it first waits for the transfer
    to end (it writes into that memory until then; transfers always end,
    their I/O is bounded by timeouts)."""

    def free(f, _keep=keep):
        lib.monarch_future_wait(f, -1)
        lib.monarch_future_free(f)

    return ffi.gc(fut, free)


def _convert_none(vm, ctx):
    lib.monarch_value_mesh_free(vm)
    return None


class RDMABuffer:
    """A registered buffer (in its owner) or a handle on one (elsewhere)."""

    __slots__ = ("_h", "_size", "_keep", "_owner", "_dropped", "__weakref__")

    def __init__(self, data):
        mv = _byte_view(data, "RDMABuffer")
        ptr = ffi.from_buffer("uint8_t[]", mv, require_writable=False)
        out = ffi.new("monarch_rdma_buffer **")
        flags = _READ_ONLY if mv.readonly else 0
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

    def _transfer(self, local, offset, timeout, write):
        self._check()
        what = "write_from" if write else "read_into"
        mv = _byte_view(local, f"{what}()")
        if write:
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
        f = _TransferFuture(_transfer_future(out[0], (local, mv, ptr, self)), _convert_none, None)
        f._timeout = timeout
        return f

    def read_into(self, dst, offset: int = 0, *, timeout: float | None = _DEFAULT_TIMEOUT) -> Future:
        """Copy the buffer's bytes (from ``offset``) into the start of
        ``dst`` (a writable memoryview, numpy array or CPU tensor; bytes
        past the buffer's size are left untouched). A ``dst`` smaller than
        the bytes to copy is refused. Returns a Future (``.get()`` waits up
        to ``timeout`` seconds; None: no limit); ``dst`` must not be
        touched until it completes."""
        return self._transfer(dst, offset, timeout, False)

    def write_from(self, src, offset: int = 0, *, timeout: float | None = _DEFAULT_TIMEOUT) -> Future:
        """Copy all of ``src`` into the buffer at ``offset`` (it must fit).
        Returns a Future like ``read_into``."""
        return self._transfer(src, offset, timeout, True)

    def drop(self) -> None:
        """Release the buffer: in its owner, unregister it (waiting for
        transfers in progress); elsewhere, ask the owner to release it.
        Any later use of this object raises."""
        self._check()
        self._dropped = True
        check(lib.monarch_rdma_buffer_drop(self._h), "RDMABuffer.drop")

    def __repr__(self):
        state = "dropped" if self._dropped else ("owner" if self._owner else "handle")
        return f"<RDMABuffer {self._size} bytes ({state})>"


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


def ibverbs_status() -> tuple[bool, str]:
    """(available, reason in words) of the ibverbs probe."""
    avail = ffi.new("bool *")
    reason = ffi.new("char **")
    check(lib.monarch_rdma_ibverbs_status(avail, reason))
    return bool(avail[0]), ffi.string(reason[0]).decode()


# ---------------------------------------------------------------------------
# The data plane under pickled payloads (used by monarch._serial)

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


def _register_payload(mv: memoryview, readers: int) -> bytes:
    """Register an out-of-band pickle buffer for ``readers`` receivers;
    kept alive until they have all pulled it. Returns its descriptor."""
    _sweep()
    ptr = ffi.from_buffer("uint8_t[]", mv, require_writable=False)
    out = ffi.new("monarch_rdma_buffer **")
    check(
        lib.monarch_rdma_register(runtime(), ptr, mv.nbytes, _READ_ONLY, max(1, readers), out),
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
        import ctypes

        f = ctypes.pythonapi.PyBytes_FromStringAndSize
        f.restype = ctypes.py_object
        f.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
        _new_bytes = f
    return _new_bytes(None, n)


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
        import numpy
    except ImportError:
        return bytearray(n)
    return numpy.empty(n, dtype=numpy.uint8)


def _pull_payloads(descs, as_bytes=None) -> list:
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
            started.append((h, dst, ptr, _transfer_future(fut[0], (dst, ptr))))
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
