"""A Python actor that calls another actor from its own proc: the caller
that test_julia.py kills while a Julia worker computes its answer
(importable by the worker procs)."""

import os

from monarch.actor import Actor, endpoint


class Relay(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def call(self, target, method, *args):
        return getattr(target, method).call_one(*args).get(timeout=120)
