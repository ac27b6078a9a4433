"""A proc casting to a mesh it is itself a proc of (as tensor workers do):
with more procs than the fan-out, the cast's tree passes through other
procs of the mesh, and the sender's own point, its subtree and the replies
must all arrive. Every proc of the mesh casts at once: gathered calls,
streams, and one-way messages whose per-sender order (FIFO across casts,
slices and single points, the sender's own point included) is checked."""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys
    from monarch.actor import Actor, endpoint, this_host, current_rank

    N = int(sys.argv[1])
    MSGS = 16


    class P(Actor):
        def __init__(self):
            self.seen = []

        @endpoint
        def rank(self):
            return current_rank().rank

        @endpoint
        def record(self, who, i):
            self.seen.append((who, i))

        @endpoint
        def seen_from(self, who):
            return [i for w, i in self.seen if w == who]


    def expected(me, r):
        # What rank r receives from caster `me`, in order.
        return [
            i
            for i in range(MSGS)
            if i % 4 == 0 or (i % 4 == 1 and r >= 1) or (i % 4 == 2 and r == me) or (i % 4 == 3 and r == N - 1)
        ]


    class Caster(Actor):
        @endpoint
        def cast(self, m):
            me = current_rank().rank
            ranks = list(m.rank.call().get(timeout=60).values())
            assert ranks == list(range(N)), (me, ranks)
            streamed = sorted(f.get(timeout=60) for f in m.rank.stream())
            assert streamed == list(range(N)), (me, streamed)
            assert m.slice(gpus=me).rank.call_one().get(timeout=60) == 0
            for i in range(MSGS):
                if i % 4 == 0:
                    m.record.broadcast(me, i)
                elif i % 4 == 1:
                    m.slice(gpus=slice(1, N)).record.broadcast(me, i)
                elif i % 4 == 2:
                    m.slice(gpus=me).record.broadcast(me, i)
                else:
                    m.slice(gpus=N - 1).record.broadcast(me, i)
            seen = m.seen_from.call(me).get(timeout=60)
            for r in range(N):
                assert seen.item(gpus=r) == expected(me, r), (me, r, seen.item(gpus=r))
            return me


    pm = this_host().spawn_procs(per_host={"gpus": N})
    m = pm.spawn("p", P)
    c = pm.spawn("c", Caster)
    print("casters:", sorted(c.cast.call(m).get(timeout=240).values()) == list(range(N)))
    pm.stop().get(timeout=60)
    print("done")
    """
)


@pytest.mark.parametrize(
    "fanout, procs",
    [
        # Fan-out 2: a tree of three levels over 8 procs.
        ("2", 8),
        # The default fan-out (16): base rank 16 is below rank 0.
        (None, 17),
    ],
)
def test_every_proc_casts_to_its_own_mesh(tmp_path, fanout, procs):
    script = tmp_path / "own_mesh.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env.pop("MONARCH_CAST_FANOUT", None)
    if fanout is not None:
        env["MONARCH_CAST_FANOUT"] = fanout
    r = subprocess.run(
        [sys.executable, str(script), str(procs)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["casters: True", "done"], r.stdout + r.stderr
