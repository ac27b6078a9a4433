"""Supervision costs, measured with the Python API (`make bench-supervision`,
also run by `make bench`):

1. SIGKILL -> error at the caller: a call is in flight to one of 4 procs
   (its endpoint sleeps); the proc is killed with SIGKILL; we time from the
   kill until ``get()`` raises SupervisionError (target <= 100 ms).
2. Heartbeat cost on an idle mesh of 8 procs: CPU time (user + system) of
   the controller and its 8 procs over an idle window, as % of one core,
   with heartbeats at the default timeout (10 s: a probe per second), at an
   aggressive 1 s timeout (a probe every 250 ms), and off (target < 1%; the
   "off" row is the baseline the heartbeat adds to).
   Each setting runs in a fresh interpreter, because the timeout is read
   once per process.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def kill_latency(rounds: int) -> list[float]:
    import monarch.actor as ma
    from monarch.actor import SupervisionError, this_host
    from sup_bench_actors import Sleeper

    ma.unhandled_fault_hook = lambda failure: None  # expected failures
    out = []
    for _ in range(rounds):
        pm = this_host().spawn_procs(per_host={"gpus": 4})
        s = pm.spawn("s", Sleeper)
        pids = list(s.pid.call().get(timeout=60).values())
        fut = s.slice(gpus=1).sleep.call_one(30)
        time.sleep(0.05)  # the call is in the endpoint now
        t0 = time.perf_counter()
        os.kill(pids[1], signal.SIGKILL)
        try:
            fut.get(timeout=30)
            raise AssertionError("the call to a killed proc returned")
        except SupervisionError:
            out.append(time.perf_counter() - t0)
        pm.stop().get(timeout=60)
    return out


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def idle_cpu_child(window: float) -> None:
    """In a fresh interpreter: spawn 8 procs, idle, print CPU % as JSON."""
    from monarch.actor import this_host
    from sup_bench_actors import Sleeper

    pm = this_host().spawn_procs(per_host={"gpus": 8})
    s = pm.spawn("s", Sleeper)
    pids = [os.getpid(), *s.pid.call().get(timeout=60).values()]
    time.sleep(1.0)  # settle
    hz = os.sysconf("SC_CLK_TCK")
    before = sum(_cpu_ticks(p) for p in pids)
    t0 = time.monotonic()
    time.sleep(window)
    used = (sum(_cpu_ticks(p) for p in pids) - before) / hz
    wall = time.monotonic() - t0
    pm.stop().get(timeout=60)
    print(json.dumps({"cpu_pct": 100.0 * used / wall}))


def idle_cpu(timeout_ms: str, window: float) -> float:
    env = dict(os.environ, MONARCH_HEARTBEAT_TIMEOUT_MS=timeout_ms)
    env["PYTHONPATH"] = os.pathsep.join([HERE, *sys.path])
    r = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--idle-child", str(window)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode != 0:
        raise RuntimeError(f"idle-cpu child failed: {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])["cpu_pct"]


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--idle-child", type=float, default=None)
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    if a.idle_child is not None:
        idle_cpu_child(a.idle_child)
        return
    lat = kill_latency(a.rounds)
    rows = [
        (
            "SIGKILL -> SupervisionError at caller",
            f"median {statistics.median(lat) * 1e3:.1f} ms, max {max(lat) * 1e3:.1f} ms ({len(lat)} kills)",
            "<= 100 ms",
        )
    ]
    for label, t in (("default (10 s timeout)", "10000"), ("1 s timeout", "1000"), ("off", "0")):
        pct = idle_cpu(t, a.window)
        rows.append((f"idle 8 procs + controller, heartbeat {label}", f"{pct:.2f}% of a core", "< 1%"))
    w = max(len(r[0]) for r in rows)
    print(f"{'workload'.ljust(w)}  measured  (target)")
    for name, val, target in rows:
        print(f"{name.ljust(w)}  {val}  ({target})")


if __name__ == "__main__":
    main()
