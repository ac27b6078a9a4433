"""The host agent (`monarch host`): what it costs and how fast it starts
procs. One agent on 127.0.0.1; controllers are child processes.

Rows: spawning N procs through the agent to the first reply of all of
them (median of R rounds, one controller), when `spawn_procs` returned
(the agent's answers to prepare/start) and the agent's CPU per spawn; then with K controllers
attached, each with P live procs: the agent's threads, RSS and CPU while
nothing happens (heartbeat probes only) over S seconds.

    .venv/bin/python benches/agent.py [--procs 4] [--rounds 5] [--controllers 4]
        [--idle 20] [--lib DIR]   # libmonarch.so, monarch.h, monarch from DIR (A/B)
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

from _ab import cpu_s, lib_env, status


def controller(args) -> int:
    from monarch.actor import Actor, endpoint
    from monarch.job import HostListJob

    class Ping(Actor):
        @endpoint
        def ping(self) -> None:
            return None

    hosts = HostListJob([args.agent]).host_mesh()
    live = []
    for cmd in sys.stdin:
        what, _, n = cmd.strip().partition(" ")
        if what == "spawn":
            t = time.perf_counter()
            pm = hosts.spawn_procs(per_host={"procs": int(n)})
            asked = time.perf_counter() - t
            pm.spawn("ping", Ping).ping.call().get()
            dt = time.perf_counter() - t
            pm.stop().get()
            print(f"@@SPAWN {dt} {asked}", flush=True)
        elif what == "keep":
            pm = hosts.spawn_procs(per_host={"procs": int(n)})
            pm.spawn("ping", Ping).ping.call().get()
            live.append(pm)
            print("@@KEPT", flush=True)
        elif what == "quit":
            break
    for pm in live:
        pm.stop().get()
    return 0


def start_controller(env, agent):
    return subprocess.Popen(
        [sys.executable, __file__, "--controller", "--agent", agent],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def ask(c, cmd, marker):
    c.stdin.write(cmd + "\n")
    c.stdin.flush()
    while True:
        line = c.stdout.readline()
        if not line:
            raise RuntimeError(f"controller ended while waiting for {marker}")
        if line.startswith(marker):
            return line.split()[1:]


def finish(procs):
    for c in procs:
        try:
            c.stdin.write("quit\n")
            c.stdin.close()
        except BrokenPipeError:
            pass
    for c in procs:
        try:
            c.wait(timeout=60)
        except subprocess.TimeoutExpired:
            c.kill()
            c.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=4, help="procs per spawn (N)")
    ap.add_argument("--rounds", type=int, default=5, help="spawns timed (R)")
    ap.add_argument("--controllers", type=int, default=4, help="controllers attached while idle (K)")
    ap.add_argument("--live", type=int, default=2, help="live procs per controller while idle (P)")
    ap.add_argument("--idle", type=float, default=20, help="seconds of idle measured (S)")
    ap.add_argument("--lib", help="directory with libmonarch.so, monarch.h and monarch to use")
    ap.add_argument("--controller", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--agent", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.controller:
        return controller(args)

    env, binary = lib_env(os.environ, args.lib)
    env["MONARCH_JOB_TOKEN"] = subprocess.run(
        [binary, "secret"], capture_output=True, text=True, check=True
    ).stdout.strip()
    a = subprocess.Popen([binary, "host", "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE, text=True)
    ctls = []
    try:
        ready = a.stdout.readline()
        if not ready.startswith("MONARCH_HOST_READY "):
            raise RuntimeError(f"agent did not start: {ready!r}")
        addr = ready.split()[1]
        base = (status(a.pid, "Threads"), status(a.pid, "VmRSS"))
        ctls.append(start_controller(env, addr))
        c0 = cpu_s(a.pid)
        spawn = [[float(x) for x in ask(ctls[0], f"spawn {args.procs}", "@@SPAWN")] for _ in range(args.rounds)]
        spawn_cpu = (cpu_s(a.pid) - c0) / args.rounds
        for _ in range(args.controllers - 1):
            ctls.append(start_controller(env, addr))
        for c in ctls:
            ask(c, f"keep {args.live}", "@@KEPT")
        time.sleep(2)
        t0, c0 = time.monotonic(), cpu_s(a.pid)
        time.sleep(args.idle)
        idle = (cpu_s(a.pid) - c0) / (time.monotonic() - t0)
        busy = (status(a.pid, "Threads"), status(a.pid, "VmRSS"))
        finish(ctls)
        ctls = []
    finally:
        finish(ctls)
        a.send_signal(signal.SIGTERM)
        try:
            a.wait(timeout=15)
        except subprocess.TimeoutExpired:
            a.kill()
            a.wait()

    k, p = args.controllers, args.live
    print(f"agent on 127.0.0.1, load {os.getloadavg()[0]:.2f}")
    first = statistics.median(s[0] for s in spawn) * 1e3
    asked = statistics.median(s[1] for s in spawn) * 1e3
    print(
        f"spawn {args.procs} procs to first reply (median of {args.rounds}): {first:.0f} ms"
        f" (spawn_procs returned after {asked:.1f} ms); agent CPU per spawn {spawn_cpu * 1e3:.0f} ms"
    )
    print(f"alone: {base[0]} threads, RSS {base[1] / 1024:.1f} MiB")
    print(f"{k} controllers x {p} live procs: {busy[0]} threads, RSS {busy[1] / 1024:.1f} MiB, idle CPU {idle * 100:.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
