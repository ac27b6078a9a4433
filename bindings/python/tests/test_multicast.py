"""Casts travel down a tree of procs (MONARCH_CAST_FANOUT=2 here, so an
8-proc mesh is 3 levels deep): every rank still gets exactly its message,
ranks below a stopped proc wait for it, and when it dies they fail instead
of hanging; later casts route around it."""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import os, signal, time
    from monarch.actor import Actor, ActorError, endpoint, this_host, current_rank, send, Channel

    class P(Actor):
        def __init__(self):
            self.seen = []

        @endpoint
        def pid(self):
            return os.getpid()

        @endpoint
        def rank(self):
            return current_rank().rank

        @endpoint
        def record(self, i):
            self.seen.append(i)

        @endpoint
        def seen_list(self):
            return self.seen

    import monarch.actor
    monarch.actor.unhandled_fault_hook = lambda failure: None  # the kill below is expected
    pm = this_host().spawn_procs(per_host={"gpus": 8})
    m = pm.spawn("p", P)
    # Tree (fan-out 2, base ranks): root -> 0, 1; 0 -> 2, 3; 1 -> 4, 5; 2 -> 6, 7.
    assert list(m.rank.call().get(timeout=60).values()) == list(range(8))
    odd = m.slice(gpus=slice(1, 8, 2))
    assert list(odd.rank.call().get(timeout=60).values()) == [0, 1, 2, 3]
    assert m.slice(gpus=7).rank.call_one().get(timeout=60) == 0

    # FIFO per sender across tree casts, slices and direct calls.
    for i in range(40):
        if i % 3 == 0:
            m.record.broadcast(i)
        elif i % 3 == 1:
            m.slice(gpus=slice(2, 8)).record.broadcast(i)
        else:
            m.slice(gpus=6).record.broadcast(i)
    seen = m.seen_list.call().get(timeout=60)
    for r in range(8):
        got = seen.item(gpus=r)
        assert got == sorted(got), (r, got)
        want = [i for i in range(40) if i % 3 == 0 or (i % 3 == 1 and r >= 2) or (i % 3 == 2 and r == 6)]
        assert got == want, (r, got)
    print("fifo ok")

    pids = list(m.pid.call().get(timeout=60).values())
    os.kill(pids[0], signal.SIGSTOP)
    futs = list(m.rank.stream())
    first = sorted(f.get(timeout=60) for f in futs[:3])
    print("while stopped:", first)
    try:
        futs[3].get(timeout=1.0)
        print("unexpected fourth reply")
    except TimeoutError:
        print("subtree waits")
    os.kill(pids[0], signal.SIGKILL)
    failed = 0
    for f in futs[3:]:
        try:
            f.get(timeout=60)
        except ActorError as e:
            failed += 1
    print("failed after kill:", failed)
    # Later casts to a view holding the dead proc fail at once (supervision).
    try:
        m.rank.call().get(timeout=60)
    except ActorError as e:
        print("later cast fails at once:", type(e).__name__, "rank 0" in str(e))
    live = m.slice(gpus=slice(1, 8))
    print("live:", list(live.rank.call().get(timeout=60).values()))
    # A leaf lost while its forwarder (base rank 2, now reached directly)
    # holds the replies of its subtree: the forwarder fails that point and
    # sends the rest up; nothing hangs.
    os.kill(pids[6], signal.SIGSTOP)
    fut = live.rank.call()
    time.sleep(0.5)
    os.kill(pids[6], signal.SIGKILL)
    try:
        fut.get(timeout=60)
    except ActorError as e:
        print("leaf lost:", sorted(p for p, _, _ in e.failures))
    pm.stop().get()
    print("done")
    """
)


def test_tree_multicast_order_and_failures(tmp_path):
    script = tmp_path / "tree.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["MONARCH_CAST_FANOUT"] = "2"
    r = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "fifo ok",
        "while stopped: [1, 4, 5]",
        "subtree waits",
        "failed after kill: 5",
        "later cast fails at once: SupervisionError True",
        "live: [0, 1, 2, 3, 4, 5, 6]",
        "leaf lost: [5]",
        "done",
    ], r.stdout + r.stderr
