"""Run a program with a terminal (a pty) as its stdout and stderr, for
tests of what is printed only on terminals."""

import os
import pty
import select
import subprocess
import time


def run_on_a_terminal(cmd, env, timeout=120.0):
    """Run ``cmd`` with stdout and stderr on one pty; (exit status, what it
    printed, decoded). ``timeout`` only turns a hang into a failure."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer of the pty closed it
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return rc, out.decode(errors="replace")
