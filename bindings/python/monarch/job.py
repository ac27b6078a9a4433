"""Allocators: where a controller's hosts come from.

The same controller program runs on one machine or many; only the job
changes::

    from monarch.job import HostListJob

    hosts = HostListJob(["10.0.0.2:7000", "10.0.0.3:7000"]).host_mesh()
    procs = hosts.spawn_procs(per_host={"gpus": 2})   # {hosts: 2, gpus: 2}

A job gives a :class:`monarch.actor.HostMesh` (dimension ``hosts``) of
machines running host agents (``monarch host --listen IP:PORT``). Every
connection is authenticated with the job secret: the controller's
``MONARCH_JOB_TOKEN`` (set it before the first use of the runtime) must
equal the agents'. A secret with less than 128 bits of estimated entropy is
refused (the first use of the runtime raises ``ValueError``); ``monarch
secret`` prints a strong one, and without ``MONARCH_JOB_TOKEN`` the runtime
makes its own. :func:`job_secret` returns the secret the runtime uses, for
allocators that start agents themselves.

On SLURM, :class:`SlurmJob` starts the agents itself with ``srun`` (one
per node), inside the current allocation or in a new one::

    from monarch.job import SlurmJob

    with SlurmJob(nodes=2, partition="gpu", time="1:00:00") as job:
        procs = job.host_mesh().spawn_procs(per_host={"gpus": 8})
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from ._lib import c_strings, check, ffi, lib, runtime, take_buffer
from ._src.actor.host_mesh import HostMesh, host_mesh_free, monarch_binary

__all__ = ["Job", "HostListJob", "SlurmJob", "job_secret"]


def job_secret() -> str:
    """The job secret of this process's runtime (``MONARCH_JOB_TOKEN`` if
    it was set when the runtime started, else a random one). Pass it to
    host agents in their environment or a file only the user can read,
    never on a command line."""
    buf = ffi.new("uint8_t **")
    n = ffi.new("size_t *")
    check(lib.monarch_runtime_job_token(runtime(), buf, n))
    return take_buffer(buf[0], n[0]).decode()


class Job:
    """An allocation of hosts. Subclasses implement :meth:`host_mesh`."""

    def host_mesh(self) -> HostMesh:  # pragma: no cover - abstract
        raise NotImplementedError

    def kill(self) -> None:
        """Release what the job started (nothing for a static list)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        return False


class HostListJob(Job):
    """A static list of running host agents: ``hosts`` (``"IP:PORT"``
    strings, as each agent printed after ``MONARCH_HOST_READY``) or, when
    omitted, the comma- or space-separated ``MONARCH_HOSTS``."""

    def __init__(self, hosts: Iterable[str] | None = None) -> None:
        if hosts is None:
            env = os.environ.get("MONARCH_HOSTS", "")
            hosts = [h for h in env.replace(",", " ").split() if h]
            if not hosts:
                raise ValueError("HostListJob() needs a list of hosts or MONARCH_HOSTS")
        if isinstance(hosts, str):
            hosts = [hosts]
        self.hosts = [str(h) for h in hosts]
        if not self.hosts:
            raise ValueError("HostListJob() needs at least one host")
        self._mesh = None

    def host_mesh(self) -> HostMesh:
        """Attach the agents (once) and return their host mesh."""
        if self._mesh is None:
            self._mesh = HostMesh.attach(self.hosts)
        return self._mesh

    def __repr__(self):
        return f"HostListJob({self.hosts!r})"


def _slurm_job_free(h):
    lib.monarch_slurm_job_free(h)


class SlurmJob(Job):
    """Hosts from SLURM: ``srun`` starts one host agent (``monarch host``)
    per node, and their addresses become a host mesh (dimension ``hosts``,
    in node order).

    Inside an allocation (``SLURM_JOB_ID`` set: under ``salloc`` or in an
    ``sbatch`` script) the agents run as a job step there, and ``nodes=None``
    means all its nodes; outside one, srun asks SLURM for a new allocation
    of ``nodes`` nodes, which ends with the job. ``partition``, ``time``
    (a SLURM time limit such as ``"30"`` or ``"1:00:00"``), ``account`` and
    any ``srun_args`` (e.g. ``["--gpus-per-node=8"]``) are passed to srun.
    ``listen`` is the agents' ``--listen`` address (``0.0.0.0:0``: every
    interface, a free port, advertising the node's address); ``agent``
    replaces the whole agent command (it must print the READY line as
    ``monarch host`` does). ``timeout`` (seconds) bounds the wait for every
    agent, time in the queue included. The agent binary
    (:func:`monarch.actor.monarch_binary`) must exist at the same path on
    every node. The job secret reaches the agents through srun's
    environment, never a command line.

    The agents start on the first :meth:`host_mesh`; :meth:`kill` (or
    leaving a ``with`` block, or garbage collection of the job) stops them,
    their procs and the step (and the allocation srun made). If this
    process dies, srun is told to stop too."""

    def __init__(
        self,
        nodes: int | None = None,
        *,
        partition: str | None = None,
        time: str | None = None,
        account: str | None = None,
        srun_args: Iterable[str] = (),
        listen: str = "0.0.0.0:0",
        agent: Sequence[str] | None = None,
        timeout: float = 300.0,
    ):
        if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1):
            raise ValueError(f"nodes must be a positive int or None (all nodes of the allocation), not {nodes!r}")
        if nodes is None and not os.environ.get("SLURM_JOB_ID"):
            raise ValueError(
                "SlurmJob(nodes=None) means all nodes of the current allocation, but SLURM_JOB_ID is not set"
            )
        self.nodes = nodes
        args = []
        if partition:
            args.append(f"--partition={partition}")
        if time:
            args.append(f"--time={time}")
        if account:
            args.append(f"--account={account}")
        if isinstance(srun_args, str):
            raise TypeError("srun_args is a list of arguments, not a string")
        args += [str(a) for a in srun_args]
        self.srun_args = args
        self.listen = listen
        self.agent = None if agent is None else [str(a) for a in agent]
        self.timeout = float(timeout)
        self._h = None
        self._mesh = None

    def _agent_argv(self):
        if self.agent is not None:
            return self.agent
        return [monarch_binary(), "host", "--listen", self.listen]

    def host_mesh(self) -> HostMesh:
        """Start the agents (once; blocks until all are ready and attached)
        and return their host mesh."""
        if self._mesh is not None:
            return self._mesh
        if self._h is not None:
            raise RuntimeError("this SlurmJob was killed")
        argv = self._agent_argv()
        c_argv, keep_a = c_strings(argv)
        c_args, keep_s = c_strings(self.srun_args)
        out = ffi.new("monarch_slurm_job **")
        timeout_ms = max(0, int(self.timeout * 1000))
        st = lib.monarch_slurm_job_start(
            runtime(), self.nodes or 0, c_argv, len(argv), c_args, len(self.srun_args), timeout_ms, out
        )
        del keep_a, keep_s
        check(st, "cannot start host agents with srun")
        self._h = ffi.gc(out[0], _slurm_job_free)
        hm = ffi.new("monarch_host_mesh **")
        check(lib.monarch_slurm_job_host_mesh(self._h, hm))
        self._mesh = HostMesh._wrap(ffi.gc(hm[0], host_mesh_free))
        return self._mesh

    @property
    def job_id(self) -> str | None:
        """The SLURM job id once the agents run (None before)."""
        if self._h is None:
            return None
        buf = ffi.new("uint8_t **")
        n = ffi.new("size_t *")
        check(lib.monarch_slurm_job_id(self._h, buf, n))
        return take_buffer(buf[0], n[0]).decode() or None

    def kill(self) -> None:
        """Stop the agents and their procs, and end the srun step (and the
        allocation it made). Blocks until srun has exited. Idempotent."""
        if self._h is not None:
            check(lib.monarch_slurm_job_stop(self._h))
        self._mesh = None

    def __repr__(self):
        return f"SlurmJob(nodes={self.nodes!r}, srun_args={self.srun_args!r})"
