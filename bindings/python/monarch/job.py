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
equal the agents'. :func:`job_secret` returns the secret the runtime uses,
for allocators that start agents themselves.
"""

from __future__ import annotations

import os

from ._lib import check, ffi, lib, runtime, take_buffer
from .actor import HostMesh

__all__ = ["Job", "HostListJob", "job_secret"]


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

    def __init__(self, hosts=None):
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
