"""Remote pdb in worker procs: ``breakpoint()`` and ``pdb.set_trace()`` in
an endpoint pause that actor (its proc's other actors go on, each on its
own thread) and open a session with the job's debug registry, which the
root controller's runtime keeps (the protocol is in libmonarch,
``core/src/debug_protocol.rs``; ``monarch debug`` is the client).

The debugger's output is sent with each read of its next input line; the
actor's thread waits in that read until a client types a line. With
``MONARCH_DEBUG_POSTMORTEM=1`` an endpoint that raises opens a post-mortem
session on its traceback before the caller gets the error.

This module is what every worker imports: pdb itself, and ``RemotePdb``
(``remote_pdb``), are imported when an actor first stops. ``pdb.set_trace``
is replaced when a program first imports pdb (``_PdbImport``).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from .actor_mesh import _rebuild_actor_mesh
from .endpoint import ANY_ENDPOINT

ENV_REF = "MONARCH_DEBUG_REF"
ENV_POSTMORTEM = "MONARCH_DEBUG_POSTMORTEM"
ENV_TERMINAL = "MONARCH_DEBUG_TERMINAL"

_lock = threading.Lock()
_registry = None
_terminal_watched = False


def registry_mesh():
    """The registry's (native, one-point) actor mesh; None when this proc
    was not given one."""
    global _registry
    with _lock:
        if _registry is None:
            ref = os.environ.get(ENV_REF)
            if not ref:
                return None
            _registry = _rebuild_actor_mesh(
                bytes.fromhex(ref), ANY_ENDPOINT, "debug registry", "monarch_debug", ANY_ENDPOINT
            )
        return _registry


def breakpointhook(*args: Any, **kwargs: Any) -> None:
    """``sys.breakpointhook`` of a worker proc (``pdb.set_trace`` too)."""
    frame = sys._getframe(1)
    registry = registry_mesh()
    if registry is None:
        sys.stderr.write("monarch: breakpoint() ignored: this proc has no debug registry\n")
        return
    from .remote_pdb import RemotePdb

    RemotePdb(registry).set_trace(frame)


def _set_trace(*, header: str | None = None) -> None:
    registry = registry_mesh()
    if registry is None:
        sys.stderr.write("monarch: pdb.set_trace() ignored: this proc has no debug registry\n")
        return
    from .remote_pdb import RemotePdb

    d = RemotePdb(registry)
    if header is not None:
        d.message(header)
    d.set_trace(sys._getframe(1))


def post_mortem_enabled() -> bool:
    return os.environ.get(ENV_POSTMORTEM, "") not in ("", "0") and ENV_REF in os.environ


def post_mortem(exc: BaseException, hosted: Any) -> None:
    """A debug session of actor ``hosted`` on the traceback of ``exc`` (it
    ends when the user continues or quits). Not for pdb's own ``quit``."""
    bdb = sys.modules.get("bdb")
    if bdb is not None and isinstance(exc, bdb.BdbQuit):
        return
    from .remote_pdb import RemotePdb

    d = RemotePdb(registry_mesh(), hosted)
    d.message(f"Post-mortem debugging of {type(exc).__name__}: {exc}")
    d.reset()
    try:
        d.interaction(None, exc.__traceback__)
    except Exception as e:  # noqa: BLE001 - the caller gets the endpoint's error anyway
        sys.stderr.write(f"monarch: post-mortem session failed: {e}\n")
    d.end_session()


class _PdbImport:
    """A ``sys.meta_path`` finder that, once, lets pdb load as usual and
    then replaces its ``set_trace`` (so a worker does not import pdb unless
    its program does)."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
        if name != "pdb":
            return None
        sys.meta_path.remove(_PdbImport)
        import importlib.util

        spec = importlib.util.find_spec("pdb")
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            load(module)
            module.set_trace = _set_trace

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Route ``breakpoint()`` and ``pdb.set_trace()`` of this worker proc
    to the job's debugger (unless PYTHONBREAKPOINT says otherwise)."""
    if ENV_REF not in os.environ:
        return
    if "PYTHONBREAKPOINT" not in os.environ:
        sys.breakpointhook = breakpointhook
    pdb = sys.modules.get("pdb")
    if pdb is not None:
        pdb.set_trace = _set_trace
    else:
        sys.meta_path.insert(0, _PdbImport)


def watch_terminal(binary: Callable[[], str]) -> None:
    """In a root controller whose stdin and stdout are a terminal (unless
    ``MONARCH_DEBUG_TERMINAL=0``): a thread runs ``monarch debug --wait``
    (``binary()`` is the CLI) on that terminal, so the first breakpoint
    brings up the debugger there; after ``quit`` it waits for the next
    new session."""
    global _terminal_watched
    with _lock:
        if _terminal_watched or "MONARCH_CONTROLLER" in os.environ:
            return
        _terminal_watched = True
    if os.environ.get(ENV_TERMINAL, "") == "0":
        return
    try:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            return
        argv = [binary(), "debug", "--controller", str(os.getpid()), "--wait"]
    except (AttributeError, ValueError, OSError):
        return
    threading.Thread(target=_run_terminal_client, args=(argv,), name="monarch-debug-terminal", daemon=True).start()


def _run_terminal_client(argv: list[str]) -> None:
    # The client exits non-zero once the controller cannot be reached, or
    # by a signal (Ctrl-C reaches the whole terminal's process group).
    import subprocess

    while True:
        try:
            if subprocess.run(argv, check=False).returncode != 0:
                return
        except OSError:
            return
