"""Procs forked from the warm template (the zygote): what they inherit
(environment, working directory, identity, descriptors), that a crash of a
forked proc is a supervision failure, that killing the template fails its
procs and a later spawn starts another, and that killing the controller
leaves nothing behind. Deadlines only turn hangs into failures."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from pids import alive, wait_gone
from zygote_actors import Inherited

from monarch.actor import SupervisionError, this_host

HERE = os.path.dirname(os.path.abspath(__file__))


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_forked_procs_get_the_controllers_environment_and_directory(tmp_path, monkeypatch):
    # Set after the template started: the procs must see them anyway.
    this_host()
    monkeypatch.setenv("ZYGOTE_TEST_VAR", "set-late")
    monkeypatch.chdir(tmp_path)
    pm = this_host().spawn_procs(per_host={"gpus": 3})
    try:
        reports = list(pm.spawn("inh", Inherited).report.call("ZYGOTE_TEST_VAR").get(timeout=60).values())
        zygotes = {r["ppid"] for r in reports}
        assert len(zygotes) == 1, reports
        zygote = zygotes.pop()
        assert zygote != os.getpid() and _ppid(zygote) == os.getpid()
        assert b"monarch._bootstrap" in _cmdline(zygote)
        assert sorted(r["rank"] for r in reports) == ["0", "1", "2"]
        assert len({r["pid"] for r in reports}) == 3
        # Each proc reseeded its random generator after the fork.
        assert len({r["random"] for r in reports}) == 3
        for r in reports:
            assert r["var"] == "set-late" and r["c_var"] == "set-late", r
            assert r["cwd"] == str(tmp_path) and r["sys_path0"] == str(tmp_path), r
            # The template's control socket is neither named nor open.
            assert r["zygote_fd"] is None and r["seqpacket"] == [], r
            # Ctrl-C at the terminal is the controller's business.
            assert r["sigint_ignored"], r
    finally:
        pm.stop().get(timeout=30)


def test_procs_are_exec_started_when_the_template_is_turned_off(monkeypatch):
    monkeypatch.setenv("MONARCH_USE_ZYGOTE", "0")
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        r = pm.spawn("inh", Inherited).report.call_one("X").get(timeout=60)
        assert r["ppid"] == os.getpid(), r
    finally:
        pm.stop().get(timeout=30)


def test_a_forked_proc_that_crashes_is_a_supervision_failure():
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        w = pm.spawn("inh", Inherited)
        pids = list(w.pid.call().get(timeout=60).values())
        assert _ppid(pids[1]) != os.getpid()
        os.kill(pids[1], signal.SIGSEGV)
        with pytest.raises(SupervisionError, match="SIGSEGV"):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                w.pid.call().get(timeout=30)
                time.sleep(0.05)
        assert w.slice(gpus=0).pid.call_one().get(timeout=30) == pids[0]
    finally:
        pm.stop().get(timeout=30)


def test_a_killed_template_fails_its_procs_and_another_one_starts():
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        w = pm.spawn("inh", Inherited)
        pids = list(w.pid.call().get(timeout=60).values())
        zygote = _ppid(pids[0])
        os.kill(zygote, signal.SIGKILL)
        assert wait_gone(pids, 30) == []
        with pytest.raises(SupervisionError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                w.pid.call().get(timeout=30)
                time.sleep(0.05)
    finally:
        pm.stop().get(timeout=30)
    pm2 = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        pid = pm2.spawn("inh", Inherited).pid.call_one().get(timeout=60)
        assert _ppid(pid) not in (zygote, os.getpid())
    finally:
        pm2.stop().get(timeout=30)


def test_a_killed_controller_leaves_neither_template_nor_procs():
    script = """
        import os
        import time
        from monarch.actor import this_host
        from zygote_actors import Inherited
        pm = this_host().spawn_procs(per_host={"gpus": 2})
        pids = list(pm.spawn("inh", Inherited).pid.call().get(timeout=60).values())
        with open(f"/proc/{pids[0]}/stat") as f:
            zygote = int(f.read().rsplit(")", 1)[1].split()[1])
        print(" ".join(map(str, [zygote, *pids])), flush=True)
        time.sleep(120)
        """
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([HERE, *sys.path])
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], env=e, stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in p.stdout.readline().split()]
        assert len(pids) == 3 and all(alive(x) for x in pids), pids
        assert pids[0] != p.pid
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        assert wait_gone(pids, 30) == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
