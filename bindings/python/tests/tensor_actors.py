"""Actors and remote functions used by the distributed tensor tests (importable on the workers)."""

import os
import time

import torch

from monarch import remote
from monarch.actor import Actor, endpoint


class ShardReader(Actor):
    @endpoint
    def total(self, t):
        assert type(t) is torch.Tensor, type(t)
        return float(t.sum())

    @endpoint(propagate=lambda t: t.new_empty(t.shape))
    def doubled(self, t):
        return t * 2

    @endpoint
    def pid(self):
        return os.getpid()


@remote(propagate=lambda t: t)
def plus_one(t):
    return t + 1


@remote
def local_sum(t):
    return float(t.sum())


@remote(propagate=lambda t, gpu: t)
def stalled_on(t, gpu):
    """``t`` again; the proc at ``gpu`` stalls first (until it is killed)."""
    from monarch._src.tensor.worker import current_worker

    if current_worker().coords["gpu"] == gpu:
        time.sleep(600)
    return t.clone()


@remote(propagate=lambda t, gpu: t)
def failing_on(t, gpu):
    """``t`` again; raises on the proc at ``gpu``."""
    from monarch._src.tensor.worker import current_worker

    if current_worker().coords["gpu"] == gpu:
        raise ValueError(f"failed on gpu {gpu} on purpose")
    return t.clone()


@remote
def reduce_paths():
    """How many large reduces of this proc read a same-host peer straight,
    and how many ran on the data plane only."""
    from monarch._src.tensor import collective

    return dict(collective.PATHS)


@remote
def set_rdma_backend(name):
    """Force the data plane's backend in this proc (None: the default)."""
    if name is None:
        os.environ.pop("MONARCH_RDMA_BACKEND", None)
    else:
        os.environ["MONARCH_RDMA_BACKEND"] = name
