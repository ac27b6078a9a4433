"""Log forwarding: procs' stdout reaching the controller's stdout, for procs
on this host (their pipes read by the controller) and behind a `monarch
host` agent on 127.0.0.1 (pipes read by the agent, lines sent over TCP).

Per row: lines/s and MB/s while every proc prints as fast as it can; the
latency of one line (printed by a proc with its CLOCK_MONOTONIC time, seen
by this script on the controller's stdout); the CPU the controller (and
the agent) spent per MB forwarded; their thread counts while the procs run.

    .venv/bin/python benches/logs.py [--procs 4] [--lines 20000] [--size 100]
        [--lib DIR]   # libmonarch.so, monarch.h and monarch from DIR (A/B)

This script is the harness: it runs the controller as a child (this file
with --controller) whose stdout it reads.
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


# ---------------------------------------------------------------- controller


def controller(args) -> int:
    from monarch.actor import Actor, endpoint, this_host

    class Printer(Actor):
        @endpoint
        def spew(self, tag: str, n: int, size: int) -> None:
            line = ("x" * max(size - 1, 0)) + "\n"
            w = sys.stdout.write
            for _ in range(n):
                w(line)
            sys.stdout.write(f"@@END {tag}\n")
            sys.stdout.flush()

        @endpoint
        def stamp(self, tag: str) -> None:
            sys.stdout.write(f"@@LAT {tag} {time.monotonic()}\n")
            sys.stdout.flush()

    out = sys.stdout
    if args.agent:
        from monarch.job import HostListJob

        pm = HostListJob([args.agent]).host_mesh().spawn_procs(per_host={"procs": args.procs})
    else:
        pm = this_host().spawn_procs(per_host={"procs": args.procs})
    pm.logging_option(stream_to_client=True, aggregate_window_sec=None)
    am = pm.spawn("printer", Printer)
    one = am.slice(procs=0)
    one.stamp.call_one(tag="warm").get()
    # Commands come on stdin, one per line, so the harness paces the runs.
    out.write("@@READY\n")
    out.flush()
    for cmd in sys.stdin:
        what, _, tag = cmd.strip().partition(" ")
        if what == "spew":
            am.spew.call(tag=tag, n=args.lines, size=args.size).get()
        elif what == "stamp":
            one.stamp.call_one(tag=tag).get()
        elif what == "quit":
            break
    pm.stop().get()
    return 0


# ------------------------------------------------------------------- harness


class Lines:
    """The controller's stdout, read in big chunks."""

    def __init__(self, fd: int):
        self.fd, self.buf, self.lines = fd, b"", []

    def next(self) -> bytes:
        while not self.lines:
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                raise EOFError("controller closed its stdout")
            self.buf += chunk
            *done, self.buf = self.buf.split(b"\n")
            self.lines.extend(done)
            self.lines.reverse()
        return self.lines.pop()


def until(lines: Lines, marker: bytes, count: int = 1) -> tuple[int, bytes]:
    """Read up to the `count`-th line containing `marker`; lines read, last hit."""
    n, hit = 0, b""
    while count:
        line = lines.next()
        n += 1
        if marker in line:
            count -= 1
            hit = line
    return n, hit


def row(args, env, agent) -> dict:
    cmd = [sys.executable, __file__, "--controller", "--procs", str(args.procs), "--lines", str(args.lines), "--size", str(args.size)]
    if agent:
        cmd += ["--agent", agent[1]]
    c = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    lines = Lines(c.stdout.fileno())
    try:
        until(lines, b"@@READY")

        def send(s):
            c.stdin.write(s.encode() + b"\n")

        watched = [c.pid] + ([agent[0].pid] if agent else [])
        rates, cpu_per_mb, lats, nthreads = [], [[] for _ in watched], [], None
        for i in range(args.repeat):
            cpu0 = [cpu_s(p) for p in watched]
            t0 = time.monotonic()
            send(f"spew s{i}")
            n, _ = until(lines, f"@@END s{i}".encode(), args.procs)
            dt = time.monotonic() - t0
            if nthreads is None:
                nthreads = [status(p, "Threads") for p in watched]
            mb = args.procs * args.lines * (args.size + len(b"[rank 0] ")) / 1e6
            rates.append((args.procs * args.lines / dt, mb / dt))
            for k, p in enumerate(watched):
                cpu_per_mb[k].append((cpu_s(p) - cpu0[k]) / mb)
            for j in range(args.stamps):
                send(f"stamp l{i}.{j}")
                _, hit = until(lines, f"@@LAT l{i}.{j} ".encode())
                lats.append(time.monotonic() - float(hit.split()[-1]))
        send("quit")
        c.stdin.close()
        c.wait(timeout=60)
    finally:
        if c.poll() is None:
            c.kill()
            c.wait()
    return {
        "lines/s": statistics.median(r[0] for r in rates),
        "MB/s": statistics.median(r[1] for r in rates),
        "latency us": statistics.median(lats) * 1e6,
        "cpu s/MB": [statistics.median(x) for x in cpu_per_mb],
        "threads": nthreads,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--lines", type=int, default=20000, help="lines per proc per run")
    ap.add_argument("--size", type=int, default=100, help="bytes per line, newline included")
    ap.add_argument("--repeat", type=int, default=5, help="runs per row (medians)")
    ap.add_argument("--stamps", type=int, default=20, help="one-line latency samples per run")
    ap.add_argument("--lib", help="directory with libmonarch.so, monarch.h and monarch to use")
    ap.add_argument("--controller", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--agent", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.controller:
        return controller(args)

    env = dict(os.environ)
    env.pop("MONARCH_PROC_OUTPUT", None)
    env, binary = lib_env(env, args.lib)
    secret = subprocess.run([binary, "secret"], capture_output=True, text=True, check=True).stdout.strip()
    env["MONARCH_JOB_TOKEN"] = secret

    results = [("this host", row(args, env, None))]
    a = subprocess.Popen([binary, "host", "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        ready = a.stdout.readline()
        if not ready.startswith("MONARCH_HOST_READY "):
            raise RuntimeError(f"agent did not start: {ready!r}")
        results.append(("agent on 127.0.0.1", row(args, env, (a, ready.split()[1]))))
    finally:
        a.send_signal(signal.SIGTERM)
        try:
            a.wait(timeout=15)
        except subprocess.TimeoutExpired:
            a.kill()
            a.wait()

    print(f"{args.procs} procs x {args.lines} lines of {args.size} B, {args.repeat} runs (medians); load {os.getloadavg()[0]:.2f}")
    print(f"{'where':20} {'lines/s':>10} {'MB/s':>7} {'1 line us':>10} {'ctl cpu s/MB':>13} {'agent cpu s/MB':>15} {'threads ctl/agent':>18}")
    for name, r in results:
        cpu = r["cpu s/MB"] + [None]
        th = "/".join(str(t) for t in r["threads"])
        agent_cpu = f"{cpu[1]:.4f}" if cpu[1] is not None else "-"
        print(f"{name:20} {r['lines/s']:>10,.0f} {r['MB/s']:>7.1f} {r['latency us']:>10,.0f} {cpu[0]:>13.4f} {agent_cpu:>15} {th:>18}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
