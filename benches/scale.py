"""One controller against many host agents: what the controller costs at
10, 100 and 1,000 agents.

The agents are real runtimes speaking the real agent protocol
(authentication, frames, the agent actor's replies), many of them in one
load-generator process (`core/examples/scale_agents.rs`, mode `agents`);
the controller under test is a separate process (same example, mode
`controller`) that attaches them as a host mesh, sits idle, then calls
every agent and gathers the answers, round after round. Printed per agent
count: attach time, the controller's CPU while idle (percent of one CPU),
call+gather to every agent (median latency, controller CPU per round), the
time to spawn one proc per host through the agents to every actor's first
answer (the load generator starts each proc as a runtime of its own that
connects back and says Ready, as a proc does), a cast+gather to the actor
mesh on those procs (one `call()` per round, which travels down the
multicast tree of procs: median latency, controller CPU per round, and
the calling thread's CPU to issue the cast, i.e. the sender's own work), and
the controller's resident memory, threads and open descriptors at the end.

    .venv/bin/python benches/scale.py                 # 10, 100, 1000 agents
    .venv/bin/python benches/scale.py --agents 10 100 --idle 2 --rounds 20

Targets (issue 19): idle controller CPU < 1 % at 1,000 agents; cast+gather
to 1,000 hosts <= 20 ms (the "cast+gather" column: one proc per host).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import subprocess
import sys
from pathlib import Path

from _table import print_table

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "target" / "release" / "examples" / "scale_agents"


def build() -> None:
    cargo = os.environ.get("CARGO", "cargo")
    subprocess.run(
        [cargo, "build", "--release", "-q", "-p", "monarch-core", "--example", "scale_agents"],
        cwd=ROOT,
        check=True,
    )


def measure(n: int, idle_s: float, rounds: int) -> dict:
    env = dict(os.environ, MONARCH_JOB_TOKEN=secrets.token_hex(32))
    agents = subprocess.Popen(
        [str(EXAMPLE), "agents", str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        addrs = []
        for line in agents.stdout:
            line = line.strip()
            if line == "ready":
                break
            addrs.append(line)
        if len(addrs) != n:
            raise RuntimeError(f"the load generator started {len(addrs)} of {n} agents")
        out = subprocess.run(
            [str(EXAMPLE), "controller", str(idle_s), str(rounds), *addrs],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        ).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        agents.stdin.close()
        try:
            agents.wait(timeout=60)
        except subprocess.TimeoutExpired:
            agents.kill()
            agents.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--agents", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--idle", type=float, default=5.0, help="idle seconds measured")
    ap.add_argument("--rounds", type=int, default=50, help="call+gather and cast+gather rounds")
    args = ap.parse_args()
    # Each agent costs the load generator about 8 descriptors, the
    # controller 2.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 10 * max(args.agents) + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    build()
    rows = []
    for n in args.agents:
        r = measure(n, args.idle, args.rounds)
        rows.append(
            (
                str(n),
                f"{r['attach_s'] * 1e3:.0f} ms",
                f"{r['idle_cpu_pct']:.2f} %",
                f"{r['cast_median_s'] * 1e3:.2f} ms",
                f"{r['cast_cpu_s'] * 1e3:.2f} ms",
                f"{r['spawn_s'] * 1e3:.0f} ms",
                f"{r['mesh_cast_median_s'] * 1e3:.2f} ms",
                f"{r['mesh_cast_cpu_s'] * 1e3:.2f} ms",
                f"{r['mesh_cast_issue_s'] * 1e6:.0f} µs",
                f"{r['rss_kib'] / 1024:.1f} MiB",
                str(r["threads"]),
                str(r["fds"]),
            )
        )
    print_table(
        (
            "agents",
            "attach",
            "idle CPU (< 1 %)",
            "call+gather each agent",
            "CPU per round",
            "spawn 1/host",
            "cast+gather 1/host (<= 20 ms)",
            "CPU per cast",
            "issue",
            "RSS",
            "threads",
            "fds",
        ),
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
