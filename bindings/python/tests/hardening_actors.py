"""Actor classes of test_hardening_worker.py (importable by the worker
procs)."""

import os
import time

from monarch.actor import Actor, Port, endpoint


class Slow(Actor):
    """Answers after a while: the callee of a caller that dies meanwhile."""

    def __init__(self):
        self.answered = 0

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def sleep(self, started, seconds):
        """Touch the file ``started``, then sleep and answer."""
        open(started, "w").close()
        time.sleep(seconds)
        self.answered += 1
        return "slept"

    @endpoint(explicit_response_port=True)
    def sleep_then_answer(self, port: Port, started, seconds):
        """``sleep``, answering through the reply port."""
        open(started, "w").close()
        time.sleep(seconds)
        self.answered += 1
        port.send("slept")

    @endpoint
    def wait_for(self, gate, seconds):
        """Wait until the file ``gate`` exists (at most ``seconds``)."""
        deadline = time.monotonic() + seconds
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        return os.path.exists(gate)

    @endpoint
    def ping(self):
        return "pong"

    @endpoint
    def count(self):
        return self.answered
