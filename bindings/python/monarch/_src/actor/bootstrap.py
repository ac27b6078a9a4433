"""A worker proc's main loop (run by ``python -m monarch._bootstrap``).

The controller starts one such process per point of a proc mesh with the
bootstrap environment set (``MONARCH_CONTROLLER``, ``MONARCH_PROC_ADDR``,
``MONARCH_JOB_TOKEN``, ``MONARCH_PROC_RANK``). ``main`` creates the runtime
(which connects back to the controller and reports ready), then handles
events one at a time until the proc is asked to stop (see ``server`` for the
protocol), and frees the runtime. With ``MONARCH_ZYGOTE_FD`` set the
process is first the template procs are forked from (``zygote``), and only
its forked children go on to be procs. Procs run torch with
``THP_MEM_ALLOC_ENABLE=1`` unless the controller's environment sets it.

A proc with a Unix address dumps every thread's stack on SIGUSR1
(``faulthandler``) to ``<its socket path>.stacks``, which ``monarch top``
reads (docs/operating.md).
"""

from __future__ import annotations

import os
import sys

from ..._lib import runtime, shutdown_runtime
from .debugger import install as install_debugger
from .server import Server
from .zygote import serve as serve_as_zygote


def _dump_stacks_on_sigusr1() -> None:
    """Register faulthandler on SIGUSR1, writing to ``<socket>.stacks``."""
    import faulthandler
    import signal

    addr = os.environ.get("MONARCH_PROC_ADDR", "")
    if not addr.startswith("unix:"):
        return
    try:
        f = open(addr[len("unix:") :] + ".stacks", "w")  # noqa: SIM115 - open for the proc's life
    except OSError:
        return
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
    global _stacks_file
    _stacks_file = f


_stacks_file = None


def main() -> int:
    """Serve this proc's actors; the process's exit status."""
    zygote_fd = os.environ.get("MONARCH_ZYGOTE_FD")
    if zygote_fd is not None and not serve_as_zygote(int(zygote_fd)):
        return 0
    if "MONARCH_CONTROLLER" not in os.environ:
        sys.stderr.write("monarch._bootstrap: not started by a monarch controller\n")
        return 2
    # torch (imported later, if at all) puts tensors of 2 MiB and more on
    # transparent huge pages: fewer page faults, and peers read them with
    # process_vm_readv at about memcpy speed instead of a third of it
    # (docs/tensors.md, "All-reduce"). A value the controller sent wins.
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    _dump_stacks_on_sigusr1()
    rt = runtime()
    install_debugger()
    try:
        Server(rt).serve()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        shutdown_runtime()
    return 0

