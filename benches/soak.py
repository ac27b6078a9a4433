"""Load soak: nothing lost, nothing leaked (docs/security.md, "Load").

For ``--seconds`` (default 60), two threads of the controller run at once:

* pipelined calls: ``call_one(i)`` to one proc with up to ``--window``
  calls in flight, each reply checked to be ``i``;
* gathers: ``call(i).get()`` over ``--gather-procs`` procs (default 4),
  every point checked to be ``i``.

Then ``--rounds`` (default 200) spawn/kill rounds: spawn 2 procs, spawn an
actor, call it; in odd rounds SIGKILL one proc first, and the call must
fail with SupervisionError; stop the mesh. Threads and descriptors of the controller and
its procs (its child processes and theirs: procs forked from the zygote
template are the template's children; the template itself, started once,
is not counted) are counted after the first two rounds (threads started
once are no leak) and after the last (waiting up to 30 s for them to
settle).

Prints the counts and exits 1 when a reply was lost or wrong, or something
leaked. Throughput depends on the machine and its load; correctness does
not.

    .venv/bin/python benches/soak.py --seconds 60
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

import monarch.actor as ma
from monarch.actor import Actor, SupervisionError, endpoint, this_host


class Echo(Actor):
    @endpoint
    def echo(self, i):
        return i

    @endpoint
    def pid(self):
        return os.getpid()


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _is_template(pid: int) -> bool:
    """Whether `pid` is a zygote template (the warm process procs are forked
    from, started once and kept: no leak)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"MONARCH_ZYGOTE_FD=" in f.read()
    except OSError:
        return False


def procs() -> list[int]:
    """Live (not zombie) proc processes of this controller: its children and
    theirs (procs forked from a zygote are the template's children), not
    counting a zygote template itself."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            kids.setdefault(int(fields[1]), []).append(int(d))
    out = []
    todo = list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        # Only a direct child can be this controller's template.
        if not (pid in kids.get(os.getpid(), []) and _is_template(pid)):
            out.append(pid)
    return out


def pipelined(mesh, deadline: float, window: int, out: dict) -> None:
    one = mesh.slice(gpus=0)
    inflight: list = []
    sent = done = wrong = 0
    while time.monotonic() < deadline or inflight:
        if time.monotonic() < deadline and len(inflight) < window:
            inflight.append((sent, one.echo.call_one(sent)))
            sent += 1
            continue
        i, fut = inflight.pop(0)
        if fut.get(timeout=60) != i:
            wrong += 1
        done += 1
    out.update(calls_sent=sent, calls_answered=done, calls_wrong=wrong)


def gathers(mesh, points: int, deadline: float, out: dict) -> None:
    n = done = wrong = 0
    while time.monotonic() < deadline:
        vm = mesh.echo.call(n).get(timeout=60)
        if list(vm.values()) != [n] * points:
            wrong += 1
        n += 1
        done += 1
    out.update(gathers=done, gathers_wrong=wrong)


def load(seconds: float, window: int, points: int) -> dict:
    calls_pm = this_host().spawn_procs(per_host={"gpus": 1})
    gather_pm = this_host().spawn_procs(per_host={"gpus": points})
    calls = calls_pm.spawn("calls", Echo)
    gather = gather_pm.spawn("gather", Echo)
    out: dict = {}
    deadline = time.monotonic() + seconds
    t0 = time.monotonic()
    ts = [
        threading.Thread(target=pipelined, args=(calls, deadline, window, out)),
        threading.Thread(target=gathers, args=(gather, points, deadline, out)),
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out["seconds"] = time.monotonic() - t0
    calls_pm.stop().get(timeout=60)
    gather_pm.stop().get(timeout=60)
    return out


def snapshot() -> tuple[int, int, list[int]]:
    return threads(), fds(), procs()


def settle(before: tuple[int, int, list[int]], wait: float = 30.0) -> tuple[int, int, list[int]]:
    """The counts once they are back to `before`, or after `wait` seconds."""
    deadline = time.monotonic() + wait
    now = snapshot()
    while time.monotonic() < deadline:
        now = snapshot()
        if now[0] <= before[0] and now[1] <= before[1] and not now[2]:
            break
        time.sleep(0.2)
    return now


def spawn_kill(rounds: int) -> dict:
    failures: list = []
    ma.unhandled_fault_hook = failures.append  # the SIGKILLs are expected
    killed_seen = 0
    before = snapshot()
    t0 = time.monotonic()
    for r in range(rounds):
        if r == 2:
            # Threads started once (on the first spawn, the first failure)
            # are no leak: count from here.
            before = settle(snapshot(), wait=5.0)
        pm = this_host().spawn_procs(per_host={"gpus": 2})
        a = pm.spawn("round", Echo)
        pids = list(a.pid.call().get(timeout=60).values())
        if r % 2:
            os.kill(pids[1], signal.SIGKILL)
            try:
                a.echo.call(r).get(timeout=60)
            except SupervisionError:
                killed_seen += 1
        else:
            assert list(a.echo.call(r).get(timeout=60).values()) == [r, r]
        pm.stop().get(timeout=60)
    elapsed = time.monotonic() - t0
    after = settle(before)
    return {
        "rounds": rounds,
        "rounds_seconds": elapsed,
        "threads_before": before[0],
        "threads_after": after[0],
        "fds_before": before[1],
        "fds_after": after[1],
        "procs_before": len(before[2]),
        "procs_after": len(after[2]),
        "killed": rounds // 2,
        "killed_seen": killed_seen,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0, help="length of the load phase")
    p.add_argument("--window", type=int, default=256, help="pipelined calls in flight")
    p.add_argument("--gather-procs", type=int, default=4, help="procs each gather covers")
    p.add_argument("--rounds", type=int, default=200, help="spawn/kill rounds")
    args = p.parse_args()
    # Warm up (imports, the first proc's start-up) before counting anything.
    warm = this_host().spawn_procs(per_host={"gpus": 1})
    warm.spawn("warm", Echo).echo.call(0).get(timeout=60)
    warm.stop().get(timeout=60)

    r = load(args.seconds, args.window, args.gather_procs)
    lost = r["calls_sent"] - r["calls_answered"]
    print(
        f"load: {r['seconds']:.1f} s: {r['calls_answered']:,} pipelined calls "
        f"({r['calls_answered'] / r['seconds']:,.0f}/s, {lost} lost, {r['calls_wrong']} wrong), "
        f"{r['gathers']:,} gathers over {args.gather_procs} procs "
        f"({r['gathers'] / r['seconds']:,.0f}/s, {r['gathers_wrong']} wrong)"
    )
    s = spawn_kill(args.rounds)
    print(
        f"spawn/kill: {s['rounds']} rounds in {s['rounds_seconds']:.1f} s "
        f"(a call after each of {s['killed']} SIGKILLs failed: {s['killed_seen']}); "
        f"threads {s['threads_before']} -> {s['threads_after']}, "
        f"fds {s['fds_before']} -> {s['fds_after']}, "
        f"procs {s['procs_before']} -> {s['procs_after']}"
    )
    ok = (
        lost == 0
        and r["calls_wrong"] == 0
        and r["gathers_wrong"] == 0
        and s["threads_after"] <= s["threads_before"]
        and s["fds_after"] <= s["fds_before"]
        and s["procs_after"] == 0
        and s["killed_seen"] == s["killed"]
    )
    print("OK: nothing lost, nothing leaked" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
