"""Cast+gather to N real `monarch worker` procs (Rust echo actors, no Python
in the workers), to compare the multicast tree with a flat cast over real
sockets:

    MONARCH_CAST_FANOUT=16  .venv/bin/python benches/native_cast.py 256   # tree
    MONARCH_CAST_FANOUT=256 .venv/bin/python benches/native_cast.py 256   # flat

(The fan-out is read once per process.) Needs the monarch binary
(`cargo build --release -p monarch-cli`, or the installed package's).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from monarch.actor import this_host


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 300
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


if __name__ == "__main__":
    sys.exit(main())
