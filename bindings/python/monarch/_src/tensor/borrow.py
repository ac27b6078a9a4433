"""Borrows: a distributed tensor lent to another stream without a copy
(``Stream.borrow``), and the access rights that keep the lender and the
borrower from racing on the shared memory.

At the controller, every distributed tensor whose memory is lent, borrowed,
viewed or dropped has a ``Storage``: the tensor and its views (results of ops
whose meta result shares the memory of an argument) share it. Its
``access`` says what ops may do with the memory: ``"rw"`` (anything),
``"r"`` (read only: while a borrow that is not ``mutable`` is live, for the
lender and the borrower alike), ``""`` (nothing: the lender while it is
borrowed ``mutable``, or a borrowed tensor after ``drop``). An op that
breaks them raises ``BorrowError`` when it is issued (upstream raises
``TypeError``, which Python turns into "unsupported operand" for ``t + 1``
and the like, losing the message).

On the workers a borrow is ordering only (``TensorWorker``): the lender's
stream hands its value to the borrowed id when it reaches the borrow (so
the borrower sees every op issued on the lender before it), and at
``drop`` the lender's stream waits until the borrower's stream ran every op
issued on it before the drop (so ops issued on the lender afterwards see
what the borrower did).
"""

from __future__ import annotations

import itertools
import traceback
import warnings
import weakref
from typing import Any

# Storages whose access is not "rw"; an op checks its arguments only while
# there is one (the common case costs one truth test per op).
restricted: weakref.WeakSet = weakref.WeakSet()

_ids = itertools.count(1)


class Storage:
    """The access rights of one tensor's memory and of its views."""

    __slots__ = ("access", "own", "lent", "tensors", "dropped_at", "__weakref__")

    def __init__(self, own: str = "rw") -> None:
        self.access = own
        # What is allowed once no borrow of it is live: "rw", or what the
        # borrow that made it allows.
        self.own = own
        self.lent: weakref.WeakSet = weakref.WeakSet()  # live borrows of it
        self.tensors: weakref.WeakSet = weakref.WeakSet()  # the DTensors over it
        self.dropped_at: str | None = None

    def set_access(self, access: str) -> None:
        self.access = access
        if access == "rw":
            restricted.discard(self)
        else:
            restricted.add(self)


class BorrowError(RuntimeError):
    """An op would use a tensor against the rights its borrows leave."""


def storage_of(t: Any) -> Storage:
    """The storage record of distributed tensor ``t`` (made on first use)."""
    s = t._storage
    if s is None:
        s = t._storage = Storage()
        s.tensors.add(t)
    return s


def share(view: Any, base: Any) -> None:
    """``view`` (a new DTensor) views the memory of ``base``."""
    s = view._storage = storage_of(base)
    s.tensors.add(view)


def drop(t: Any) -> None:
    """``t.drop()``: ``t`` and every tensor over its memory are forgotten
    on the workers now, and unusable at the controller."""
    s = storage_of(t)
    if s.dropped_at is not None:
        return
    s.dropped_at = "".join(traceback.format_stack()[:-2])
    s.set_access("")
    for x in list(s.tensors):
        x._ctl.forget(x._id)


def _name(t: Any) -> str:
    return f"tensor {t._id} (shape {tuple(t.shape)}, stream {t._stream!r})"


def _borrow_sites(s: Storage) -> str:
    return "".join(f"\n  borrowed at (most recent call last):\n{b.site}" for b in s.lent)


def check(what: str, tensors: Any, written: Any = ()) -> None:
    """Raise ``BorrowError`` when ``what`` would read one of ``tensors`` it
    may not read, or write one of ``written`` it may not write."""
    errors = []
    for t in tensors:
        s = t._storage
        if s is None:
            continue
        if s.dropped_at is not None:
            errors.append(
                f"{_name(t)} was dropped (t.drop(), or the drop of its borrow) and can no longer be used; "
                f"dropped at (most recent call last):\n{s.dropped_at}"
            )
        elif "r" not in s.access:
            errors.append(
                f"{_name(t)} cannot be used: it is borrowed mutably by another stream until "
                f"that borrow is dropped{_borrow_sites(s)}"
            )
    for t in written:
        s = t._storage
        if s is not None and s.dropped_at is None and "r" in s.access and "w" not in s.access:
            errors.append(
                f"{_name(t)} would be written, but it is read-only while it (or the tensor it "
                f"borrows) is borrowed{_borrow_sites(s) or ' (it is itself a borrow that is not mutable)'}"
            )
    if errors:
        raise BorrowError(f"invalid arguments to {what}:\n" + "\n".join(errors))


class Borrow:
    """The lease of a borrowed tensor (``Stream.borrow``): ``drop()`` (or
    leaving ``with borrow:``) ends it; the borrowed tensor and its views
    can no longer be used, and ops issued on the lender's stream after it
    run after the borrower's ops issued before it."""

    def __init__(self, t: Any, borrowed: Any, mutable: bool) -> None:
        self._id = next(_ids)
        self._ctl = t._ctl
        self._lender = storage_of(t)
        self._storage = storage_of(borrowed)
        self._origin = t._stream
        self._stream = borrowed._stream
        self._borrowed_id = borrowed._id
        self._dropped = False
        self.mutable = mutable
        self.site = "".join(traceback.format_stack()[:-3])

    def __enter__(self) -> Borrow:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.drop()

    def drop(self) -> None:
        """End the borrow (once; later calls do nothing)."""
        if self._dropped:
            return
        self._dropped = True
        ctl = self._ctl
        ctl.issue(("borrow_done", self._stream, self._id, self._borrowed_id))
        s = self._storage
        if s.dropped_at is None:
            s.dropped_at = "".join(traceback.format_stack()[:-1])
            s.set_access("")
            for x in list(s.tensors):
                if x._id != self._borrowed_id:  # forgotten by borrow_done
                    ctl.forget(x._id)
        ctl.issue(("borrow_wait", self._origin, self._id))
        lender = self._lender
        lender.lent.discard(self)
        if not lender.lent and lender.dropped_at is None:
            lender.set_access(lender.own)

    @property
    def dropped(self) -> bool:
        return self._dropped

    def __del__(self) -> None:
        if self._dropped:
            return
        warnings.warn(
            "a Borrow was garbage before borrow.drop(): dropped now, so the lender's stream waits "
            f"for the borrower's from here on; borrowed at (most recent call last):\n{self.site}",
            stacklevel=2,
        )
        try:
            self.drop()
        except Exception:  # noqa: BLE001 - the mesh may be gone already
            pass

    def __repr__(self) -> str:
        state = "dropped" if self._dropped else "live"
        return f"<Borrow {self._id} of stream {self._origin!r} by {self._stream!r}, {state}>"


def borrow(stream: Any, t: Any, mutable: bool) -> tuple[Any, Borrow]:
    """``stream.borrow(t, mutable)`` of the distributed tensor ``t``:
    ``(t on stream, its Borrow)``."""
    check(f"{stream!r}.borrow()", (t,))
    lender = storage_of(t)
    if mutable and "w" not in lender.access:
        raise BorrowError(
            f"cannot borrow {_name(t)} mutably: it (or a view of it) is borrowed already, "
            "or is itself a borrow that is not mutable"
        )
    ctl = t._ctl
    with_meta = t._meta().detach()
    r = type(t)(ctl, ctl.new_id(), (tuple(with_meta.shape), with_meta.stride(), with_meta.dtype, t._rg), stream.name)
    r._storage = Storage("rw" if mutable else "r")
    r._storage.tensors.add(r)
    if not mutable:
        r._storage.set_access("r")
    b = Borrow(t, r, mutable)
    lender.lent.add(b)
    lender.set_access("" if mutable else "r")
    # On the lender's stream, after what was issued on it before.
    ctl.issue(("borrow", t._stream, t._id, r._id))
    return r, b
