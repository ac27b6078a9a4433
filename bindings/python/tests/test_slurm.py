"""monarch.job.SlurmJob on a real SLURM cluster (scripts/slurm/up.sh:
slurmctld and two slurmd on this machine, nodes n1 and n2): srun starts a
real `monarch host` agent per node, a controller spawns procs across them
and calls actors there, and nothing is left in the queue or running after.

`make test` runs this inside scripts/slurm/with-cluster.sh
(MONARCH_SLURM_TEST=1); elsewhere the tests are skipped."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from monarch.actor import Actor, SupervisionError, current_rank, endpoint
from monarch.job import SlurmJob

pytestmark = pytest.mark.skipif(
    os.environ.get("MONARCH_SLURM_TEST") != "1",
    reason="needs the SLURM test cluster (make test-slurm / scripts/slurm/with-cluster.sh)",
)


class SlurmProbe(Actor):
    @endpoint
    def where(self):
        return (
            current_rank().rank,
            os.environ.get("SLURMD_NODENAME"),
            os.environ.get("SLURM_JOB_ID"),
            os.getpid(),
        )

    @endpoint
    def add(self, a, b):
        return a + b


def squeue():
    return subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True, check=True).stdout.strip()


def wait_queue_empty(timeout=30):
    deadline = time.time() + timeout
    while squeue() and time.time() < deadline:
        time.sleep(0.1)
    assert squeue() == "", f"jobs left in the queue: {squeue()}"


def agents_running():
    """`monarch host` processes started by SLURM (SLURM_JOB_ID in their
    environment): agents other tests start by hand do not count."""
    out = subprocess.run(["pgrep", "-f", "[m]onarch host --listen"], capture_output=True, text=True).stdout
    ours = []
    for pid in out.split():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(b"SLURM_JOB_ID=") for e in env):
            ours.append(pid)
    return ours


def wait_no_agents(timeout=30):
    deadline = time.time() + timeout
    while agents_running() and time.time() < deadline:
        time.sleep(0.1)
    assert not agents_running(), f"host agents left running: {agents_running()}"


def test_slurm_job_runs_procs_on_both_nodes():
    with SlurmJob(nodes=2, listen="127.0.0.1:0", timeout=120) as job:
        hosts = job.host_mesh()
        assert hosts.extent == {"hosts": 2}
        assert job.job_id and job.job_id in squeue()
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        assert procs.extent == {"hosts": 2, "gpus": 2}
        probes = procs.spawn("probe", SlurmProbe)
        where = [v for _, v in probes.where.call().get(timeout=60).items()]
        assert [w[0] for w in where] == [0, 1, 2, 3]
        # Procs started by the agent srun put on n1, then n2, in the job.
        assert [w[1] for w in where] == ["n1", "n1", "n2", "n2"]
        assert {w[2] for w in where} == {job.job_id}
        assert len({w[3] for w in where}) == 4
        # Calls and slices across the two SLURM nodes.
        assert [v for _, v in probes.add.call(2, 3).get(timeout=60).items()] == [5] * 4
        second = probes.slice(hosts=1)
        assert [v[1] for _, v in second.where.call().get(timeout=60).items()] == ["n2", "n2"]
        procs.stop().get(timeout=60)
    # Leaving the block killed the job: the step and the allocation srun
    # made are gone, and so are the agents.
    wait_queue_empty()
    wait_no_agents()


def test_refused_allocation_raises_with_srun_message():
    job = SlurmJob(nodes=3, listen="127.0.0.1:0", timeout=60)
    with pytest.raises(SupervisionError, match="Unable to allocate resources") as e:
        job.host_mesh()
    assert "srun" in str(e.value)
    wait_queue_empty()


def test_bad_arguments():
    with pytest.raises(ValueError):
        SlurmJob(nodes=0)
    with pytest.raises(TypeError):
        SlurmJob(nodes=1, srun_args="--partition=x")


def test_killed_controller_leaves_nothing_behind(tmp_path):
    """A controller SIGKILLed while its SLURM job runs procs: srun gets
    SIGTERM (PR_SET_PDEATHSIG), ends the job; agents and procs go."""
    script = tmp_path / "ctrl.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
            from monarch.job import SlurmJob
            from test_slurm import SlurmProbe
            job = SlurmJob(nodes=2, listen="127.0.0.1:0", timeout=120)
            probes = job.host_mesh().spawn_procs(per_host={{"gpus": 1}}).spawn("p", SlurmProbe)
            pids = [v[3] for _, v in probes.where.call().get(timeout=60).items()]
            print("READY", *pids, flush=True)
            time.sleep(600)
            """
        )
    )
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("READY"), line
        pids = [int(x) for x in line.split()[1:]]
        assert len(pids) == 2
        assert "RUNNING" in squeue()
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    wait_queue_empty()
    wait_no_agents()
    deadline = time.time() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.time() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")], "procs outlived their agents"
