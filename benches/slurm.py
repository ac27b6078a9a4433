"""Time to bring up a 2-node SLURM host mesh and get a first reply.

Each round: `SlurmJob(nodes=2)` (srun asks slurmctld for an allocation,
starts `monarch host` on both nodes, the controller gathers their READY
lines and attaches them), then `spawn_procs(per_host={"gpus": 1})`, spawn
an actor on each proc and wait for the first reply from all of them; then
the job is killed (not timed) and the queue drains before the next round.

Needs a SLURM cluster: `make bench-slurm` runs this inside
scripts/slurm/with-cluster.sh (the two-node test cluster on this machine),
or run it with SLURM_CONF pointing at any cluster (add `--srun-arg`s for
its partition etc.). On the test cluster both "nodes" share this machine;
the numbers are the cost of SLURM's scheduling and launch path plus ours,
not of a real network. Also printed: the threads the job adds to the
controller while it is up (srun's output readers; one process-wide tokio
thread once anything uses it) and the controller's CPU over a bring-up.
`--lib DIR` runs against the libmonarch.so, monarch.h and monarch in DIR
(A/B runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from _ab import lib_env, status

from monarch.actor import Actor, endpoint
from monarch.job import SlurmJob


class Bench(Actor):
    @endpoint
    def ping(self):
        return None


def queue_empty(timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
        if not out.strip():
            return
        time.sleep(0.05)
    raise RuntimeError("jobs still in the queue")


def one_round(nodes, listen, srun_args):
    threads0 = status(os.getpid(), "Threads")
    t0, cpu0 = time.perf_counter(), time.process_time()
    job = SlurmJob(nodes=nodes, listen=listen, srun_args=srun_args, timeout=120)
    try:
        hosts = job.host_mesh()
        t_hosts, cpu = time.perf_counter(), time.process_time() - cpu0
        threads = status(os.getpid(), "Threads") - threads0
        procs = hosts.spawn_procs(per_host={"gpus": 1})
        am = procs.spawn("bench", Bench)
        am.ping.call().get(timeout=60)
        t_reply = time.perf_counter()
        # A second call: the steady-state round trip over the new mesh.
        t = time.perf_counter()
        am.ping.call().get(timeout=60)
        t_again = time.perf_counter() - t
        procs.stop().get(timeout=60)
    finally:
        job.kill()
    queue_empty()
    return t_hosts - t0, t_reply - t0, t_again, threads, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--listen", default="127.0.0.1:0", help="agents' --listen (default 127.0.0.1:0)")
    ap.add_argument("--srun-arg", action="append", default=[], help="extra srun option (repeatable)")
    ap.add_argument("--lib", help="directory with libmonarch.so, monarch.h and monarch to use")
    args = ap.parse_args()
    if args.lib and not os.environ.get("MONARCH_BENCH_LIB_SET"):
        env, _ = lib_env(os.environ, args.lib)
        env["MONARCH_BENCH_LIB_SET"] = "1"
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)
    one_round(args.nodes, args.listen, args.srun_arg)  # warm-up: page cache, imports
    hosts, reply, again, threads, cpu = [], [], [], [], []
    for _ in range(args.rounds):
        h, r, a, t, c = one_round(args.nodes, args.listen, args.srun_arg)
        hosts.append(h)
        reply.append(r)
        again.append(a)
        threads.append(t)
        cpu.append(c)
    n = args.nodes
    print(f"SLURM host mesh, {n} nodes, {args.rounds} rounds (median, min..max)")
    print(f"{'workload':52s} {'median':>10s} {'range':>20s}")
    for name, xs in (
        (f"srun + {n} agents ready + attached (HostMesh)", hosts),
        (f"... + spawn {n} procs + first reply from all", reply),
    ):
        print(f"{name:52s} {statistics.median(xs) * 1e3:8.0f} ms {min(xs) * 1e3:8.0f}..{max(xs) * 1e3:.0f} ms")
    print(f"{'next call to all ' + str(n) + ' procs (gather)':52s} {statistics.median(again) * 1e6:8.0f} us")
    print(f"{'controller threads added while the job is up':52s} {statistics.median(threads):8.0f}")
    print(f"{'controller CPU over srun + agents + attach':52s} {statistics.median(cpu) * 1e3:8.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
