"""Cast+gather vs N with Rust-native actors: how the controller's own work
grows with the mesh size.

Default: in-process procs (`core/src/local.rs`, the `local_cast` example),
N = 16, 64, 256, 1024, 4096, fan-out 16, 2 worker threads. For each N:
cast+gather latency, the sender's CPU time to issue one cast, the CPU time
to take in its replies at the sender, reply batches and sends per cast, and
each cost as a multiple of N = 16's next to N/16 and the tree depth (what
linear and logarithmic growth would give). CPU times are thread CPU time,
so other load on the machine inflates them much less than latency.

    .venv/bin/python benches/native_cast.py            # table (about 1 min)
    .venv/bin/python benches/native_cast.py --quick    # N = 16, 256, 4096
    .venv/bin/python benches/native_cast.py --callgrind
        # instructions per cast (valgrind; independent of load): issue =
        # LocalCluster::cast, gather = Collector::add_at_sender

Real `monarch worker` procs over sockets (the multicast tree against a flat
cast; the fan-out is read once per process):

    MONARCH_CAST_FANOUT=16  .venv/bin/python benches/native_cast.py --real 256
    MONARCH_CAST_FANOUT=256 .venv/bin/python benches/native_cast.py --real 256
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "target" / "release" / "examples" / "local_cast"
SIZES = (16, 64, 256, 1024, 4096)


def build() -> None:
    subprocess.run(
        [os.environ.get("CARGO", "cargo"), "build", "--release", "-q", "-p", "monarch-core", "--example", "local_cast"],
        cwd=ROOT,
        check=True,
    )


def depth(n: int, k: int = 16) -> int:
    """Levels of the K-ary tree holding n procs below the sender."""
    levels, cap, width = 0, 0, 1
    while cap < n:
        width *= k
        cap += width
        levels += 1
    return levels


def in_process(quick: bool) -> int:
    build()
    args = [str(EXAMPLE), "--json"] + (["--quick"] if quick else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    cast = [r for r in rows if "n" in r]
    base = cast[0]
    print("in-process procs, fan-out 16, 2 worker threads; times in us (CPU: thread time per cast)")
    hdr = (
        f"{'N':>5} {'depth':>5} {'N/16':>5} | {'median':>7} {'p90':>7} {'x16':>5} | "
        f"{'issue cpu':>9} {'x16':>5} | {'gather cpu':>10} {'x16':>5} | {'batches':>7} {'sends':>5}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in cast:
        print(
            f"{r['n']:>5} {depth(r['n']):>5} {r['n'] // base['n']:>5} | "
            f"{r['median_us']:>7.0f} {r['p90_us']:>7.0f} {r['median_us'] / base['median_us']:>5.1f} | "
            f"{r['issue_cpu_us']:>9.1f} {r['issue_cpu_us'] / base['issue_cpu_us']:>5.1f} | "
            f"{r['gather_cpu_us']:>10.1f} {r['gather_cpu_us'] / base['gather_cpu_us']:>5.1f} | "
            f"{r['batches']:>7.1f} {r['sends']:>5.0f}"
        )
    for r in rows:
        if "reduce_n" in r:
            print(f"sum of {r['reduce_n']} replies reduced inside the tree: median {r['reduce_median_us']:.0f} us")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} (2 vCPUs)")
    return 0


def callgrind(quick: bool) -> int:
    if not shutil.which("valgrind"):
        print("valgrind not found", file=sys.stderr)
        return 1
    build()
    iters = 10
    sizes = (16, 256, 4096) if quick else SIZES
    issue_fn = "monarch_core::local::LocalCluster::cast"
    gather_fn = "monarch_core::local::Collector::add_at_sender"
    res = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            per = {}
            for name, fn in (("issue", issue_fn), ("gather", gather_fn)):
                out = Path(tmp) / f"cg.{name}.{n}"
                p = subprocess.run(
                    [
                        "valgrind",
                        "--tool=callgrind",
                        f"--callgrind-out-file={out}",
                        f"--toggle-collect={fn}",
                        str(EXAMPLE),
                        "--profile",
                        str(n),
                        str(iters),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                coll = [line for line in p.stderr.splitlines() if "Collected" in line]
                per[name] = int(coll[-1].split(":")[-1].replace(",", "").strip()) / (iters + 1)
            res.append((n, per["issue"], per["gather"]))
    b = res[0]
    print("instructions per cast+gather (callgrind, fan-out 16; issue = LocalCluster::cast,")
    print("gather = the sender taking in reply batches and filling the N results)")
    hdr = f"{'N':>5} {'depth':>5} {'N/16':>5} | {'issue Ir':>9} {'x16':>5} | {'gather Ir':>10} {'x16':>6}"
    print(hdr)
    print("-" * len(hdr))
    for n, i, g in res:
        print(
            f"{n:>5} {depth(n):>5} {n // b[0]:>5} | {i:>9.0f} {i / b[1]:>5.2f} | {g:>10.0f} {g / b[2]:>6.1f}"
        )
    return 0


def real(n: int, iters: int) -> int:
    from monarch.actor import this_host

    t = time.perf_counter()
    pm = this_host().spawn_procs(per_host={"procs": n}, plugins=[])
    m = pm.spawn_native("e", "echo")
    vals = m.rank.call().get(timeout=300)
    first = time.perf_counter() - t
    assert [int.from_bytes(v, "little") for v in vals.values()] == list(range(n))
    for _ in range(50):
        m.rank.call().get()
    lat = []
    for _ in range(iters):
        t = time.perf_counter()
        m.rank.call().get()
        lat.append(time.perf_counter() - t)
    lat.sort()
    fanout = os.environ.get("MONARCH_CAST_FANOUT", "16 (default)")
    print(
        f"{n} procs, fan-out {fanout}: spawn + first reply {first:.2f} s; "
        f"cast+gather median {statistics.median(lat) * 1e6:.0f} us, p90 {lat[len(lat) * 9 // 10] * 1e6:.0f} us"
    )
    pm.stop().get()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="N = 16, 256, 4096 only, fewer iterations")
    ap.add_argument("--callgrind", action="store_true", help="count instructions with valgrind instead of timing")
    ap.add_argument("--real", type=int, metavar="N", help="N real worker procs over sockets instead")
    ap.add_argument("--iters", type=int, default=300, help="iterations for --real")
    a = ap.parse_args()
    if a.real:
        return real(a.real, a.iters)
    if a.callgrind:
        return callgrind(a.quick)
    return in_process(a.quick)


if __name__ == "__main__":
    sys.exit(main())
