"""Running a bench against another build of libmonarch (A/B runs): the
environment that makes a controller, its procs and `monarch host` use the
library and binary in one directory."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lib_env(env: dict, lib_dir: str | None) -> tuple[dict, str]:
    """`env` set up to use DIR/libmonarch.so, DIR/monarch.h and DIR/monarch
    (the installed build when `lib_dir` is None); and the `monarch` binary."""
    env = dict(env)
    if lib_dir is None:
        from monarch.actor import monarch_binary

        return env, monarch_binary()
    lib = Path(lib_dir).resolve()
    # The source tree's package, which loads MONARCH_LIB (the installed one
    # would load its own copy of the library).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "bindings" / "python"), env.get("PYTHONPATH")]))
    env["MONARCH_LIB"] = str(lib / "libmonarch.so")
    env["MONARCH_HEADER"] = str(lib / "monarch.h")
    env["MONARCH_BIN"] = str(lib / "monarch")
    return env, str(lib / "monarch")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status(pid: int, key: str) -> int:
    """A number of /proc/PID/status, e.g. `Threads`, `VmRSS` (kB)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0
