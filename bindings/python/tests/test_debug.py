"""Remote debugging end to end: a controller (debug_prog.py) whose actors
stop in breakpoint() runs in a tmux pane, `monarch debug` in another (or
on the controller's own terminal), keys are sent with `tmux send-keys` and
the screen is read with `tmux capture-pane`. Real procs, no mocks; every
wait is bounded."""

import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from monarch._src.actor.host_mesh import monarch_binary

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "debug_prog.py")
WAIT_S = 120

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (make test installs it)")


class Tmux:
    """A private tmux server (its own socket) with one window per program."""

    def __init__(self) -> None:
        self.sock = f"monarch-test-{os.getpid()}-{secrets.token_hex(4)}"

    def tmux(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"tmux {args}: {r.stderr}"
        return r.stdout

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Run ``argv`` in a new window ``name``; the window stays after it
        exits, showing ``EXIT=<status>``."""
        cmd = " ".join(shlex.quote(a) for a in argv)
        if env:
            cmd = "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + cmd
        shell = f"{cmd}; echo EXIT=$?; exec sleep {WAIT_S * 3}"
        if name == "first":
            self.tmux("new-session", "-d", "-s", "t", "-n", name, "-x", "200", "-y", "50", shell)
        else:
            self.tmux("new-window", "-d", "-t", "t", "-n", name, shell)

    def screen(self, name: str) -> str:
        """The window's text (and history), without the blank lines below
        the last one written: offsets into it stay valid as it grows."""
        return self.tmux("capture-pane", "-p", "-J", "-S", "-2000", "-t", f"t:{name}").rstrip()

    def send(self, name: str, line: str) -> None:
        self.tmux("send-keys", "-t", f"t:{name}", "-l", line)
        self.tmux("send-keys", "-t", f"t:{name}", "Enter")

    def wait(self, name: str, text: str, count: int = 1, after: int = 0) -> str:
        """Wait until ``text`` is on the screen ``count`` times after the
        screen's first ``after`` characters; the screen."""
        deadline = time.monotonic() + WAIT_S
        while True:
            s = self.screen(name)
            if s[after:].count(text) >= count:
                return s
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} (x{count}) not on the screen of {name} in {WAIT_S}s:\n{s}")
            time.sleep(0.1)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def tmux():
    t = Tmux()
    yield t
    t.kill()


def controller_pid(t: Tmux, name: str) -> str:
    m = re.search(r"^PID (\d+)$", t.wait(name, "PID "), re.M)
    assert m, t.screen(name)
    return m.group(1)


def program(mode: str) -> list[str]:
    return [sys.executable, PROG, mode]


def test_monarch_debug_lists_attaches_casts_and_continues(tmux):
    tmux.start("first", program("pause"), {"MONARCH_DEBUG_TERMINAL": "0"})
    pid = controller_pid(tmux, "first")
    # Both ranks stop; their neighbour actor still answers meanwhile.
    tmux.wait("first", "stopped in the debugger", count=2)
    tmux.wait("first", "other says pong")

    # The job secret is checked: a client holding another one is refused.
    env = {**os.environ, "MONARCH_JOB_TOKEN": secrets.token_hex(32)}
    r = subprocess.run(
        [monarch_binary(), "debug", "--controller", pid], env=env, capture_output=True, text=True, timeout=WAIT_S
    )
    assert r.returncode == 1, r
    assert "cannot reach the controller" in r.stderr, r.stderr

    tmux.start("dbg", [monarch_binary(), "debug", "--controller", pid])
    tmux.wait("dbg", "monarch_dbg>")
    tmux.send("dbg", "list")
    s = tmux.wait("dbg", "debug_prog.py:23 (step)", count=2)
    rows = [line.split() for line in s.splitlines() if "debug_prog.py:23" in line]
    assert sorted((r[1], r[2], r[3], r[-1]) for r in rows) == [
        ("trainer", "0", "gpus=0", "waiting"),
        ("trainer", "1", "gpus=1", "waiting"),
    ], s

    n = len(tmux.screen("dbg"))
    tmux.send("dbg", "attach trainer 1")
    tmux.wait("dbg", "-> return y + 1", after=n)
    tmux.send("dbg", "p (x, y)")
    tmux.wait("dbg", "(3, 30)", after=n)
    tmux.send("dbg", "detach")
    tmux.wait("dbg", "Detached from debug session", after=n)

    n = len(tmux.screen("dbg"))
    tmux.send("dbg", "cast ranks(0..1) p y + 7")
    s = tmux.wait("dbg", "monarch_dbg>", after=n + 1)
    assert "[trainer 0] 37" in s[n:] and "[trainer 1] 37" in s[n:], s[n:]
    n = len(tmux.screen("dbg"))
    tmux.send("dbg", "cast trainer ranks(1:2) where")
    s = tmux.wait("dbg", "monarch_dbg>", after=n + 1)
    assert "[trainer 1] > " in s[n:] and "[trainer 0]" not in s[n:], s[n:]

    tmux.send("dbg", "continue")
    tmux.wait("dbg", "Continued 2 session(s)")
    s = tmux.wait("first", "EXIT=")
    assert "result [31, 31]" in s and "DONE" in s and "EXIT=0" in s, s

    # The client notices that the controller is gone.
    tmux.send("dbg", "list")
    s = tmux.wait("dbg", "EXIT=")
    assert "The controller has exited." in s and "EXIT=0" in s, s


def test_the_controller_terminal_attaches_to_set_trace(tmux):
    tmux.start("first", program("one"))
    s = tmux.wait("first", "monarch_dbg>")
    assert "MONARCH DEBUGGER" in s and "debug_prog.py:29 (step_set_trace)" in s, s
    n = len(s)
    tmux.send("first", "attach trainer 0")
    tmux.wait("first", "(Pdb)", after=n)
    tmux.send("first", "y = 1000")
    # The program ends once its actor runs on (the client may or may not
    # see the session end before its controller exits).
    tmux.send("first", "continue")
    s = tmux.wait("first", "EXIT=")
    assert "result 1002" in s and "DONE" in s and "EXIT=0" in s, s


def test_post_mortem_on_an_endpoint_exception(tmux):
    tmux.start("first", program("postmortem"), {"MONARCH_DEBUG_POSTMORTEM": "1"})
    s = tmux.wait("first", "monarch_dbg>")
    n = len(s)
    tmux.send("first", "attach trainer 0")
    s = tmux.wait("first", "(Pdb)", after=n)
    assert "Post-mortem debugging of ValueError: boom" in s[n:], s[n:]
    tmux.send("first", "p secret")
    tmux.wait("first", "42", after=n)
    # The program ends once its actor runs on (the client may or may not
    # see the session end before its controller exits).
    tmux.send("first", "continue")
    s = tmux.wait("first", "EXIT=")
    assert re.search(r"caught \w+ True", s) and "DONE" in s and "EXIT=0" in s, s


def test_breakpoint_in_a_proc_of_a_host_agent_reaches_the_controller():
    """A proc started by a host agent (over TCP) stops in breakpoint(); a
    `monarch debug --wait` client of this test's own controller sees it,
    casts a command to it and continues it. No terminal: the client reads
    its commands from a pipe."""
    from debug_prog import Trainer
    from test_hosts import Agent

    from monarch.job import HostListJob, job_secret

    agent = Agent(job_secret())
    try:
        pm = HostListJob([agent.addr]).host_mesh().spawn_procs(per_host={"gpus": 1})
        trainer = pm.spawn("remote_trainer", Trainer)
        fut = trainer.step.call_one(5)
        r = subprocess.run(
            [monarch_binary(), "debug", "--controller", str(os.getpid()), "--wait"],
            input="cast remote_trainer ranks(0) p (x, y)\ncontinue\n",
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )
        assert r.returncode == 0, r
        assert "[remote_trainer 0] (5, 50)" in r.stdout, r.stdout
        assert "Continued 1 session(s)" in r.stdout, r.stdout
        assert fut.get(timeout=WAIT_S) == 51
        pm.stop().get(timeout=WAIT_S)
    finally:
        agent.stop()
        agent.log.close()


def test_a_session_ends_with_its_proc():
    """Stopping a proc whose actor waits in pdb ends its session (the
    caller's call fails as for any stopped proc)."""
    from debug_prog import Trainer

    from monarch._lib import MonarchError
    from monarch.actor import ActorError, this_host

    pm = this_host().spawn_procs(per_host={"gpus": 1})
    fut = pm.spawn("doomed", Trainer).step.call_one(1)
    client = [monarch_binary(), "debug", "--controller", str(os.getpid())]
    r = subprocess.run(client + ["--wait"], input="quit\n", capture_output=True, text=True, timeout=WAIT_S)
    assert r.returncode == 0 and re.search(r"doomed\s+0\s+gpus=0", r.stdout), r
    pm.stop().get(timeout=WAIT_S)
    with pytest.raises((ActorError, MonarchError)):
        fut.get(timeout=WAIT_S)
    # The controller hears of the proc's exit on its own thread: look again
    # until the session is gone.
    deadline = time.monotonic() + WAIT_S
    while True:
        r = subprocess.run(client, input="list\n", capture_output=True, text=True, timeout=WAIT_S)
        if "no debug sessions" in r.stdout:
            break
        assert time.monotonic() < deadline, r.stdout
        time.sleep(0.1)
