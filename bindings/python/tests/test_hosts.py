"""Host meshes from Python: two real `monarch host` agents on 127.0.0.1,
attached with monarch.job.HostListJob; procs across them, slicing, logs
streamed back with rank prefixes and aggregation, host loss."""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from actors import HostProbe

from monarch.actor import ActorError, HostMesh, monarch_binary
from monarch.job import HostListJob, job_secret


class Agent:
    def __init__(self, secret, listen="127.0.0.1:0", env=None):
        # The agent's own log goes to a file that teardown prints, so that a
        # failing test shows what the agent saw (pytest's capture of the
        # fixture's setup would swallow it).
        self.log = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(
            [monarch_binary(), "host", "--listen", listen],
            env={
                **os.environ,
                "MONARCH_JOB_TOKEN": secret,
                "MONARCH_LOG": os.environ.get("MONARCH_LOG", "info"),
                **(env or {}),
            },
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        line = self.p.stdout.readline()
        assert line.startswith("MONARCH_HOST_READY "), line
        self.addr = line.split()[1]

    def stop(self, sig=signal.SIGTERM):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()


@pytest.fixture
def agents():
    secret = job_secret()
    made = [Agent(secret), Agent(secret)]
    yield made
    for a in made:
        code = a.stop()
        a.log.seek(0)
        print(f"--- agent {a.addr} (exit {code}) log:\n{a.log.read()}")
        a.log.close()


def test_host_list_job_spawns_across_agents_and_slices(agents):
    hosts = HostListJob([a.addr for a in agents]).host_mesh()
    assert hosts.extent == {"hosts": 2}
    pm = hosts.spawn_procs(per_host={"gpus": 2})
    assert pm.extent == {"hosts": 2, "gpus": 2}
    am = pm.spawn("probe", HostProbe)
    got = am.whoami.call().get(timeout=60)
    ranks = [v[0] for _, v in got.items()]
    assert ranks == [0, 1, 2, 3]
    assert all(v[2].startswith("tcp:127.0.0.1:") for _, v in got.items())
    assert len({v[1] for _, v in got.items()}) == 4
    pids = [v[1] for _, v in got.items()]
    assert [v[1] for _, v in am.slice(hosts=1).whoami.call().get(timeout=60).items()] == pids[2:]
    # A sliced host mesh spawns on its hosts only.
    one = hosts.slice(hosts=0)
    assert one.extent == {}
    pm1 = one.spawn_procs(per_host={"gpus": 1})
    assert pm1.extent == {"gpus": 1}
    pm1.stop().get(timeout=60)
    pm.stop().get(timeout=60)


def test_monarch_hosts_env(agents, monkeypatch):
    monkeypatch.setenv("MONARCH_HOSTS", ",".join(a.addr for a in agents))
    assert HostListJob().host_mesh().extent == {"hosts": 2}
    monkeypatch.delenv("MONARCH_HOSTS")
    with pytest.raises(ValueError):
        HostListJob()


def test_logs_come_back_with_rank_prefix_and_aggregate(agents, capfd):
    hosts = HostMesh.attach([a.addr for a in agents])
    pm = hosts.spawn_procs(per_host={"gpus": 2})
    try:
        am = pm.spawn("probe", HostProbe)
        pm.logging_option(stream_to_client=True, aggregate_window_sec=None)
        am.slice(hosts=1, gpus=0).say.call_one("only-rank-two").get(timeout=60)
        deadline = time.time() + 30
        out = ""
        while "only-rank-two" not in out and time.time() < deadline:
            time.sleep(0.05)
            out += capfd.readouterr().out
        assert "[rank 2] only-rank-two" in out, out
        pm.logging_option(stream_to_client=True, aggregate_window_sec=1.0)
        am.say.call("same line everywhere").get(timeout=60)
        deadline = time.time() + 30
        out = ""
        while "same line everywhere" not in out and time.time() < deadline:
            time.sleep(0.05)
            out += capfd.readouterr().out
        assert "[4 similar lines, ranks 0-3] same line everywhere" in out, out
    finally:
        pm.logging_option(stream_to_client=True, aggregate_window_sec=None)
        pm.stop().get(timeout=60)


def _threads(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def _wait_for_lines(capfd, lines):
    deadline = time.time() + 60
    out = ""
    while not all(line in out for line in lines) and time.time() < deadline:
        time.sleep(0.05)
        out += capfd.readouterr().out
    return out


def test_an_agent_reads_its_procs_output_without_a_thread_per_proc(agents, capfd):
    # The agent reads every proc's stdout and stderr on one thread: eight
    # more procs, each printing, cost it no thread per pipe (16).
    hosts = HostMesh.attach([a.addr for a in agents]).slice(hosts=0)
    pid = agents[0].p.pid
    first = hosts.spawn_procs(per_host={"gpus": 1})
    more = None
    try:
        first.spawn("probe", HostProbe).say.call("first proc speaks").get(timeout=60)
        assert "first proc speaks" in _wait_for_lines(capfd, ["first proc speaks"])
        before = _threads(pid)
        more = hosts.spawn_procs(per_host={"gpus": 8})
        am = more.spawn("probe", HostProbe)
        for rank in range(8):
            am.slice(gpus=rank).say.call_one(f"line of proc {rank}").get(timeout=60)
        out = _wait_for_lines(capfd, [f"line of proc {r}" for r in range(8)])
        assert all(f"[rank {r}] line of proc {r}" in out for r in range(8)), out
        assert _threads(pid) - before < 8, (before, _threads(pid))
    finally:
        first.stop().get(timeout=60)
        if more is not None:
            more.stop().get(timeout=60)


def test_local_procs_output_is_read_without_a_thread_per_proc(capfd):
    # The controller reads its local procs' stdout and stderr on one
    # thread: eight more procs, each printing, add no thread per pipe (16).
    from monarch.actor import this_host

    first = this_host().spawn_procs(per_host={"gpus": 1})
    more = None
    try:
        first.spawn("probe", HostProbe).say.call_one("warm").get(timeout=60)
        _wait_for_lines(capfd, ["warm"])
        before = _threads(os.getpid())
        more = this_host().spawn_procs(per_host={"gpus": 8})
        am = more.spawn("probe", HostProbe)
        for rank in range(8):
            am.slice(gpus=rank).say.call_one(f"local line {rank}").get(timeout=60)
        out = _wait_for_lines(capfd, [f"local line {r}" for r in range(8)])
        assert all(f"[rank {r}] local line {r}" in out for r in range(8)), out
        assert _threads(os.getpid()) - before < 8, (before, _threads(os.getpid()))
    finally:
        first.stop().get(timeout=60)
        if more is not None:
            more.stop().get(timeout=60)


def test_losing_an_agent_fails_only_its_ranks(agents, monkeypatch):
    import monarch.actor

    failures = []
    monkeypatch.setattr(monarch.actor, "unhandled_fault_hook", failures.append)
    hosts = HostMesh.attach([a.addr for a in agents])
    pm = hosts.spawn_procs(per_host={"gpus": 2})
    am = pm.spawn("probe", HostProbe)
    got = [v for _, v in am.whoami.call().get(timeout=60).items()]
    pids = [v[1] for v in got]
    agents[1].stop(signal.SIGKILL)
    # Supervision: one failure per lost rank, naming the lost host.
    deadline = time.time() + 60
    while len([f for f in failures if f.proc in (got[2][2], got[3][2])]) < 2 and time.time() < deadline:
        time.sleep(0.05)
    mine = [f for f in failures if f.proc in {v[2] for v in got}]
    assert sorted(r for f in mine for r in f.ranks) == [2, 3], mine
    assert all(f.cause == "connection_lost" and "host" in f.report() for f in mine), mine
    with pytest.raises(ActorError):
        am.whoami.call().get(timeout=60)
    ok = am.slice(hosts=0).whoami.call().get(timeout=60)
    assert [v[1] for _, v in ok.items()] == pids[:2]
    with pytest.raises(ActorError):
        am.slice(hosts=1).whoami.call().get(timeout=60)
    pm.slice(hosts=0).stop().get(timeout=60)


def test_remote_proc_listeners_refuse_unauthenticated_clients(agents):
    """A proc started by an agent listens on TCP: a client without the
    secret gets nothing and delivers nothing; calls keep working."""
    hosts = HostMesh.attach([a.addr for a in agents])
    pm = hosts.spawn_procs(per_host={"gpus": 1})
    try:
        am = pm.spawn("probe", HostProbe)
        got = [v for _, v in am.whoami.call().get(timeout=60).items()]
        host, port = got[0][2].removeprefix("tcp:").rsplit(":", 1)
        # Garbage, and a hello (magic, a SPAKE2 side-A message, an empty
        # identity) followed by a garbage proof.
        hello = b"MONARCH\x02" + b"A" + b"\0" * 32 + b"\0\0"
        for junk in (b"GET / HTTP/1.0\r\n\r\n", hello + b"\xff" * 200):
            with socket.create_connection((host, int(port)), timeout=20) as c:
                try:
                    c.sendall(junk)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # it may hang up before we finish: fine
                data = b""
                while True:
                    try:
                        chunk = c.recv(4096)
                    except ConnectionResetError:
                        break
                    if not chunk:
                        break
                    data += chunk
                # Without the secret the proc says nothing but its own
                # hello (magic, blinded key, identity) and REFUSED (0).
                assert not data or (data.startswith(b"MONARCH\x02") and data[-1:] == b"\0"), data
        again = [v for _, v in am.whoami.call().get(timeout=60).items()]
        assert [g[1] for g in again] == [g[1] for g in got]
    finally:
        pm.stop().get(timeout=60)


@pytest.mark.parametrize("end", ["stopped", "killed"])
def test_an_agent_on_a_port_a_stopped_proc_used_is_a_new_peer(agents, end):
    """Ports are reused: a new agent listening where a proc of an earlier
    (stopped) mesh listened is that new agent to the controller, not the
    dead proc; and procs spawned on it are watched as new procs."""
    hosts = HostMesh.attach([agents[0].addr])
    pm = hosts.spawn_procs(per_host={"gpus": 1})
    am = pm.spawn("probe", HostProbe)
    [(_, pid, addr)] = [v for _, v in am.whoami.call().get(timeout=60).items()]
    if end == "killed":
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ActorError):
            am.whoami.call().get(timeout=60)
    pm.stop().get(timeout=60)
    port = addr.rsplit(":", 1)[1]
    # The proc's listener is closed once it exited; nothing else here binds
    # to a fixed port, so the new agent gets it.
    again = Agent(job_secret(), listen=f"127.0.0.1:{port}")
    agents.append(again)
    assert again.addr == f"127.0.0.1:{port}"
    pm2 = HostMesh.attach([again.addr]).spawn_procs(per_host={"gpus": 1})
    try:
        am2 = pm2.spawn("probe", HostProbe)
        assert [v[1] for _, v in am2.whoami.call().get(timeout=60).items()] != [pid]
    finally:
        pm2.stop().get(timeout=60)


CHATTY_CONTROLLER = """
    import sys, time
    from actors import Chatty
    from monarch.actor import HostMesh

    pm = HostMesh.attach([sys.argv[1]]).spawn_procs(per_host={"gpus": 1})
    pm.spawn("chatty", Chatty).chatter.call("chatty line").get(timeout=60)
    time.sleep(600)
"""


def _chatty_lines(path):
    text = path.read_text()
    text = text[: text.rfind("\n") + 1]  # not a line still being written
    return [int(m) for m in re.findall(r"^\[rank 0\] chatty line (\d+)$", text, re.M)]


def test_a_stopped_controller_holds_up_only_its_own_procs_output(capfd, tmp_path):
    """One agent, two controllers. The first one's proc prints without end,
    and the controller stops reading (SIGSTOP). The agent still answers the
    second controller, whose procs' output still streams; the stopped
    one's proc waits on its full pipe and, once its controller resumes,
    every line arrives, none dropped. (The agent's TCP timeout is long, so
    the stopped controller is not declared lost meanwhile.)"""
    agent = Agent(job_secret(), env={"MONARCH_TCP_TIMEOUT_MS": "600000"})
    out_path = tmp_path / "chatty.out"
    env = dict(os.environ, MONARCH_JOB_TOKEN=job_secret())
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), *sys.path])
    with open(out_path, "w") as out:
        chatty = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(CHATTY_CONTROLLER), agent.addr],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    pm = None
    try:
        deadline = time.time() + 60
        while len(_chatty_lines(out_path)) < 1000:
            assert chatty.poll() is None and time.time() < deadline, out_path.read_text()[-2000:]
            time.sleep(0.1)
        chatty.send_signal(signal.SIGSTOP)
        time.sleep(1)  # the agent's socket to it fills up
        pm = HostMesh.attach([agent.addr]).spawn_procs(per_host={"gpus": 1})
        am = pm.spawn("probe", HostProbe)
        am.say.call("the other controller's proc speaks").get(timeout=60)
        assert "[rank 0] the other controller's proc speaks" in _wait_for_lines(
            capfd, ["the other controller's proc speaks"]
        )
        held = len(_chatty_lines(out_path))
        chatty.send_signal(signal.SIGCONT)
        deadline = time.time() + 60
        while len(_chatty_lines(out_path)) < held + 10000:
            assert time.time() < deadline, "the resumed controller gets no more lines"
            time.sleep(0.1)
    finally:
        chatty.send_signal(signal.SIGCONT)
        chatty.kill()
        chatty.wait()
        if pm is not None:
            pm.stop().get(timeout=60)
        agent.stop()
        agent.log.close()
    got = _chatty_lines(out_path)
    assert got == list(range(len(got))), "lines were lost or reordered"


def test_local_proc_output_gets_rank_prefix(capfd):
    from monarch.actor import this_host

    pm = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        am = pm.spawn("probe", HostProbe)
        am.slice(gpus=1).say.call_one("local-line-from-one").get(timeout=60)
        deadline = time.time() + 30
        out = ""
        while "local-line-from-one" not in out and time.time() < deadline:
            time.sleep(0.05)
            out += capfd.readouterr().out
        assert "[rank 1] local-line-from-one" in out, out
    finally:
        pm.stop().get(timeout=60)
