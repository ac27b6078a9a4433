"""The proc's asyncio event loop, on which async endpoints (and async
``__supervise__``/``__cleanup__`` hooks) run: one loop per process, on its
own daemon thread, started on first use.

A task's first step may run on the thread that handles its message instead
(``_start_here``): an async endpoint that ends without suspending, the
common short one, then costs no wake-up of the loop's thread and none back.
That thread holds the loop's ``busy`` lock while it runs callbacks (all of
it but its wait in ``select()``); whoever runs a first step holds it too, so
the loop's tasks still run one step at a time, as asyncio code expects.

asyncio is imported on first use too: it costs tens of milliseconds, and
only actors with ``async def`` methods need it.
"""

from __future__ import annotations

import threading
from collections.abc import Coroutine
from contextvars import Context, copy_context
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from .context import current_frame, message_point, task_context
from .shape import Point

if TYPE_CHECKING:
    import concurrent.futures

T = TypeVar("T")

_loop = None
_loop_lock = threading.Lock()
# asyncio's own, bound on first use.
_Task = _get_running_loop = _set_running_loop = None


def event_loop() -> Any:
    """The proc's asyncio loop for async endpoints, run on its own thread."""
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = _new_loop()
            ready = threading.Event()
            t = threading.Thread(target=_serve_loop, args=(loop, ready), name="monarch-actor-loop", daemon=True)
            t.start()
            # Running before anyone starts a task here (see _start_here).
            ready.wait()
            _loop = loop
        return _loop


def _new_loop() -> Any:
    """A selector event loop whose thread holds ``loop.busy`` except while
    it waits in ``select()``, and which can hand a new task's first step to
    the thread creating it (``take_step``)."""
    global _Task, _get_running_loop, _set_running_loop
    import asyncio  # costly to import: see the module's doc
    import selectors
    from asyncio import events

    _Task = asyncio.Task
    _get_running_loop, _set_running_loop = events._get_running_loop, events._set_running_loop
    busy = threading.Lock()

    class Selector(selectors.DefaultSelector):
        def select(self, timeout=None):
            busy.release()
            try:
                return super().select(timeout)
            finally:
                busy.acquire()

    class Loop(asyncio.SelectorEventLoop):
        # While set (by a thread holding ``busy``), the next call_soon is a
        # new task's first step: kept in ``first_step``, not scheduled.
        take_step = False
        first_step = None

        def call_soon(self, callback, *args, context=None):
            if self.take_step and not args:
                self.take_step = False
                self.first_step = callback
                return None
            return super().call_soon(callback, *args, context=context)

    loop = Loop(Selector())
    loop.busy = busy
    return loop


def _serve_loop(loop: Any, ready: threading.Event) -> None:
    loop.busy.acquire()
    loop.call_soon(ready.set)
    while True:
        try:
            loop.run_forever()
            return
        except (KeyboardInterrupt, SystemExit):
            # Raised by a task, which asyncio also ends with it (its waiter
            # gets it); the loop serves on for the proc's other tasks.
            pass


def _release(lock: threading.Lock, _task: Any) -> None:
    lock.release()


def _start_here(loop: Any, coro: Coroutine[Any, Any, Any], context: Context) -> tuple[Any, Any] | None:
    """Start ``coro`` as a task of ``loop`` (in ``context``) whose first step
    runs on this thread, now: (the task, None) when it ended there, (the
    task, a lock released when it ends) when it suspended and goes on on
    the loop's thread. None, with nothing done, while the loop's thread is
    running callbacks (or asyncio's debug mode, which refuses call_soon off
    that thread, is on)."""
    busy = loop.busy
    if loop._debug or not busy.acquire(False):
        return None
    try:
        ready, timers = loop._ready, loop._scheduled
        n_ready, n_timers = len(ready), len(timers)
        prev = _get_running_loop()
        _set_running_loop(loop)
        try:
            loop.take_step = True
            try:
                task = _Task(coro, loop=loop, context=context)
            finally:
                loop.take_step = False
            step, loop.first_step = loop.first_step, None
            if step is not None:
                try:
                    context.run(step)
                except (KeyboardInterrupt, SystemExit):
                    # asyncio ends the task with it and raises it again: the
                    # caller gets it from the task.
                    if not task.done():
                        raise
        finally:
            _set_running_loop(prev)
        done = None
        if not task.done():
            done = threading.Lock()
            done.acquire()
            task.add_done_callback(partial(_release, done))
        if len(ready) != n_ready or len(timers) != n_timers:
            # The step scheduled callbacks or timers: call_soon, unlike
            # call_soon_threadsafe, does not wake a loop waiting in select().
            loop._write_to_self()
    finally:
        busy.release()
    return task, done


async def in_task(coro: Coroutine[Any, Any, T], point: Point, hosted: Any) -> T:
    """Run ``coro`` as the task of a message at ``point`` to actor ``hosted``
    (what ``current_rank()``/``context()`` see inside it)."""
    task_context.set((point, hosted))
    return await coro


class _Handoff:
    """One coroutine run on the loop, while its thread is busy, for a thread
    that waits for it on a plain lock, released in the task's last step (no
    ``concurrent.futures`` future chained to the task, and no done callback
    one loop iteration later: that bookkeeping cost more than a short async
    endpoint)."""

    __slots__ = ("lock", "value", "error")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.value = None
        self.error = None

    async def run(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            self.value = await coro
        except BaseException as exc:  # noqa: BLE001 - raised in the waiter
            self.error = exc
        finally:
            self.lock.release()


def run_coroutine(coro: Coroutine[Any, Any, T], point: Point | None = None, hosted: Any = None) -> T:
    """Run ``coro`` as the task of a message at ``point`` to actor
    ``hosted`` (by default the message this thread is handling) on the
    proc's event loop, and wait for its result. Its first step runs on this
    thread unless the loop's thread is busy (see ``_start_here``)."""
    if point is None:
        current = current_frame()
        point, hosted = message_point(current.event), current.actor
    context = copy_context()
    context.run(task_context.set, (point, hosted))
    loop = _loop or event_loop()
    started = _start_here(loop, coro, context)
    if started is not None:
        task, done = started
        if done is not None:
            done.acquire()
        return task.result()
    h = _Handoff()
    loop.call_soon_threadsafe(partial(loop.create_task, h.run(coro), context=context))
    h.lock.acquire()
    if h.error is not None:
        error, h.error = h.error, None
        raise error
    return h.value


async def tracked(coro: Coroutine[Any, Any, T], tasks: set) -> T:
    """Run ``coro`` as a task listed in ``tasks`` while it runs (an actor's
    concurrent endpoint tasks, cancelled when it stops)."""
    import asyncio  # costly to import: see the module's doc

    task = asyncio.current_task()
    tasks.add(task)
    try:
        return await coro
    finally:
        tasks.discard(task)


async def cancel_tasks(tasks: set, timeout: float = 5.0) -> None:
    """Cancel the tasks in ``tasks`` and wait (up to ``timeout`` seconds)
    until they have ended. Runs on the proc's event loop, after every task
    started before it had its first step (the loop runs callbacks in
    order), so none is missed."""
    import asyncio  # costly to import: see the module's doc

    running = list(tasks)
    for t in running:
        t.cancel()
    if running:
        await asyncio.wait(running, timeout=timeout)


def start_on_loop(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start a coroutine on the proc's event loop; its future, at once."""
    import asyncio  # costly to import: see the module's doc

    return asyncio.run_coroutine_threadsafe(coro, event_loop())


def run_on_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on the proc's event loop and wait for it."""
    return start_on_loop(coro).result()
