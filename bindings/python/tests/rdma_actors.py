"""Actors used by test_rdma.py (importable by the worker procs)."""

import os

import numpy as np

from monarch.actor import Actor, endpoint
from monarch.rdma import RDMABuffer


def pattern(n, seed=0):
    return ((np.arange(n, dtype=np.uint64) * 131 + seed) % 251).astype(np.uint8)


class Owner(Actor):
    def __init__(self, n, seed=0):
        self.mem = pattern(n, seed)
        self.buf = RDMABuffer(self.mem)

    @endpoint
    def buffer(self):
        return self.buf

    @endpoint
    def checksum(self, start=0, stop=None):
        return int(self.mem[start:stop].sum(dtype=np.uint64))

    @endpoint
    def drop(self):
        self.buf.drop()

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def die(self):
        os._exit(7)


class Reader(Actor):
    @endpoint
    def pull(self, buf, backend=None):
        if backend:
            os.environ["MONARCH_RDMA_BACKEND"] = backend
        try:
            dst = np.empty(buf.size(), dtype=np.uint8)
            buf.read_into(dst, timeout=60).get()
            return int(dst.sum(dtype=np.uint64)), buf.backend()
        finally:
            os.environ.pop("MONARCH_RDMA_BACKEND", None)

    @endpoint
    def push(self, buf, value, backend=None):
        if backend:
            os.environ["MONARCH_RDMA_BACKEND"] = backend
        try:
            src = np.full(buf.size(), value, dtype=np.uint8)
            buf.write_from(src, timeout=60).get()
            return buf.backend()
        finally:
            os.environ.pop("MONARCH_RDMA_BACKEND", None)

    @endpoint
    def checksum(self, arr):
        return int(np.asarray(arr).view(np.uint8).sum(dtype=np.uint64)), arr.shape
