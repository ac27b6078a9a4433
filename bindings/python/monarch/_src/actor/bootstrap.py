"""A worker proc's main loop (run by ``python -m monarch._bootstrap``), and
upstream's ``run_worker_loop_forever`` / ``attach_to_workers`` (hosts that
something else started, joining a controller: our host agents).

The controller starts one such process per point of a proc mesh with the
bootstrap environment set (``MONARCH_CONTROLLER``, ``MONARCH_PROC_ADDR``,
``MONARCH_JOB_TOKEN``, ``MONARCH_PROC_RANK``). ``main`` creates the runtime
(which connects back to the controller and reports ready), then handles
events one at a time until the proc is asked to stop (see ``server`` for the
protocol), and frees the runtime.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from ..._lib import runtime, shutdown_runtime
from .future import Future
from .host_mesh import HostMesh, monarch_binary
from .server import Server


def main() -> int:
    """Serve this proc's actors; the process's exit status."""
    if "MONARCH_CONTROLLER" not in os.environ:
        sys.stderr.write("monarch._bootstrap: not started by a monarch controller\n")
        return 2
    rt = runtime()
    try:
        Server(rt).serve()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        shutdown_runtime()
    return 0


def _host_port(addr: str) -> str:
    """``"IP:PORT"`` of an upstream-style worker address (``tcp://IP:PORT``
    or ``IP:PORT``)."""
    for scheme in ("tcp://", "tcp!"):
        if addr.startswith(scheme):
            addr = addr[len(scheme) :]
    if "@" in addr:
        addr = addr.split("@", 1)[0]
    if "://" in addr:
        raise ValueError(f"worker address {addr!r}: only tcp://HOST:PORT (or HOST:PORT) is supported")
    return addr


def _check_security(private_key: Any, ca: Any) -> None:
    if private_key is not None or ca != "trust_all_connections":
        raise NotImplementedError(
            "private_key/ca: use the job secret (MONARCH_JOB_TOKEN) and optional mutual TLS "
            "(MONARCH_TLS_CERT/KEY/CA, see docs/hosts.md); pass ca='trust_all_connections'"
        )


def run_worker_loop_forever(*, address: str, ca: Any = "trust_all_connections", private_key: Any = None) -> None:
    """Make this machine a host that a controller can attach (upstream's
    worker loop): runs the host agent ``monarch host --listen HOST:PORT``
    in the foreground until it is killed. Controllers attach it with
    ``attach_to_workers`` (same ``MONARCH_JOB_TOKEN`` on both sides)."""
    _check_security(private_key, ca)
    listen = _host_port(address)
    if listen.startswith("*:"):
        listen = "0.0.0.0:" + listen[2:]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(monarch_binary(), [monarch_binary(), "host", "--listen", listen])


def attach_to_workers(
    *, workers: Sequence[Any], ca: Any = "trust_all_connections", private_key: Any = None, name: str | None = None
) -> HostMesh:
    """A host mesh (dimension ``hosts``) of the workers at ``workers``
    (``tcp://HOST:PORT`` addresses of ``run_worker_loop_forever`` /
    ``monarch host`` agents; a ``Future`` of such an address is waited
    for)."""
    _check_security(private_key, ca)
    addrs = [_host_port(w.get() if isinstance(w, Future) else str(w)) for w in workers]
    return HostMesh.attach(addrs)
