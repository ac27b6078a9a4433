"""An actor that reports what a proc inherited: for test_zygote.py."""

import os
import random
import signal
import socket
import sys

from monarch.actor import Actor, endpoint


def _seqpacket_fds() -> list[int]:
    """This process's descriptors that are SOCK_SEQPACKET sockets (the
    zygote's control socket is one; the runtime's are stream sockets)."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if s.type == socket.SOCK_SEQPACKET:
                out.append(fd)
        finally:
            s.close()
    return out


class Inherited(Actor):
    @endpoint
    def report(self, name: str) -> dict:
        return {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "cwd": os.getcwd(),
            "sys_path0": sys.path[0],
            "var": os.environ.get(name),
            "c_var": os.getenv(name),
            "zygote_fd": os.environ.get("MONARCH_ZYGOTE_FD"),
            "rank": os.environ.get("MONARCH_PROC_RANK"),
            "random": random.random(),
            "seqpacket": _seqpacket_fds(),
            "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
        }

    @endpoint
    def pid(self) -> int:
        return os.getpid()
