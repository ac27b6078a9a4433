"""The proc's asyncio event loop, on which async endpoints (and async
``__supervise__``/``__cleanup__`` hooks) run: one loop per process, on its
own daemon thread, started on first use.

asyncio is imported on first use too: it costs tens of milliseconds, and
only actors with ``async def`` methods need it.
"""

from __future__ import annotations

import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from .context import current_frame, message_point, task_context
from .shape import Point

if TYPE_CHECKING:
    import concurrent.futures

T = TypeVar("T")

_loop = None
_loop_lock = threading.Lock()


def event_loop() -> Any:
    """The proc's asyncio loop for async endpoints, run on its own thread."""
    global _loop
    with _loop_lock:
        if _loop is None:
            import asyncio  # costly to import: see the module's doc

            loop = asyncio.new_event_loop()
            t = threading.Thread(target=loop.run_forever, name="monarch-actor-loop", daemon=True)
            t.start()
            _loop = loop
        return _loop


async def in_task(coro: Coroutine[Any, Any, T], point: Point, hosted: Any) -> T:
    """Run ``coro`` as the task of a message at ``point`` to actor ``hosted``
    (what ``current_rank()``/``context()`` see inside it)."""
    task_context.set((point, hosted))
    return await coro


class _Handoff:
    """One coroutine run on the loop for a thread that waits for it on a
    plain lock, released in the task's last step (no ``concurrent.futures``
    future chained to the task, and no done callback one loop iteration
    later: that bookkeeping cost more than a short async endpoint)."""

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
    """Run ``coro`` on the proc's event loop and wait for its result; by
    default as the task of the message this thread is handling."""
    if point is None:
        current = current_frame()
        point, hosted = message_point(current.event), current.actor
    loop = event_loop()
    h = _Handoff()
    loop.call_soon_threadsafe(loop.create_task, h.run(in_task(coro, point, hosted)))
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
