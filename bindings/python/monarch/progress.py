"""``monarch.progress``: the progress of this process's long operations
(procs starting, a SLURM allocation waiting in the queue, large RDMA
transfers) as events, the same updates that draw the status line on the
controller's terminal (docs/tracing.md, "Progress").

    from monarch import progress

    progress.watch()
    mesh = this_host().spawn_procs(per_host={"gpus": 128})
    while (ev := progress.next_event(timeout=1.0)) is not None:
        print(ev.text)                  # e.g. "procs ready 37/128 (2.1s)"

``Progress`` reports an operation of the program's own, shown and sent like
the runtime's.
"""

from __future__ import annotations

from typing import NamedTuple

from ._lib import ERR_TIMEOUT, check, ffi, lib, take_buffer

__all__ = ["KINDS", "Progress", "ProgressEvent", "next_event", "watch"]

# ProgressKind values (core/schema/monarch.fbs), by number.
KINDS = {1: "procs_ready", 2: "slurm_allocation", 3: "rdma_transfer", 4: "tensor_fetch"}
_KIND_NUMBERS = {name: n for n, name in KINDS.items()}


class ProgressEvent(NamedTuple):
    """One update of an operation; its last one has ``finished`` set."""

    id: int
    kind: str
    label: str
    done: int
    total: int
    failed: int
    state: str
    elapsed: float
    finished: bool
    text: str


def watch(enable: bool = True) -> None:
    """Start (or stop) keeping progress events for ``next_event``; stopping
    drops those not taken."""
    check(lib.monarch_progress_watch(bool(enable)), "progress watch")


def next_event(timeout: float | None = None) -> ProgressEvent | None:
    """The next progress event, waiting up to ``timeout`` seconds (None:
    forever); None when none came."""
    ms = -1 if timeout is None else max(0, int(timeout * 1000))
    out = ffi.new("uint8_t **")
    n = ffi.new("size_t *")
    st = lib.monarch_progress_next(ms, out, n)
    if st == ERR_TIMEOUT:
        return None
    check(st, "progress event")
    return _decode(take_buffer(out[0], n[0]))


def _decode(data: bytes) -> ProgressEvent:
    # Imported here: the flatbuffers package imports numpy.
    from .schema.ProgressEvent import ProgressEvent as Fb

    ev = Fb.GetRootAs(data, 0)
    return ProgressEvent(
        id=ev.Id(),
        kind=KINDS.get(ev.Kind(), "unknown"),
        label=(ev.Label() or b"").decode(),
        done=ev.Done(),
        total=ev.Total(),
        failed=ev.Failed(),
        state=(ev.State() or b"").decode(),
        elapsed=ev.ElapsedUs() / 1e6,
        finished=bool(ev.Finished()),
        text=(ev.Text() or b"").decode(),
    )


class Progress:
    """An operation of the program's own (``kind``: a name of ``KINDS``),
    e.g. ``with Progress("tensor_fetch", "fetch weights", nbytes) as p:
    ... p.set(done)``. Finished when the block ends (or by ``finish()``)."""

    def __init__(self, kind: str, label: str, total: int = 0):
        if kind not in _KIND_NUMBERS:
            raise ValueError(f"unknown progress kind {kind!r}: one of {', '.join(_KIND_NUMBERS)}")
        out = ffi.new("monarch_progress **")
        check(lib.monarch_progress_begin(_KIND_NUMBERS[kind], label.encode(), int(total), out), "progress")
        self._h = out[0]

    def set(self, done: int, total: int = 0) -> None:
        """How much is done (and, when not 0, how much there is in all)."""
        if self._h is None:
            raise ValueError("this progress is finished")
        check(lib.monarch_progress_set(self._h, int(done), int(total)), "progress")

    def finish(self) -> None:
        if self._h is not None:
            h, self._h = self._h, None
            check(lib.monarch_progress_free(h), "progress")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.finish()
