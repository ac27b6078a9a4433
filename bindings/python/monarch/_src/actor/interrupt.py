"""Ctrl-C in a controller that hosts actors: SIGINT raises
KeyboardInterrupt in the main thread (as Python's own handler does) and in
every thread blocked in ``Future.get()``, such as the threads of the
actors spawned on ``this_proc()``, so no wait is left behind. Python runs
signal handlers in the main thread only; a blocked ``get()`` waits in short
slices and checks ``count`` between them (see ``future``).

Installed when the process starts serving actors of its own, from the main
thread, and only while SIGINT has Python's default handler (a program's own
handler is left alone)."""

from __future__ import annotations

import signal
import threading

#: How many SIGINTs this handler has seen.
count = 0
_installed = False


def _on_sigint(signum, frame):
    global count
    count += 1
    raise KeyboardInterrupt


def install() -> None:
    """Handle SIGINT as above (once; a no-op off the main thread)."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    signal.signal(signal.SIGINT, _on_sigint)
    _installed = True
