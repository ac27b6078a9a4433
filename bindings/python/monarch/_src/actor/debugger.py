"""Remote pdb in worker procs: ``breakpoint()`` and ``pdb.set_trace()`` in
an endpoint pause that actor (its proc's other actors go on, each on its
own thread) and open a session with the job's debug registry, which the
root controller's runtime keeps (the protocol is in libmonarch,
``core/src/debug_protocol.rs``; ``monarch debug`` is the client).

The debugger's output is sent with each read of its next input line; the
actor's thread waits in that read until a client types a line. With
``MONARCH_DEBUG_POSTMORTEM=1`` an endpoint that raises opens a post-mortem
session on its traceback before the caller gets the error.
"""

from __future__ import annotations

import os
import pdb
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from .actor_mesh import _rebuild_actor_mesh
from .context import ActorInstance, context
from .endpoint import ANY_ENDPOINT

ENV_REF = "MONARCH_DEBUG_REF"
ENV_POSTMORTEM = "MONARCH_DEBUG_POSTMORTEM"
ENV_TERMINAL = "MONARCH_DEBUG_TERMINAL"

_lock = threading.Lock()
_registry = None
_terminal_watched = False


def _registry_mesh():
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


def _call(method: str, *parts: str) -> list[str]:
    """A request to the registry; its reply's parts as text."""
    r = _registry_mesh().endpoint(method).call_one(*(p.encode("utf-8", "replace") for p in parts)).get()
    if r is None:
        return []
    if isinstance(r, tuple):
        return [bytes(p).decode("utf-8", "replace") for p in r]
    return [bytes(r).decode("utf-8", "replace")]


class _Session:
    """One open session of this actor with the registry."""

    def __init__(self, hosted: Any = None) -> None:
        self.id: str | None = None
        self.pending: list[str] = []  # output not sent yet
        self._hosted = hosted

    def open(self) -> None:
        inst = ActorInstance(self._hosted) if self._hosted is not None else context().actor_instance
        point = inst.rank
        coords = ",".join(f"{k}={point[k]}" for k in point)
        name = inst.name if inst._hosted is not None else "proc-" + os.environ.get("MONARCH_PROC_RANK", "?")
        (self.id,) = _call("open", name, str(point.rank), coords, socket.gethostname(), str(os.getpid()))

    def read(self, location: str) -> str:
        if self.id is None:
            self.open()
        out, self.pending = "".join(self.pending), []
        (line,) = _call("read", self.id, out, location)
        return line

    def close(self) -> None:
        if self.id is None:
            return
        out, self.pending = "".join(self.pending), []
        sid, self.id = self.id, None
        _call("close", sid, out)


class _Output:
    """The debugger's stdout: kept until its next read."""

    def __init__(self, session: _Session) -> None:
        self._s = session

    def write(self, s: str) -> int:
        self._s.pending.append(s)
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class _Input:
    """The debugger's stdin: each line comes from the registry."""

    def __init__(self, debugger: RemotePdb) -> None:
        self._d = debugger

    def readline(self) -> str:
        d = self._d
        f = d.curframe
        where = f"{f.f_code.co_filename}:{f.f_lineno} ({f.f_code.co_name})" if f is not None else ""
        try:
            return d.session.read(where) + "\n"
        except Exception as e:  # noqa: BLE001 - the registry is gone: run on
            sys.stderr.write(f"monarch: debug session lost ({e}); the actor continues\n")
            d.session.id = None
            return "continue\n"


class RemotePdb(pdb.Pdb):
    """pdb whose terminal is a session with the job's debug registry."""

    def __init__(self, hosted: Any = None) -> None:
        self.session = _Session(hosted)
        super().__init__(stdin=_Input(self), stdout=_Output(self.session), nosigint=True)
        self.use_rawinput = False
        self.prompt = "(Pdb) "

    def do_clear(self, arg: str) -> Any:
        # Without arguments pdb asks for confirmation on the real stdin.
        if not arg:
            self.clear_all_breaks()
            return None
        return super().do_clear(arg)

    def set_continue(self) -> None:
        super().set_continue()
        self._end()

    def set_quit(self) -> None:
        super().set_quit()
        self._end()

    def _end(self) -> None:
        try:
            self.session.close()
        except Exception as e:  # noqa: BLE001 - the actor runs on anyway
            sys.stderr.write(f"monarch: could not close the debug session: {e}\n")


def breakpointhook(*args: Any, **kwargs: Any) -> None:
    """``sys.breakpointhook`` of a worker proc (``pdb.set_trace`` too)."""
    frame = sys._getframe(1)
    if _registry_mesh() is None:
        sys.stderr.write("monarch: breakpoint() ignored: this proc has no debug registry\n")
        return
    RemotePdb().set_trace(frame)


def _set_trace(*, header: str | None = None) -> None:
    if _registry_mesh() is None:
        sys.stderr.write("monarch: pdb.set_trace() ignored: this proc has no debug registry\n")
        return
    d = RemotePdb()
    if header is not None:
        d.message(header)
    d.set_trace(sys._getframe(1))


def post_mortem_enabled() -> bool:
    return os.environ.get(ENV_POSTMORTEM, "") not in ("", "0") and ENV_REF in os.environ


def post_mortem(exc: BaseException, hosted: Any) -> None:
    """A debug session of actor ``hosted`` on the traceback of ``exc`` (it
    ends when the user continues or quits)."""
    d = RemotePdb(hosted)
    d.message(f"Post-mortem debugging of {type(exc).__name__}: {exc}")
    d.reset()
    try:
        d.interaction(None, exc.__traceback__)
    except Exception as e:  # noqa: BLE001 - the caller gets the endpoint's error anyway
        sys.stderr.write(f"monarch: post-mortem session failed: {e}\n")
    d._end()


def install() -> None:
    """Route ``breakpoint()`` and ``pdb.set_trace()`` of this worker proc
    to the job's debugger (unless PYTHONBREAKPOINT says otherwise)."""
    if ENV_REF not in os.environ:
        return
    if "PYTHONBREAKPOINT" not in os.environ:
        sys.breakpointhook = breakpointhook
    pdb.set_trace = _set_trace


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
    while True:
        try:
            if subprocess.run(argv, check=False).returncode != 0:
                return
        except OSError:
            return
