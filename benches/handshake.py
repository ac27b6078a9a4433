"""Connect latency: the authentication handshake (SPAKE2 and key
confirmation, core/src/auth.rs) with both ends in one process over a Unix
socket pair, and a TCP connect plus handshake to a real `monarch host` on
127.0.0.1 (a job secret from `monarch secret`). Runs the `handshake` example
of monarch-core, which prints the median and 90th percentile.

    .venv/bin/python benches/handshake.py [-n 300]

Part of `make bench-hosts`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from _table import print_table

from monarch.actor import monarch_binary

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "target" / "release" / "examples" / "handshake"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=300, help="handshakes per row")
    args = ap.parse_args()
    cargo = os.environ.get("CARGO", "cargo")
    subprocess.run([cargo, "build", "--release", "-q", "-p", "monarch-core", "--example", "handshake"], cwd=ROOT, check=True)
    secret = subprocess.run([monarch_binary(), "secret"], capture_output=True, text=True, check=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k != "MONARCH_CONTROLLER"}
    env["MONARCH_JOB_TOKEN"] = secret
    agent = subprocess.Popen([monarch_binary(), "host", "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = agent.stdout.readline()
        if not line.startswith("MONARCH_HOST_READY "):
            raise RuntimeError(f"agent did not start: {line!r}")
        out = subprocess.run([str(EXAMPLE), str(args.n), line.split()[1]], env=env, capture_output=True, text=True, timeout=300, check=True)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=15)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    print_table(
        ("connection", "n", "median µs", "p90 µs"),
        [(r["row"], str(r["n"]), f"{r['median_us']:.0f}", f"{r['p90_us']:.0f}") for r in rows],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
