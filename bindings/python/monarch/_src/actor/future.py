"""``Future``: the pending result of an operation on libmonarch.

A future owns a ``monarch_future`` handle and a ``convert`` function that
turns the ``monarch_value_mesh`` it completes with into the Python result
(see ``value_mesh``); ``ctx`` is what ``convert`` needs to know about the
call (which mesh, which endpoint). ``await`` waits on the runtime's fd in
the running asyncio loop instead of blocking it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Generator
from time import monotonic as _monotonic
from typing import Any, Generic, TypeVar

from ..._lib import ERR_TIMEOUT, check, error_for, ffi, lib, runtime
from . import interrupt
from .scratch import thread_scratch

T = TypeVar("T")

_new = ffi.new
_future_wait = lib.monarch_future_wait
_future_take = lib.monarch_future_take
_vm_free = lib.monarch_value_mesh_free


# The C wait bound meaning "forever", and the largest finite one.
_WAIT_FOREVER_MS = -1
_MAX_WAIT_MS = (1 << 63) - 1


def timeout_ms(timeout: float | None) -> int:
    """The C wait bound for ``timeout`` seconds: forever for None, ``inf``
    or a wait longer than the C bound can hold; ValueError for NaN or a
    negative value."""
    if timeout is None:
        return _WAIT_FOREVER_MS
    seconds = float(timeout)
    if seconds != seconds:
        raise ValueError("timeout must be a number of seconds, not nan")
    if seconds < 0:
        raise ValueError(f"timeout must be >= 0 seconds (or None to wait forever), not {timeout!r}")
    ms = seconds * 1000
    if ms >= _MAX_WAIT_MS:
        return _WAIT_FOREVER_MS
    return int(ms)


# The longest a blocking wait stays inside libmonarch at a time: Python runs
# signal handlers (Ctrl-C's KeyboardInterrupt) only between bytecodes of the
# main thread, so a wait returns this often to let them run.
_WAIT_SLICE_MS = 50


def _wait(fut: Any, ms: int) -> int:
    """``monarch_future_wait(fut, ms)`` (``ms`` -1: forever) in slices of at
    most ``_WAIT_SLICE_MS``, so that a signal interrupts it at once (in a
    thread other than the main one: a Ctrl-C seen by ``interrupt``)."""
    sigints = interrupt.count
    if ms < 0:
        st = _future_wait(fut, _WAIT_SLICE_MS)
        while st == ERR_TIMEOUT:
            if interrupt.count != sigints:
                raise KeyboardInterrupt
            st = _future_wait(fut, _WAIT_SLICE_MS)
        return st
    if ms <= _WAIT_SLICE_MS:
        return _future_wait(fut, ms)
    deadline = _monotonic() + ms / 1000
    st = _future_wait(fut, _WAIT_SLICE_MS)
    while st == ERR_TIMEOUT:
        if interrupt.count != sigints:
            raise KeyboardInterrupt
        left = deadline - _monotonic()
        if left <= 0:
            return st
        st = _future_wait(fut, min(int(left * 1000) + 1, _WAIT_SLICE_MS))
    return st


def convert_none(vm: Any, ctx: Any) -> None:
    """The ``convert`` of an operation without a result."""
    _vm_free(vm)
    return None


class Future(Generic[T]):
    """The pending result of an operation. ``get()`` blocks; ``await`` works
    in asyncio code."""

    __slots__ = ("_fut", "_convert", "_ctx", "_state", "_value")

    def __init__(self, fut: Any, convert: Callable[[Any, Any], T] | None, ctx: Any = None) -> None:
        self._fut = fut  # gc'd monarch_future* (or None for a ready value)
        self._convert = convert
        self._ctx = ctx
        self._state = 0  # 0 pending, 1 value, 2 exception
        self._value = None

    @classmethod
    def _ready(cls, value: T) -> Future[T]:
        f = cls(None, None)
        f._state = 1
        f._value = value
        return f

    @classmethod
    def _failed(cls, exc: BaseException) -> Future[Any]:
        f = cls(None, None)
        f._state = 2
        f._value = exc
        return f

    def get(self, timeout: float | None = None) -> T:
        """Wait for the result (up to ``timeout`` seconds; TimeoutError after
        that, and the future may be waited on again)."""
        state = self._state
        if state == 1:
            return self._value
        if state == 2:
            raise self._value
        fut = self._fut
        ms = timeout_ms(timeout)
        st = _wait(fut, ms)
        if st:
            if st == ERR_TIMEOUT:
                raise TimeoutError(f"future not complete after {timeout} s")
            raise error_for(st)
        s = thread_scratch()
        st = _future_take(fut, s.vm)
        self._fut = None
        if st:
            exc = error_for(st)
            self._state, self._value = 2, exc
            raise exc
        try:
            value = self._convert(s.vm[0], self._ctx)
        except BaseException as exc:
            self._state, self._value = 2, exc
            raise
        self._state, self._value = 1, value
        return value

    result = get

    def done(self) -> bool:
        if self._state:
            return True
        b = _new("bool *")
        check(lib.monarch_future_poll(self._fut, b))
        return bool(b[0])

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self.get(timeout)
        except TimeoutError:
            raise
        except BaseException as e:  # noqa: BLE001
            return e
        return None

    def __await__(self) -> Generator[Any, None, T]:
        return self._await().__await__()

    async def _await(self) -> T:
        # A wait of 0 ms reads the runtime's sockets on this thread, so a
        # reply already there completes the future without a hand-off to
        # the runtime's I/O thread and back through the loop's selector.
        if not self._state and _future_wait(self._fut, 0) == ERR_TIMEOUT:
            # asyncio costs tens of milliseconds to import; only code that
            # awaits needs it (and has loaded it already).
            import asyncio

            loop = asyncio.get_running_loop()
            await _fd_waiter(loop).wait(self)
        return self.get()


class _FdWaiter:
    """Wakes asyncio futures when the runtime's fd says something completed."""

    def __init__(self, loop):
        self.loop_ref = weakref.ref(loop)
        self.pending = []  # (Future, asyncio.Future)
        self.fd_out = _new("int *")
        self.fd = self._watch()
        self.registered = False

    def _watch(self) -> int:
        # Asking for the fd has the runtime read its sockets for the loop;
        # a blocking get() in between reads them itself and ends that.
        check(lib.monarch_runtime_fd(runtime(), self.fd_out))
        return self.fd_out[0]

    def wait(self, fut: Future):
        loop = self.loop_ref()
        self._watch()
        waiter = loop.create_future()
        self.pending.append((fut, waiter))
        if not self.registered:
            loop.add_reader(self.fd, self._wake)
            self.registered = True
        self._wake()
        return waiter

    def _wake(self):
        lib.monarch_runtime_clear_fd(runtime())
        still = []
        for fut, waiter in self.pending:
            if waiter.done():
                continue
            if fut.done():
                waiter.set_result(None)
            else:
                still.append((fut, waiter))
        self.pending = still
        if not still and self.registered:
            self.loop_ref().remove_reader(self.fd)
            self.registered = False


_waiters = weakref.WeakKeyDictionary()


def _fd_waiter(loop) -> _FdWaiter:
    w = _waiters.get(loop)
    if w is None:
        w = _waiters[loop] = _FdWaiter(loop)
    return w
