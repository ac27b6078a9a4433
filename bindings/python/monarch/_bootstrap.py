"""Entry point of a worker proc: ``python -m monarch._bootstrap``.

The controller starts one such process per point of a proc mesh with the
bootstrap environment set (``MONARCH_CONTROLLER``, ``MONARCH_PROC_ADDR``,
``MONARCH_JOB_TOKEN``, ``MONARCH_PROC_RANK``). It creates the runtime (which
connects back to the controller and reports ready), then handles events one
at a time until the proc is asked to stop; see ``monarch._server`` for the
protocol. Finally it frees the runtime and exits.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    if "MONARCH_CONTROLLER" not in os.environ:
        sys.stderr.write("monarch._bootstrap: not started by a monarch controller\n")
        return 2
    from . import _lib
    from ._server import Server

    rt = _lib.runtime()
    try:
        Server(rt).serve()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        _lib.shutdown_runtime()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: actors may hold threads or views over freed
    # memory; nothing useful happens after the runtime is gone.
    os._exit(code)
