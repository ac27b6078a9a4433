"""Whether processes are alive, for tests that kill procs on purpose."""

import time


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return ") Z" not in f.read()
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait up to `timeout` seconds for `pids` to end; the ones still alive."""
    deadline = time.time() + timeout
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.02)
    return [p for p in pids if alive(p)]
