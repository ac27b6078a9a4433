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


from ._src.rdma.rdma import (
    RDMAAction,
    RDMABuffer,
    RDMAReadTransferWarning,
    RDMAWriteTransferWarning,
    get_rdma_backend,
    ibverbs_status,
    is_ibverbs_available,
    is_rdma_available,
)

__all__ = [
    "RDMAAction",
    "RDMABuffer",
    "RDMAReadTransferWarning",
    "RDMAWriteTransferWarning",
    "get_rdma_backend",
    "ibverbs_status",
    "is_ibverbs_available",
    "is_rdma_available",
]
