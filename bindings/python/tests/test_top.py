"""`monarch top` driven in tmux against a real controller and real procs:
the tree with states and counters, an actor's last error, a Python proc's
stacks, stopping a mesh, quitting. Every wait is bounded; nothing is timed."""

import os
import secrets
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from monarch.actor import monarch_binary

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    def __init__(self, cmd: str):
        self.sock = f"monarch-top-{uuid.uuid4().hex[:8]}"
        self.run("new-session", "-d", "-s", "top", "-x", "150", "-y", "40", cmd)

    def run(self, *args) -> str:
        return subprocess.run(
            ["tmux", "-L", self.sock, *args], check=True, capture_output=True, text=True, timeout=30
        ).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "top")

    def keys(self, *keys):
        self.run("send-keys", "-t", "top", *keys)

    def wait_for(self, pred, what: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if pred(screen):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; screen:\n{screen}")

    def alive(self) -> bool:
        r = subprocess.run(["tmux", "-L", self.sock, "has-session", "-t", "top"], capture_output=True, timeout=30)
        return r.returncode == 0

    def kill(self):
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=30)


def _selected(screen: str) -> str:
    return next((line for line in screen.splitlines() if line.startswith("> ") or "> " in line[:3]), "")


def _select(tmux: Tmux, label: str) -> str:
    """Move the selection down (from the top) to the row naming `label`."""
    for _ in range(8):
        tmux.keys("Up")
    for _ in range(40):
        screen = tmux.screen()
        if label in _selected(screen):
            return screen
        before = _selected(screen)
        tmux.keys("Down")
        tmux.wait_for(lambda s, b=before: _selected(s) != b, "the selection to move", 30)
    raise AssertionError(f"no row {label!r}:\n{tmux.screen()}")


@pytest.fixture
def controller(request):
    name = f"probe_{uuid.uuid4().hex[:6]}"
    hold = getattr(request, "param", "")
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("MONARCH_JOB_TOKEN", None)
    p = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "top_controller.py"), name, hold],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not line.startswith("CONTROLLER "):
            line = p.stdout.readline()
            if not line and p.poll() is not None:
                break
        assert line.startswith("CONTROLLER "), f"controller did not start (exit {p.poll()})"
        yield line.split()[1], name
    finally:
        try:
            p.stdin.close()
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=30)


@pytest.mark.parametrize("controller", ["hold"], indirect=True)
def test_top_shows_the_tree_errors_stacks_and_stops_a_mesh(controller):
    addr, name = controller
    env = "env -u MONARCH_JOB_TOKEN -u MONARCH_CONTROLLER"
    tmux = Tmux(f"{env} {monarch_binary()} top --controller {addr} --interval 0.5")
    try:
        screen = tmux.wait_for(lambda s: f"{name}[0]" in s and f"{name}[1]" in s, "both actors in the tree")
        assert "host " in screen and "controller pid" in screen
        row1 = next(line for line in screen.splitlines() if f"{name}[1]" in line)
        # messages 4 (3 pings, 1 boom), errors 1, queue 0
        assert row1.split()[1:5] == ["ready", "4", "1", "0"], row1
        row0 = next(line for line in screen.splitlines() if f"{name}[0]" in line)
        # 3 pings answered, the held message waiting
        assert row0.split()[1:5] == ["ready", "3", "0", "1"], row0

        _select(tmux, f"{name}[1]")
        tmux.keys("e")
        tmux.wait_for(lambda s: "probe exploded" in s, "the last error")
        tmux.keys("Escape")
        tmux.wait_for(lambda s: "probe exploded" not in s, "the popup to close")

        # The proc row of rank 0 (the row above its actor) holds the message.
        screen = _select(tmux, f"{name}[0]")
        tmux.keys("Up")
        tmux.wait_for(lambda s: "pid" in _selected(s), "the proc row")
        tmux.keys("s")
        screen = tmux.wait_for(lambda s: "in hold" in s, "the stacks of rank 0")
        assert "most recent call first" in screen
        tmux.keys("Escape")
        tmux.wait_for(lambda s: "in hold" not in s, "the popup to close")

        tmux.keys("x")
        screen = tmux.wait_for(lambda s: "Stop mesh procs." in s, "the stop question")
        mesh = screen.split("Stop mesh ")[1].split("?")[0]
        tmux.keys("y")
        tmux.wait_for(lambda s: f"{mesh} stopped" in s, "the proc mesh stopped", 90)

        tmux.keys("q")
        deadline = time.monotonic() + 30
        while tmux.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not tmux.alive(), "monarch top did not quit on q"
    finally:
        tmux.kill()


def test_top_once_prints_the_tree(controller):
    addr, name = controller
    env = dict(os.environ)
    env.pop("MONARCH_JOB_TOKEN", None)
    r = subprocess.run(
        [monarch_binary(), "top", "--controller", addr, "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert f"{name}[0]" in r.stdout and f"{name}[1]" in r.stdout
    assert "meshes: " in r.stdout


def test_top_refuses_a_wrong_secret(controller):
    addr, _ = controller
    env = dict(os.environ, MONARCH_JOB_TOKEN=secrets.token_hex(32))
    r = subprocess.run(
        [monarch_binary(), "top", "--controller", addr, "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 1
    assert "authenticat" in r.stderr
