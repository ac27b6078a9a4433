"""A parameter server on the data plane (monarch.rdma).

The server actor keeps the weights and one gradient slot per worker, and
exposes each as an RDMABuffer. Each step, every worker pulls the current
weights with `read_into`, computes a gradient, and pushes it into its slot
with `write_from` (one-sided: the server's actor code is not involved in
either copy); then the controller asks the server to apply the gradients.
The control messages stay tiny; the weight and gradient bytes move between
the procs' memories directly (same host: process_vm_readv/writev; set
MONARCH_RDMA_BACKEND=tcp to move them over TCP data connections instead).

The example checks the numbers: worker w's gradient for step s is
(w + 1) * (weights + s) * 1e-3, so the weights after each step are known in
closed form and compared exactly (float64, same operations in the same
order).

Run: .venv/bin/python examples/python/parameter_server.py
"""

import numpy as np
from monarch.actor import Actor, current_rank, endpoint, this_host
from monarch.rdma import RDMABuffer, get_rdma_backend

N = 1 << 20  # weights (float64): 8 MiB
WORKERS = 2
STEPS = 4
LR = 0.5


def initial_weights():
    return np.linspace(-1.0, 1.0, N)


def gradient(weights, worker, step):
    return (worker + 1) * (weights + step) * 1e-3


class ParameterServer(Actor):
    def __init__(self, workers):
        self.weights = initial_weights()
        self.grads = np.zeros((workers, N))
        # The buffers stay registered as long as this actor keeps them.
        self.w_buf = RDMABuffer(self.weights.view(np.uint8))
        self.g_bufs = [RDMABuffer(self.grads[i].view(np.uint8)) for i in range(workers)]

    @endpoint
    def buffers(self):
        return self.w_buf, self.g_bufs

    @endpoint
    def apply(self):
        # In place: the registered memory is the weights array itself.
        self.weights -= LR * self.grads.mean(axis=0)
        return float(self.weights[0]), float(self.weights[-1])

    @endpoint
    def checksum(self):
        return float(self.weights.sum())


class Worker(Actor):
    def __init__(self, w_buf, g_bufs):
        self.w_buf = w_buf
        self.g_buf = g_bufs[current_rank().rank]
        self.local = np.empty(N)

    @endpoint
    def step(self, step):
        self.w_buf.read_into(self.local.view(np.uint8), timeout=60).get()
        g = gradient(self.local, current_rank().rank, step)
        self.g_buf.write_from(g.view(np.uint8), timeout=60).get()
        return self.w_buf.backend()


def main():
    procs = this_host().spawn_procs(per_host={"gpus": WORKERS + 1})
    server = procs.slice(gpus=0).spawn("ps", ParameterServer, WORKERS)
    w_buf, g_bufs = server.buffers.call_one().get()
    workers = procs.slice(gpus=slice(1, WORKERS + 1)).spawn("workers", Worker, w_buf, g_bufs)

    expect = initial_weights()
    for step in range(STEPS):
        backends = set(workers.step.call(step).get(timeout=120).values())
        first, last = server.apply.call_one().get()
        grads = [gradient(expect, w, step) for w in range(WORKERS)]
        expect = expect - LR * np.stack(grads).mean(axis=0)
        assert (first, last) == (float(expect[0]), float(expect[-1])), (step, first, expect[0])
        print(f"step {step}: w[0]={first:+.6f} w[-1]={last:+.6f} via {sorted(backends)}")

    # The controller can read the weights directly too.
    final = np.empty(N)
    w_buf.read_into(final.view(np.uint8), timeout=60).get()
    assert np.array_equal(final, expect), "weights differ from the closed form"
    assert server.checksum.call_one().get() == float(expect.sum())
    print(f"ok: {STEPS} steps, {WORKERS} workers, {N * 8 >> 20} MiB of weights, "
          f"default backend {get_rdma_backend()}")
    procs.stop().get(timeout=30)


if __name__ == "__main__":
    main()
