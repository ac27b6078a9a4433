"""A Python actor that calls another actor from its own proc: the caller
that a test kills while its callee computes the answer (test_hardening_worker.py,
test_julia.py; importable by the worker procs, which get this directory on
their path from the controller's)."""

import os

from monarch.actor import Actor, endpoint


class Relay(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def call(self, target, method, *args):
        return getattr(target, method).call_one(*args).get(timeout=120)
