"""Data-plane benchmarks (monarch.rdma), printed as one table.

Run with `make bench` (after benches/run.py) or `.venv/bin/python
benches/rdma.py [--quick]`. Every row has the floor measured in the same run:

- same-host read_into of 64 MiB and 1 GiB from an actor's buffer in another
  proc, vs a plain memcpy (numpy.copyto) of the same size in this process;
- the same over the TCP backend, vs a raw loopback TCP socket copy of the
  same size between two processes;
- a 64 MiB numpy argument of a call (data plane under pickle), vs the same
  call with the data plane off (bytes through the control socket);
- control-message ping latency (median, and 90th percentile) while 1 GiB
  transfers run back to back, vs idle (target: within 2x), and vs the ping
  while a plain busy-loop process (not ours, nice 10 like the copiers) holds
  one CPU: on a machine with few CPUs, what any CPU-bound neighbour costs.

Destinations are allocated and touched before timing (as for memcpy). The
machine is shared: each figure is the best and the median of several runs.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import sys
import threading
import time

import numpy as np
from _table import print_table
from monarch._src.actor import pickle as message_pickle
from monarch.actor import Actor, endpoint, this_host
from monarch.rdma import RDMABuffer

MiB = 1 << 20
GiB = 1 << 30


class Holder(Actor):
    def __init__(self):
        self.bufs = {}

    @endpoint
    def make(self, n):
        mem = np.ones(n, dtype=np.uint8)
        self.bufs[n] = (mem, RDMABuffer(mem))
        return self.bufs[n][1]

    @endpoint
    def ping(self):
        return None

    @endpoint
    def nbytes(self, arr):
        return arr.nbytes


def timed(fn, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return ts


def rate(n, ts):
    """'best / median GB/s'"""
    return f"{n / min(ts) / 1e9:.2f} / {n / statistics.median(ts) / 1e9:.2f} GB/s"


def _sink(port, n, reps):
    s = socket.create_connection(("127.0.0.1", port))
    buf = bytearray(n)
    mv = memoryview(buf)
    for _ in range(reps):
        got = 0
        while got < n:
            got += s.recv_into(mv[got:], n - got)
        s.sendall(b"k")
    s.close()


def raw_tcp(n, reps):
    """Loopback TCP: this process sends n bytes, a child receives them."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    p = mp.get_context("fork").Process(target=_sink, args=(ls.getsockname()[1], n, reps))
    p.start()
    c, _ = ls.accept()
    data = np.ones(n, dtype=np.uint8)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        c.sendall(memoryview(data))
        c.recv(1)
        ts.append(time.perf_counter() - t)
    p.join()
    c.close()
    ls.close()
    return ts


def ping_median(actor, seconds):
    lat = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        actor.ping.call_one().get()
        lat.append(time.perf_counter() - t)
    lat.sort()
    return statistics.median(lat), lat[int(len(lat) * 0.9)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--ping-only", action="store_true", help="only the ping-under-transfer rows")
    args = ap.parse_args()
    reps_small, reps_big = (3, 2) if args.quick else (8, 3)
    rows = []

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    holder = procs.slice(gpus=0).spawn("holder", Holder)
    other = procs.slice(gpus=1).spawn("other", Holder)

    sizes = () if args.ping_only else ((64 * MiB, reps_small, "64 MiB"), (GiB, reps_big, "1 GiB"))
    for n, reps, label in sizes:
        src = np.ones(n, dtype=np.uint8)
        dst = np.zeros(n, dtype=np.uint8)
        memcpy = timed(lambda s=src, d=dst: np.copyto(d, s), reps)
        del src
        buf = holder.make.call_one(n).get(timeout=120)
        for backend in ("same_host", "tcp"):
            os.environ["MONARCH_RDMA_BACKEND"] = backend
            h = holder.make.call_one(n).get(timeout=120) if backend == "tcp" else buf
            h.read_into(dst, timeout=300).get()  # warm (connections, pages)
            ts = timed(lambda h=h, d=dst: h.read_into(d, timeout=300).get(), reps)
            assert dst[0] == 1 and dst[-1] == 1
            if backend == "same_host":
                floor = f"memcpy {rate(n, memcpy)}"
                target = ">= 4 GB/s"
            else:
                floor = f"raw loopback TCP {rate(n, raw_tcp(n, reps))}"
                target = ""
            rows.append((f"read_into {label} ({h.backend()}, best / median)", rate(n, ts), target, floor))
        os.environ.pop("MONARCH_RDMA_BACKEND", None)
        del dst

    # A 64 MiB numpy argument: data plane vs control socket.
    if not args.ping_only:
        rows.append(numpy_argument(other, reps_small))

    # Control ping while 1 GiB transfers run back to back.
    secs = 1.0 if args.quick else 2.0
    rows.extend(ping_rows(holder, other, secs))
    procs.stop().get(timeout=60)

    print_table(("data plane", "measured", "target", "floor (same run)"), rows)
    return 0


def numpy_argument(one, reps_small):
    arr = np.ones(64 * MiB, dtype=np.uint8)
    one.nbytes.call_one(arr).get(timeout=120)
    on = timed(lambda: one.nbytes.call_one(arr).get(timeout=120), reps_small)
    saved = message_pickle._THRESHOLD
    message_pickle._THRESHOLD = 0
    one.nbytes.call_one(arr).get(timeout=120)
    off = timed(lambda: one.nbytes.call_one(arr).get(timeout=120), reps_small)
    message_pickle._THRESHOLD = saved

    return ("64 MiB numpy argument (best / median)", rate(64 * MiB, on), ">= 4 GB/s",
            f"via control socket {rate(64 * MiB, off)}")


def _spin():
    os.nice(10)  # the copier threads' default nice value
    while True:
        pass


def ping_during_spinner(other, secs):
    """Ping while a process that is not ours keeps one CPU busy (a plain
    busy loop): what any CPU-bound neighbour, such as a CPU copy, costs the
    ping on this machine."""
    p = mp.get_context("fork").Process(target=_spin, daemon=True)
    p.start()
    time.sleep(0.2)
    try:
        return ping_median(other, secs)
    finally:
        p.kill()
        p.join()


def ping_rows(holder, other, secs):
    rows = []
    idle, idle90 = ping_median(other, secs)
    spin, _ = ping_during_spinner(other, secs)
    for backend in ("same_host", "tcp"):
        os.environ["MONARCH_RDMA_BACKEND"] = backend
        big = holder.make.call_one(GiB).get(timeout=120)
        dst = np.zeros(GiB, dtype=np.uint8)
        big.read_into(dst, timeout=300).get()
        stop = threading.Event()
        moved = [0]

        def pump(big=big, dst=dst, stop=stop, moved=moved):
            while not stop.is_set():
                big.read_into(dst, timeout=300).get()
                moved[0] += 1

        th = threading.Thread(target=pump)
        th.start()
        time.sleep(0.2)
        busy, busy90 = ping_median(other, secs)
        stop.set()
        th.join()
        os.environ.pop("MONARCH_RDMA_BACKEND", None)
        rows.append((f"ping during 1 GiB {backend} transfers (median)",
                     f"{busy * 1e6:.0f} us ({busy / idle:.1f}x idle; p90 {busy90 * 1e6:.0f} us;"
                     f" {moved[0]} GiB moved)",
                     "<= 2x idle",
                     f"idle {idle * 1e6:.0f} us (p90 {idle90 * 1e6:.0f} us); busy-loop process"
                     f" {spin * 1e6:.0f} us ({spin / idle:.1f}x)"))
        del dst
    return rows


if __name__ == "__main__":
    sys.exit(main())
