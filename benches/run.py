"""The standard workloads, measured with the Python API; prints one table.

Run with `make bench` (or `.venv/bin/python benches/run.py`). Each row names
the workload, what we measured, the target from docs/performance.md, and the floor
measured in the same run where one applies: a bare multiprocessing.Pipe
between two Python processes, and for broadcast+gather the same round over
bare pipes to as many child processes. The CPU rows add up the user and
system CPU time of the controller and its procs over the gathers: divided by
the CPU count, that is the least a round can take on this machine. The C++ rows come from the C++ ping benchmark
(benches/cpp_ping.cpp, built by `make cpp`) when its binary exists, the Julia rows from benches/julia_ping.jl
when `julia` is on PATH (`make julia`).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from _table import pct, print_table
from monarch.actor import Actor, endpoint, this_host


class Bench(Actor):
    @endpoint
    def ping(self):
        return None

    @endpoint
    def nbytes(self, data):
        return len(data)


class AsyncBench(Actor):
    @endpoint
    async def ping(self):
        return None


def pipelined(mesh, n: int) -> float:
    """Calls per second with `n` calls in flight, waited with get()."""
    for _ in range(200):
        mesh.ping.call_one().get()
    t = time.perf_counter()
    futs = [mesh.ping.call_one() for _ in range(n)]
    for f in futs:
        f.get()
    return n / (time.perf_counter() - t)


async def pipelined_awaited(mesh, n: int) -> float:
    """Calls per second with `n` calls in flight, awaited in asyncio."""
    for _ in range(200):
        await mesh.ping.call_one()
    t = time.perf_counter()
    futs = [mesh.ping.call_one() for _ in range(n)]
    for f in futs:
        await f
    return n / (time.perf_counter() - t)


def _pipe_echo_until_empty(conn):
    # Forked children share each other's pipe ends, so end-of-file never
    # comes: an empty message says stop.
    while msg := conn.recv_bytes():
        conn.send_bytes(msg)


def pipe_floor(n_ping: int, n_tput: int):
    """Round trip and pipelined throughput over a bare Pipe, as the floor."""
    parent, child = mp.Pipe()
    p = mp.get_context("fork").Process(target=_pipe_echo_until_empty, args=(child,))
    p.start()
    msg = b"x" * 16
    lat = []
    for _ in range(n_ping):
        t = time.perf_counter()
        parent.send_bytes(msg)
        parent.recv_bytes()
        lat.append(time.perf_counter() - t)
    t = time.perf_counter()
    # Pipelined: keep a window of messages in flight.
    window = 64
    sent = got = 0
    while got < n_tput:
        while sent < n_tput and sent - got < window:
            parent.send_bytes(msg)
            sent += 1
        parent.recv_bytes()
        got += 1
    tput = n_tput / (time.perf_counter() - t)
    parent.send_bytes(b"")
    p.join()
    return lat, tput


def pipe_gather_floor(n: int, rounds: int) -> list[float]:
    """Broadcast+gather over bare Pipes to n child processes: the parent
    writes one small message to each, then reads each answer. The OS cost
    of waking n processes and hearing back, with no runtime at all."""
    ctx = mp.get_context("fork")
    ends, kids = [], []
    for _ in range(n):
        parent, child = mp.Pipe()
        p = ctx.Process(target=_pipe_echo_until_empty, args=(child,))
        p.start()
        child.close()
        ends.append(parent)
        kids.append(p)
    msg = b"x" * 16
    lat = []
    for i in range(rounds + 100):
        t = time.perf_counter()
        for c in ends:
            c.send_bytes(msg)
        for c in ends:
            c.recv_bytes()
        if i >= 100:
            lat.append(time.perf_counter() - t)
    for c in ends:
        c.send_bytes(b"")
    for p in kids:
        p.join()
    for c in ends:
        c.close()
    return lat


def python_start_floor(runs: int = 5) -> float:
    """One bare Python start (``python -c pass``), the median of `runs`."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process `pid` so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_of(pid: int) -> list[int]:
    """The child processes of `pid`, whichever of its threads forked them."""
    out = []
    for path in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{path}/children") as f:
            out += [int(p) for p in f.read().split()]
    return out


def _children() -> list[int]:
    """Our descendant processes: the procs (children of the zygote, which
    is one of ours and idle while they run) and any exec'd ones."""
    out = []
    todo = _children_of(os.getpid())
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            todo += _children_of(pid)
        except OSError:
            pass
    return out


def cpp_rows(binary: str) -> list[tuple[str, str, str, str]]:
    """Run the C++ ping benchmark and turn its two result lines into rows."""
    if not os.access(binary, os.X_OK):
        return [("C++ ping / pipelined", f"skipped ({binary} missing: make cpp)", "", "")]
    out = subprocess.run([binary], capture_output=True, text=True, timeout=600, check=True).stdout
    rt = re.search(r"median ([\d.]+) us, p99 ([\d.]+) us", out)
    tp = re.search(r"pipelined calls: (\d+) msgs/s", out)
    if not rt or not tp:
        raise RuntimeError(f"unexpected output from {binary}:\n{out}")
    return [
        ("C++ ping round trip (median / p99)", f"{float(rt[1]):.1f} / {float(rt[2]):.1f} us", "<= 15 us", ""),
        ("C++ pipelined calls (window 256)", f"{int(tp[1]):,} /s", ">= 300,000 /s", ""),
    ]


def julia_rows(julia: str | None) -> list[tuple[str, str, str, str]]:
    """Run the Julia ping benchmark (a Julia controller and a Julia actor)."""
    if julia is None:
        return [("Julia ping / pipelined", "skipped (no julia on PATH: make julia)", "", "")]
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "julia_ping.jl")
    out = subprocess.run(
        [julia, "--startup-file=no", script], capture_output=True, text=True, timeout=600, check=True
    ).stdout
    rt = re.search(r"median ([\d.]+) us, p99 ([\d.]+) us", out)
    tp = re.search(r"pipelined calls: (\d+) msgs/s", out)
    if not rt or not tp:
        raise RuntimeError(f"unexpected output from {script}:\n{out}")
    return [
        ("Julia ping round trip (median / p99)", f"{float(rt[1]):.1f} / {float(rt[2]):.1f} us", "<= 40 us", ""),
        ("Julia pipelined calls (window 256)", f"{int(tp[1]):,} /s", ">= 50,000 /s", ""),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pings", type=int, default=5000)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--gathers", type=int, default=2000)
    ap.add_argument(
        "--cpp-ping",
        default=os.path.join(os.path.dirname(__file__), "..", "build", "cpp", "examples", "cpp_ping"),
        help="the C++ ping benchmark binary (built by make cpp)",
    )
    args = ap.parse_args()
    rows = []

    # Spawn 4 procs and get a first reply from every one of them: first
    # with the template starting in the same breath (this_host() starts it),
    # then from the warm template, against one bare Python start.
    bare = python_start_floor()
    t = time.perf_counter()
    cold = this_host().spawn_procs(per_host={"gpus": 4})
    cold.spawn("bench", Bench).ping.call().get()
    cold_s = time.perf_counter() - t
    cold.stop().get()
    spawns = []
    for _ in range(3):
        t = time.perf_counter()
        procs = this_host().spawn_procs(per_host={"gpus": 4})
        actors = procs.spawn("bench", Bench)
        actors.ping.call().get()
        spawns.append(time.perf_counter() - t)
        if len(spawns) < 3:
            procs.stop().get()
    spawn_s = statistics.median(spawns)
    rows.append((
        "spawn 4 procs -> first reply (median of 3)",
        f"{spawn_s:.3f} s ({spawn_s / bare:.1f}x bare)",
        "<= 0.12 s, <= 2.5x bare",
        f"bare python {bare:.3f} s",
    ))
    rows.append(("  the same, template started with it", f"{cold_s:.3f} s", "", ""))
    t = time.perf_counter()
    procs64 = this_host().spawn_procs(per_host={"gpus": 64})
    procs64.spawn("bench64", Bench).ping.call().get(timeout=120)
    spawn64_s = time.perf_counter() - t
    procs64.stop().get()
    rows.append(("spawn 64 procs -> first reply", f"{spawn64_s:.3f} s", "<= 1 s", f"bare python {bare:.3f} s"))

    one = actors.slice(gpus=0)
    for _ in range(200):
        one.ping.call_one().get()
    lat = []
    for _ in range(args.pings):
        t = time.perf_counter()
        one.ping.call_one().get()
        lat.append(time.perf_counter() - t)
    floor_lat, floor_tput = pipe_floor(args.pings, args.calls)
    rows.append((
        "ping round trip (median / p99)",
        f"{statistics.median(lat) * 1e6:.0f} / {pct(lat, 0.99) * 1e6:.0f} us",
        "<= 50 us",
        f"pipe {statistics.median(floor_lat) * 1e6:.0f} / {pct(floor_lat, 0.99) * 1e6:.0f} us",
    ))

    t = time.perf_counter()
    futs = [one.ping.call_one() for _ in range(args.calls)]
    for f in futs:
        f.get()
    tput = args.calls / (time.perf_counter() - t)
    rows.append((
        f"pipelined calls ({args.calls})",
        f"{tput:,.0f} /s",
        ">= 50,000 /s",
        f"pipe {floor_tput:,.0f} /s",
    ))

    procs8 = this_host().spawn_procs(per_host={"gpus": 8})
    actors8 = procs8.spawn("bench8", Bench)
    actors8.ping.call().get()
    for n, mesh in ((4, actors), (8, actors8)):
        for _ in range(100):
            mesh.ping.call().get()
        pids = [os.getpid()] + _children()
        cpu0 = [_cpu_seconds(p) for p in pids]
        g = []
        for _ in range(args.gathers):
            t = time.perf_counter()
            mesh.ping.call().get()
            g.append(time.perf_counter() - t)
        cpu = [(_cpu_seconds(p) - c) / args.gathers * 1e6 for p, c in zip(pids, cpu0)]
        floor = pipe_gather_floor(n, args.gathers)
        rows.append((
            f"broadcast+gather to {n} (median / p99)",
            f"{statistics.median(g) * 1e6:.0f} / {pct(g, 0.99) * 1e6:.0f} us",
            "<= 250 us" if n == 8 else "",
            f"pipes {statistics.median(floor) * 1e6:.0f} / {pct(floor, 0.99) * 1e6:.0f} us",
        ))
        rows.append((
            f"  CPU per round, {n} procs",
            f"{sum(cpu):.0f} us (controller {cpu[0]:.0f}, procs {sum(cpu[1:]):.0f})",
            "",
            f"/ {os.cpu_count()} CPUs = {sum(cpu) / os.cpu_count():.0f} us",
        ))
    procs8.stop().get()

    # One 64 MiB payload, as bytes and as a numpy array, against a memcpy
    # of the same size into touched memory in this process.
    import numpy as np

    src = np.ones(64 << 20, dtype=np.uint8)
    dst = np.empty_like(src)
    dst.fill(0)
    copy = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(dst, src)
        copy = min(copy, time.perf_counter() - t)
    memcpy_rate = src.nbytes / copy / 1e9
    for name, payload in (("bytes", bytes(64 << 20)), ("numpy", src)):
        one.nbytes.call_one(payload).get()
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            n = one.nbytes.call_one(payload).get()
            best = min(best, time.perf_counter() - t)
        assert n == len(payload)
        rate = len(payload) / best / 1e9
        rows.append((
            f"one 64 MiB payload ({name})",
            f"{rate:.2f} GB/s ({rate / memcpy_rate:.2f}x memcpy)",
            ">= 0.5x memcpy",
            f"memcpy {memcpy_rate:.2f} GB/s",
        ))

    # Async endpoints and awaited calls, each against the sync rate measured
    # just before it (other load on the machine moves both alike). The
    # async actor is, like the sync one, the first actor of its proc: a
    # second actor's events cross from the proc's leading thread to its own.
    async_procs = this_host().spawn_procs(per_host={"gpus": 1})
    async_one = async_procs.spawn("bench_async", AsyncBench)
    for name, mesh, awaited in (
        ("async endpoint, pipelined calls", async_one, False),
        ("awaited calls (asyncio caller)", one, True),
        ("async endpoint, awaited calls", async_one, True),
    ):
        sync_rate = pipelined(one, args.calls)
        rate = asyncio.run(pipelined_awaited(mesh, args.calls)) if awaited else pipelined(mesh, args.calls)
        rows.append((name, f"{rate:,.0f} /s ({rate / sync_rate:.2f}x sync)", ">= 0.8x sync", f"sync {sync_rate:,.0f} /s"))
    async_procs.stop().get()
    procs.stop().get()
    rows.extend(cpp_rows(args.cpp_ping))
    rows.extend(julia_rows(shutil.which("julia")))

    print_table(("workload", "measured", "target", "floor (same run)"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
