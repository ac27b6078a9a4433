"""The warm template worker procs are forked from (the zygote).

A controller that spawns Python procs starts one ``python -m
monarch._bootstrap`` with ``MONARCH_ZYGOTE_FD`` set; it imports what every
proc imports, then ``serve`` hands the process to libmonarch, which forks one
child per proc on the controller's requests (docs/architecture.md, "Procs
forked from a zygote"). In each child ``serve`` returns True once the child
has become the proc: the interpreter's after-fork work done, ``os.environ``
and ``sys.path`` matching the environment the controller sent.
"""

from __future__ import annotations

import ctypes
import os
import sys

from ..._lib import check, ffi, lib


def serve(fd: int) -> bool:
    """Fork procs until the controller closes ``fd``: True in a forked
    child (now a proc), False in the zygote when it is done."""
    # What procs load on demand, loaded once here (async endpoints).
    import asyncio  # noqa: F401

    startup_cwd = os.getcwd()
    startup_path = os.environ.get("PYTHONPATH", "")
    sys.stdout.flush()
    sys.stderr.flush()
    out = ffi.new("int *")
    check(lib.monarch_zygote_serve(fd, out), "cannot serve as a zygote")
    if not out[0]:
        return False
    # What os.fork does in its child: the interpreter's locks and thread
    # state, then the at-fork hooks (random reseeds, threading).
    ctypes.pythonapi.PyOS_AfterFork_Child()
    _reload_environ()
    _update_sys_path(startup_cwd, startup_path)
    return True


def _reload_environ() -> None:
    """Make ``os.environ`` the process's environment (set in C after fork)."""
    environ = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    data = {}
    i = 0
    while environ[i] is not None:
        key, _, value = environ[i].partition(b"=")
        data[key] = value
        i += 1
    # os.environ and os.environb share this mapping of encoded keys and
    # values; the C environment is already right, so no putenv is needed.
    os.environ._data.clear()  # type: ignore[attr-defined]
    os.environ._data.update(data)  # type: ignore[attr-defined]


def _update_sys_path(startup_cwd: str, startup_path: str) -> None:
    """``sys.path`` as a fresh ``python -m`` started now would have it: its
    first entry the working directory, then PYTHONPATH's entries."""
    cwd = os.getcwd()
    if sys.path and sys.path[0] == startup_cwd:
        sys.path[0] = cwd
    now = os.environ.get("PYTHONPATH", "")
    if now != startup_path:
        added = [p for p in now.split(os.pathsep) if p and p not in sys.path]
        sys.path[1:1] = added
