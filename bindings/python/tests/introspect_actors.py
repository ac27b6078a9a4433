"""Actors for test_introspect.py (importable by the worker procs)."""

import threading

from monarch.actor import Actor, endpoint


class Probe(Actor):
    def __init__(self):
        self.release = threading.Event()

    @endpoint
    def ping(self):
        return "pong"

    @endpoint
    def boom(self):
        raise ValueError("probe exploded")

    @endpoint
    def hold(self, seconds: float, started: str = ""):
        # Blocks until `seconds` pass: a handler the snapshot sees running.
        # Creates the file `started` (when given) once it runs.
        if started:
            open(started, "w").close()
        self.release.wait(seconds)
        return "held"
