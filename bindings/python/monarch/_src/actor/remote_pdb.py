"""The pdb of a debug session (``RemotePdb``): its terminal is a session
with the job's debug registry (see ``debugger``). Imported only when a
worker stops in the debugger (pdb costs ~10 ms to import)."""

from __future__ import annotations

import os
import pdb
import socket
import sys
from typing import Any

from .context import ActorInstance, context


def _call(registry: Any, method: str, *parts: str) -> list[str]:
    """A request to the registry (its actor mesh); its reply's parts as text."""
    r = registry.endpoint(method).call_one(*(p.encode("utf-8", "replace") for p in parts)).get()
    if r is None:
        return []
    if isinstance(r, tuple):
        return [bytes(p).decode("utf-8", "replace") for p in r]
    return [bytes(r).decode("utf-8", "replace")]


class _Session:
    """One open session of this actor with the registry."""

    def __init__(self, registry: Any, hosted: Any = None) -> None:
        self.id: str | None = None
        self.pending: list[str] = []  # output not sent yet
        self._registry = registry
        self._hosted = hosted

    def open(self) -> None:
        inst = ActorInstance(self._hosted) if self._hosted is not None else context().actor_instance
        point = inst.rank
        coords = ",".join(f"{k}={point[k]}" for k in point)
        name = inst.name if inst._hosted is not None else "proc-" + os.environ.get("MONARCH_PROC_RANK", "?")
        host, pid = socket.gethostname(), str(os.getpid())
        (self.id,) = _call(self._registry, "open", name, str(point.rank), coords, host, pid)

    def read(self, location: str) -> str:
        if self.id is None:
            self.open()
        out, self.pending = "".join(self.pending), []
        (line,) = _call(self._registry, "read", self.id, out, location)
        return line

    def close(self) -> None:
        if self.id is None:
            return
        out, self.pending = "".join(self.pending), []
        sid, self.id = self.id, None
        _call(self._registry, "close", sid, out)


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

    def __init__(self, registry: Any, hosted: Any = None) -> None:
        self.session = _Session(registry, hosted)
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
        self.end_session()

    def set_quit(self) -> None:
        super().set_quit()
        self.end_session()

    def end_session(self) -> None:
        try:
            self.session.close()
        except Exception as e:  # noqa: BLE001 - the actor runs on anyway
            sys.stderr.write(f"monarch: could not close the debug session: {e}\n")
