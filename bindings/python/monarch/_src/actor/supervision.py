"""Supervision for Python: ``MeshFailure``, ``Actor.__supervise__`` and the
unhandled-fault hook (see docs/supervision.md for the semantics, which live
in libmonarch).

* A failure of a mesh owned by an actor arrives in that actor's proc as a
  supervise event (``server``); the actor's ``__supervise__(self,
  failure)`` (sync or async) decides: truthy = handled; falsy (or no
  ``__supervise__``) = escalate; raising = escalate with the exception as the
  new failure's cause. Escalating fails the actor, and its own owner gets a
  new ``MeshFailure`` whose ``caused_by`` is the first.
* A failure of a mesh owned by the program itself (a controller's main code)
  is pulled by a daemon thread ("monarch-supervision") and handed to
  ``unhandled_fault_hook(failure)`` of this module, looked up at call time
  so a program may replace it (as ``monarch.actor.unhandled_fault_hook``,
  which reads and writes it). The default prints the report and exits the
  process with status 1. It fires once per failure.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from ..._lib import ERR_STOPPED, ERR_TIMEOUT, ffi, lib, runtime
from .context import task_context
from .event_loop import run_coroutine

# FailureCause values (core/schema/monarch.fbs), by name.
CAUSES = {
    0: "exit_code",
    1: "signal",
    2: "endpoint_error",
    3: "heartbeat_lost",
    4: "undeliverable",
    5: "connection_lost",
    6: "supervisor_failed",
    7: "spawn_failed",
}


class MeshFailure:
    """A failure of (part of) a mesh, delivered to its owner.

    ``mesh_name``: the mesh's name (a proc mesh is named ``procs.<n>``);
    ``ranks``: the failed ranks; ``cause``: one of ``exit_code``,
    ``signal``, ``endpoint_error``, ``heartbeat_lost``, ``undeliverable``,
    ``connection_lost``, ``supervisor_failed``; ``code``: the exit code or
    signal number; ``actor``: key of the failed actor ("" when a whole proc
    failed); ``proc``: its proc's address; ``exception``: the remote
    exception when it could be transported; ``caused_by``: the failure that
    caused this one (a supervisor that did not handle it), or None.
    ``report()`` is a readable description including the chain."""

    __slots__ = ("mesh_name", "ranks", "cause", "code", "actor", "proc", "_report", "exception", "caused_by", "id")

    def __init__(
        self,
        mesh_name: str,
        ranks: Iterable[int],
        cause: str,
        code: int = 0,
        actor: str = "",
        proc: str = "",
        report: str = "",
        exception: BaseException | None = None,
        caused_by: MeshFailure | None = None,
        id: int = 0,
    ) -> None:
        self.mesh_name = mesh_name
        self.ranks = list(ranks)
        self.cause = cause
        self.code = code
        self.actor = actor
        self.proc = proc
        self._report = report
        self.exception = exception
        self.caused_by = caused_by
        self.id = id

    @property
    def mesh(self) -> str:
        return self.mesh_name

    def report(self) -> str:
        text = self._report
        if self.caused_by is not None:
            text += "\ncaused by: " + self.caused_by.report()
        return text

    def __str__(self) -> str:
        return self.report()

    def __repr__(self) -> str:
        return f"MeshFailure(mesh={self.mesh_name!r}, ranks={self.ranks}, cause={self.cause!r})"

    @classmethod
    def _from_fb(cls, ev) -> MeshFailure:
        def s(v):
            return v.decode("utf-8", "replace") if v else ""

        exc = None
        if not ev.PayloadIsNone() and ev.PayloadLength():
            try:
                exc = pickle.loads(bytes(ev.Payload(j) for j in range(ev.PayloadLength())))
            except Exception:  # noqa: BLE001 - class unknown here, or not a pickle
                exc = None
            if not isinstance(exc, BaseException):
                exc = None
        cb = ev.CausedBy()
        return cls(
            s(ev.Mesh()),
            [ev.Ranks(i) for i in range(ev.RanksLength())],
            CAUSES.get(ev.Cause(), "unknown"),
            ev.Code(),
            s(ev.Actor()),
            s(ev.Proc()),
            s(ev.Report()),
            exc,
            cls._from_fb(cb) if cb is not None else None,
            ev.Id(),
        )

    @classmethod
    def _decode(cls, data: bytes) -> MeshFailure:
        return cls._from_fb(_schema().GetRootAs(data, 0))


_event_schema = None


def _schema():
    """The SupervisionEvent flatbuffer class. Imported by ``ensure_watcher``
    before this process's first spawn (events only reach the process that
    spawned the failed mesh), not when a failure arrives: by then the
    process may have no descriptor left to open a module with. Not at
    module load: the flatbuffers package imports numpy when it is
    installed, which would slow every proc's start."""
    global _event_schema
    if _event_schema is None:
        from ...schema.SupervisionEvent import SupervisionEvent

        _event_schema = SupervisionEvent
    return _event_schema


def default_unhandled_fault_hook(failure: MeshFailure) -> None:
    """Report the failure on stderr and exit this process with status 1."""
    try:
        sys.stderr.write(f"monarch: unhandled failure, exiting: {failure.report()}\n")
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        os._exit(1)


#: Called with a ``MeshFailure`` for each failure that reached this
#: process's top level unhandled (a mesh the program spawned itself failed,
#: or an actor owning one did not handle its failure). Replace it (through
#: ``monarch.actor.unhandled_fault_hook``) to decide what happens; the
#: default reports the failure and exits with status 1.
unhandled_fault_hook: Callable[[MeshFailure], Any] = default_unhandled_fault_hook


def _report_hook_error(failure, exc):
    sys.stderr.write(
        f"monarch: unhandled_fault_hook raised for {failure!r}:\n"
        + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    )


_watcher = None
_watcher_lock = threading.Lock()


def ensure_watcher() -> None:
    """Before a spawn: load the event schema and start the thread that
    hands this process's top-level failures to the unhandled-fault hook
    (once)."""
    global _watcher
    if _watcher is not None:
        return
    with _watcher_lock:
        if _watcher is not None:
            return
        _schema()
        rt = runtime()
        t = threading.Thread(target=_watch, args=(rt,), name="monarch-supervision", daemon=True)
        t.start()
        _watcher = t


def _watch(rt) -> None:
    out = ffi.new("uint8_t **")
    n = ffi.new("size_t *")
    while True:
        st = lib.monarch_supervision_next(rt, -1, out, n)
        if st == ERR_TIMEOUT:
            continue
        if st:
            # Stopped (runtime freed), or the handle is gone.
            if st != ERR_STOPPED:
                pass
            return
        try:
            data = bytes(ffi.buffer(out[0], n[0]))
        finally:
            lib.monarch_buffer_free(out[0], n[0])
        try:
            _deliver(data)
        except BaseException as exc:  # noqa: BLE001 - one event must not kill the watcher
            sys.stderr.write(
                "monarch: a supervision event could not be handled; skipped:\n"
                + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            )


def _deliver(data: bytes) -> None:
    """Hand one top-level supervision event to the unhandled-fault hook."""
    failure = MeshFailure._decode(data)
    try:
        unhandled_fault_hook(failure)
    except BaseException as exc:  # noqa: BLE001 - reported with the failure it was for
        _report_hook_error(failure, exc)


def claim_spawn_owner() -> None:
    """Before a spawn from an async endpoint (running on the proc's event
    loop thread, not the thread that took its event): tell libmonarch which
    actor owns what is spawned next. Synchronous code needs nothing: the
    runtime knows the actor whose event the thread is handling."""
    tc = task_context.get(None)
    if tc is not None and tc[1] is not None:
        lib.monarch_runtime_set_owner(runtime(), tc[1].key)


def run_supervise(instance: Any, failure: MeshFailure) -> tuple[bool, BaseException | None]:
    """Call ``instance.__supervise__(failure)``: (handled, exception)."""
    sup = getattr(instance, "__supervise__", None)
    if sup is None:
        return False, None
    try:
        r = sup(failure)
        if hasattr(r, "__await__"):
            r = run_coroutine(r)
        return bool(r), None
    except Exception as exc:  # noqa: BLE001 - becomes the new failure's cause
        return False, exc
