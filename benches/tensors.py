"""Distributed tensors on 4 local procs: op-issue rate (ops issued and run
per second; also under ``monarch.coalescing()``), small fetch_shard
latency, 64 MiB fetch_shard bandwidth, and
an all-reduce of 64 MiB fp32 (algorithm and bus bandwidth, against a local
memcpy of the same size; and the CPU time the workers spent per reduce,
in memcpy times, which depends less on what else the machine runs).

Run with `make bench` (or `.venv/bin/python benches/tensors.py`;
`--only allreduce` runs the all-reduce row alone, `--reduces N` times N
reduces instead of 5).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from monarch import coalescing, fetch_shard, remote
from monarch.actor import this_host

MiB = 1 << 20
N = 4


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of the processes ``pids`` so far."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["allreduce"], help="run only this row")
    ap.add_argument("--reduces", type=int, default=5, help="timed all-reduces (best one reported)")
    args = ap.parse_args()
    mesh = this_host().spawn_procs(per_host={"gpu": N})
    try:
        if args.only != "allreduce":
            with mesh.activate():
                other_rows()
        allreduce(mesh, args.reduces)
    finally:
        mesh.stop().get(timeout=30)
    return 0


def other_rows() -> None:
    """Op issue, small and 64 MiB fetch_shard (inside mesh.activate())."""
    t = torch.ones(4)
    fetch_shard(t).result(timeout=120)
    # The first op of a process imports torch's meta kernels
    # (seconds); it is timed on its own.
    s = time.perf_counter()
    t = t + 1
    fetch_shard(t).result(timeout=120)
    print(f"first op (imports at the controller and the workers): {(time.perf_counter() - s) * 1e3:.0f} ms")
    # Op-issue rate: issue, then wait for the last one to have run.
    ops = 5000
    start = time.perf_counter()
    for _ in range(ops):
        t = t + 1
    issued = time.perf_counter() - start
    fetch_shard(t).result(timeout=300)
    done = time.perf_counter() - start
    print(f"op issue: {ops / issued:,.0f} ops/s issued, {ops / done:,.0f} ops/s issued and run on {N} procs")
    # The same under monarch.coalescing(): the ops go out as one
    # message at the end of the block instead of one per 512.
    start = time.perf_counter()
    with coalescing():
        for _ in range(ops):
            t = t + 1
        issued = time.perf_counter() - start
    fetch_shard(t).result(timeout=300)
    done = time.perf_counter() - start
    print(
        f"op issue under coalescing(): {ops / issued:,.0f} ops/s issued, "
        f"{ops / done:,.0f} ops/s issued and run on {N} procs"
    )

    lat = []
    for _ in range(200):
        s = time.perf_counter()
        fetch_shard(t, gpu=1).result(timeout=60)
        lat.append(time.perf_counter() - s)
    print(f"small fetch_shard: median {statistics.median(lat) * 1e6:.0f} us")

    big = torch.ones(64 * MiB // 4)
    fetch_shard(big).result(timeout=120)
    times = []
    for _ in range(5):
        s = time.perf_counter()
        fetch_shard(big, gpu=2).result(timeout=120)
        times.append(time.perf_counter() - s)
    print(f"64 MiB fetch_shard: {64 * MiB / min(times) / 1e9:.2f} GB/s")


def allreduce(mesh, reduces: int) -> None:
    """The 64 MiB fp32 all-reduce row, and a local memcpy of the same size."""
    with mesh.activate():
        big = torch.ones(64 * MiB // 4)
        pids = list(remote("os.getpid").call().get(timeout=60).values())
        # Two reduces first: each result stays alive until the next one
        # is made, so the workers' pools need two result buffers, whose
        # first touch (page faults) is not what this row measures.
        for _ in range(2):
            r = big.reduce("gpu", "sum")
            fetch_shard(r.view(-1)[:1], gpu=0).result(timeout=300)
        times = []
        cpu = cpu_seconds(pids)
        for _ in range(reduces):
            s = time.perf_counter()
            r = big.reduce("gpu", "sum")
            fetch_shard(r.view(-1)[:1], gpu=0).result(timeout=300)
            times.append(time.perf_counter() - s)
        cpu = (cpu_seconds(pids) - cpu) / len(times)
    best = min(times)
    alg = 64 * MiB / best / 1e9
    bus = alg * 2 * (N - 1) / N
    a = torch.ones(64 * MiB // 4)
    b = torch.empty_like(a)
    cp = []
    for _ in range(10):
        s = time.perf_counter()
        b.copy_(a)
        cp.append(time.perf_counter() - s)
    mem = 64 * MiB / min(cp) / 1e9
    print(
        f"all-reduce 64 MiB fp32 over {N} procs: {best * 1e3:.1f} ms, algorithm {alg:.2f} GB/s, "
        f"bus {bus:.2f} GB/s; memcpy {mem:.2f} GB/s (bus/memcpy {bus / mem:.2f}); "
        f"workers' CPU {cpu * 1e3:.0f} ms per reduce ({cpu / min(cp):.1f} memcpys)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
