"""Running out of file descriptors while spawning procs: the error the
program gets names the cause ("Too many open files"), not only the log,
and the runtime is usable again once the limit is raised back.

The limit is lowered in a child interpreter (it is per process, and the
procs it starts inherit it), a few descriptors above what that
interpreter already holds: starting 8 procs fits (their output is not
piped, and each raises its own limit back at once), accepting their
connections does not. The cause must reach the program's exception."""

import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = textwrap.dedent(
    """
    import os, resource, sys
    import monarch.actor as ma
    from monarch.actor import Actor, endpoint, this_host

    class Echo(Actor):
        @endpoint
        def echo(self, x):
            return x

    # The procs raise their own limit back first: only this process runs
    # out.
    ROOMY = [sys.executable, "-c", (
        "import resource, runpy; "
        "h = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(h, 1024), h)); "
        "runpy.run_module('monarch._bootstrap', run_name='__main__', alter_sys=True)"
    )]
    failures = []
    ma.unhandled_fault_hook = failures.append  # the failed spawn's procs
    warm = this_host().spawn_procs(per_host={"gpus": 1})
    assert warm.spawn("warm", Echo).echo.call_one(1).get(timeout=60) == 1
    warm.stop().get(timeout=60)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (held + 3, hard))
    error = pm = None
    try:
        pm = this_host().spawn_procs(per_host={"gpus": 8}, bootstrap=ROOMY)
        pm.spawn("starved", Echo).echo.call(2).get(timeout=60)
    except Exception as e:  # noqa: BLE001 - what the program sees
        error = f"{type(e).__name__}: {e}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    print("ERROR:", repr(error), flush=True)
    if pm is not None:
        pm.stop().get(timeout=60)

    again = this_host().spawn_procs(per_host={"gpus": 2})
    values = list(again.spawn("again", Echo).echo.call(3).get(timeout=60).values())
    again.stop().get(timeout=60)
    print("AFTER:", values, flush=True)
    """
)


def test_too_many_open_files_is_named_in_the_error(tmp_path):
    script = tmp_path / "starve.py"
    script.write_text(SCRIPT)
    # Output inherited: no pipes per proc, so starting them takes no
    # descriptor for long, and accepting their connections runs out.
    env = dict(os.environ, MONARCH_SPAWN_TIMEOUT_S="30", MONARCH_PROC_OUTPUT="inherit")
    r = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=HERE,
    )
    out = r.stdout
    assert r.returncode == 0, f"exit {r.returncode}\n{out}\n{r.stderr[-4000:]}"
    error = next((line for line in out.splitlines() if line.startswith("ERROR:")), "")
    assert "Too many open files" in error, f"{error}\n{r.stderr[-4000:]}"
    assert "AFTER: [3, 3]" in out, out


WATCHER = textwrap.dedent(
    """
    import sys, threading
    import monarch.actor as ma
    from monarch._src.actor import supervision
    from monarch.actor import Actor, endpoint, this_host

    class Boom(Actor):
        def __init__(self):
            raise ValueError("constructor fails")

        @endpoint
        def ping(self):
            return "pong"

    heard = []
    got = threading.Event()
    def hook(failure):
        heard.append(failure)
        got.set()
    ma.unhandled_fault_hook = hook

    # The first event's handling raises (as an import would with no
    # descriptor left); the watcher reports it and serves the next.
    decode = supervision.MeshFailure._decode
    def broken(data):
        supervision.MeshFailure._decode = decode
        raise ImportError("no descriptor left")
    supervision.MeshFailure._decode = broken

    pm = this_host().spawn_procs(per_host={"gpus": 1})
    # Decoding events needs no file: the schema came with the first spawn.
    assert "monarch.schema.SupervisionEvent" in sys.modules
    pm.spawn("first", Boom)
    pm.spawn("second", Boom)
    assert got.wait(60), "no failure reached the hook"
    pm.stop().get(timeout=60)
    print("HEARD:", sorted(f.mesh_name for f in heard), flush=True)
    """
)


def test_supervision_watcher_survives_a_failing_event(tmp_path):
    script = tmp_path / "watcher.py"
    script.write_text(WATCHER)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=HERE)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
    assert "HEARD: ['" in r.stdout, r.stdout
    assert "could not be handled" in r.stderr and "no descriptor left" in r.stderr, r.stderr[-4000:]
