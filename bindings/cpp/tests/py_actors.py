"""Python actors for the C++ test `cpp_test python_actors`: spawned from C++
by the type name "py_actors:Greeter" (a raw spawn, see monarch._server) on
procs running `python -m monarch._bootstrap`, called through raw
endpoints."""

import sys

from monarch.actor import Actor, current_rank, endpoint


class Greeter(Actor):
    def __init__(self, *parts):
        # One bytes argument per spawn part.
        self.greeting = b"".join(parts) or b"hi "
        self.total = 0

    @endpoint(raw=True)
    def greet(self, who):
        return self.greeting + who + f" from rank {current_rank().rank}".encode()

    @endpoint(raw=True)
    def add(self, data):
        # A C++ int64_t is its host-order object bytes.
        self.total += int.from_bytes(data, sys.byteorder, signed=True)
        return self.total.to_bytes(8, sys.byteorder, signed=True)

    @endpoint(raw=True)
    def split(self, data):
        return [bytes([b]) for b in data]

    @endpoint(raw=True)
    def nparts(self, *parts):
        return str(len(parts)).encode()

    @endpoint(raw=True)
    def fail(self, data):
        raise ValueError("python says no to " + data.decode())
