"""A worker proc's main loop (run by ``python -m monarch._bootstrap``).

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

from ..._lib import runtime, shutdown_runtime
from .debugger import install as install_debugger
from .server import Server


def main() -> int:
    """Serve this proc's actors; the process's exit status."""
    if "MONARCH_CONTROLLER" not in os.environ:
        sys.stderr.write("monarch._bootstrap: not started by a monarch controller\n")
        return 2
    rt = runtime()
    install_debugger()
    try:
        Server(rt).serve()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        shutdown_runtime()
    return 0

