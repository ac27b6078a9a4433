"""Mesh workloads with the Python API on real procs (one actor per proc):
broadcast+gather latency for N = 1, 2, 4, 8, and stream() latency (first
reply, all replies) for N = 8. The in-process (Rust, up to 4,096 ranks)
counterpart is `cargo run --release -p monarch-core --example local_cast`.

Run with `make bench` (or `.venv/bin/python benches/meshes.py`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from _table import pct, print_table
from monarch.actor import Actor, endpoint, this_host


class Bench(Actor):
    @endpoint
    def ping(self):
        return None


def us(x):
    return f"{x * 1e6:.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--iters", type=int, default=2000)
    args = ap.parse_args()
    procs = this_host().spawn_procs(per_host={"gpus": 8})
    actors = procs.spawn("bench", Bench)
    actors.ping.call().get()
    rows = []
    for n in (1, 2, 4, 8):
        mesh = actors.slice(gpus=slice(0, n))
        for _ in range(100):
            mesh.ping.call().get()
        g = []
        for _ in range(args.iters):
            t = time.perf_counter()
            mesh.ping.call().get()
            g.append(time.perf_counter() - t)
        target = "<= 250 us" if n == 8 else ""
        rows.append((f"broadcast+gather to {n} (median / p99)", f"{us(statistics.median(g))} / {us(pct(g, 0.99))} us", target))
    first, total = [], []
    for _ in range(100):
        for f in actors.ping.stream():
            f.get()
    for _ in range(args.iters):
        t = time.perf_counter()
        futs = list(actors.ping.stream())
        futs[0].get()
        first.append(time.perf_counter() - t)
        for f in futs[1:]:
            f.get()
        total.append(time.perf_counter() - t)
    rows.append(("stream() to 8: first reply (median / p99)", f"{us(statistics.median(first))} / {us(pct(first, 0.99))} us", ""))
    rows.append(("stream() to 8: all replies (median / p99)", f"{us(statistics.median(total))} / {us(pct(total, 0.99))} us", ""))
    procs.stop().get()
    print_table(("workload", "measured", "target"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
