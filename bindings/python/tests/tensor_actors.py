"""Actors and remote functions used by the distributed tensor tests (importable on the workers)."""

import os

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
