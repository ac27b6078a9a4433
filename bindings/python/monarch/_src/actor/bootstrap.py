"""A worker proc's main loop (run by ``python -m monarch._bootstrap``).

The controller starts one such process per point of a proc mesh with the
bootstrap environment set (``MONARCH_CONTROLLER``, ``MONARCH_PROC_ADDR``,
``MONARCH_JOB_TOKEN``, ``MONARCH_PROC_RANK``). ``main`` creates the runtime
(which connects back to the controller and reports ready), then handles
events one at a time until the proc is asked to stop (see ``server`` for the
protocol), and frees the runtime. With ``MONARCH_ZYGOTE_FD`` set the
process is first the template procs are forked from (``zygote``), and only
its forked children go on to be procs.
"""

from __future__ import annotations

import os
import sys

from ..._lib import runtime, shutdown_runtime
from .server import Server
from .zygote import serve as serve_as_zygote


def main() -> int:
    """Serve this proc's actors; the process's exit status."""
    zygote_fd = os.environ.get("MONARCH_ZYGOTE_FD")
    if zygote_fd is not None and not serve_as_zygote(int(zygote_fd)):
        return 0
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

