"""Actors for benches/supervision.py (importable in worker procs)."""

import os
import time

from monarch.actor import Actor, endpoint


class Sleeper(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def sleep(self, s):
        time.sleep(s)
