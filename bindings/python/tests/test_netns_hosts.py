"""Three hosts simulated with network namespaces: each namespace has its
own IP on a veth pair whose other end sits on a bridge in the test's
namespace (where the controller runs), and runs a real `monarch host`
agent. The controller spawns {hosts: 3, gpus: 2}, calls and slices, then
cuts one host's link and sees exactly that host's ranks fail while the
others keep answering.

Needs root and iproute2 (`ip`); skipped otherwise (CI runs as root).
Namespaces, links and processes are removed even when the test fails.
"""

import os
import shutil
import signal
import subprocess
import time

import pytest
from actors import HostProbe

from monarch.actor import ActorError, monarch_binary
from monarch.job import HostListJob, job_secret

IP = shutil.which("ip")
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or IP is None, reason="needs root and iproute2 (ip) for network namespaces"
)


def sh(*args, check=True):
    return subprocess.run([IP, *args], check=check, capture_output=True, text=True)


class Net:
    """A bridge plus `n` namespaces, each linked to it by a veth pair."""

    def __init__(self, n):
        tag = f"{os.getpid() % 100000}"
        self.subnet = f"10.213.{os.getpid() % 250}"
        self.bridge = f"mnb{tag}"
        self.ns = [f"monarch-t{tag}-h{i}" for i in range(n)]
        self.outer = [f"mnv{tag}h{i}" for i in range(n)]
        self.ips = [f"{self.subnet}.{i + 2}" for i in range(n)]
        self.agents = []
        try:
            sh("link", "add", self.bridge, "type", "bridge")
            sh("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
            sh("link", "set", self.bridge, "up")
            for ns, outer, ip in zip(self.ns, self.outer, self.ips):
                inner = outer + "i"
                sh("netns", "add", ns)
                sh("link", "add", outer, "type", "veth", "peer", "name", inner)
                sh("link", "set", inner, "netns", ns)
                sh("link", "set", outer, "master", self.bridge)
                sh("link", "set", outer, "up")
                sh("-n", ns, "addr", "add", f"{ip}/24", "dev", inner)
                sh("-n", ns, "link", "set", inner, "up")
                sh("-n", ns, "link", "set", "lo", "up")
        except Exception:
            self.close()
            raise

    def cut(self, i):
        sh("link", "set", self.outer[i], "down")

    def close(self):
        for p in self.agents:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.agents:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for ns in self.ns:
            # Anything still running in the namespace goes with it.
            pids = sh("netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("netns", "del", ns, check=False)
        for outer in self.outer:
            sh("link", "del", outer, check=False)
        sh("link", "del", self.bridge, check=False)


@pytest.fixture
def net3(monkeypatch):
    # A cut link is noticed by the kernel within this (TCP user timeout and
    # keepalive), on the controller's side and on the agents'.
    monkeypatch.setenv("MONARCH_TCP_TIMEOUT_MS", "3000")
    net = Net(3)
    try:
        yield net
    finally:
        net.close()


def test_three_namespaced_hosts_calls_slices_and_a_cut_link(net3, monkeypatch):
    import monarch.actor

    failures = []
    monkeypatch.setattr(monarch.actor, "unhandled_fault_hook", failures.append)
    env = {**os.environ, "MONARCH_JOB_TOKEN": job_secret(), "MONARCH_TCP_TIMEOUT_MS": "3000"}
    addrs = []
    for ns, ip in zip(net3.ns, net3.ips):
        p = subprocess.Popen(
            [IP, "netns", "exec", ns, monarch_binary(), "host", "--listen", f"{ip}:0"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        net3.agents.append(p)
        line = p.stdout.readline()
        assert line.startswith("MONARCH_HOST_READY "), line
        addr = line.split()[1]
        assert addr.startswith(ip + ":"), line
        addrs.append(addr)

    hosts = HostListJob(addrs).host_mesh()
    assert hosts.extent == {"hosts": 3}
    pm = hosts.spawn_procs(per_host={"gpus": 2})
    assert pm.extent == {"hosts": 3, "gpus": 2}
    am = pm.spawn("probe", HostProbe)

    got = [v for _, v in am.whoami.call().get(timeout=120).items()]
    assert [g[0] for g in got] == list(range(6))
    pids = [g[1] for g in got]
    # Each proc listens on its own host's address.
    for rank, (_, _, addr) in enumerate(got):
        assert addr.startswith(f"tcp:{net3.ips[rank // 2]}:"), (rank, addr)

    # Slices address the right procs.
    assert [v[1] for _, v in am.slice(hosts=1).whoami.call().get(timeout=60).items()] == pids[2:4]
    assert [v[1] for _, v in am.slice(gpus=1).whoami.call().get(timeout=60).items()] == pids[1::2]
    assert am.slice(hosts=2, gpus=0).whoami.call_one().get(timeout=60)[1] == pids[4]

    # Cut host 2 off the network: its ranks (4, 5) fail, the rest answer.
    net3.cut(2)
    t0 = time.monotonic()
    with pytest.raises(ActorError) as ei:
        am.whoami.call().get(timeout=120)
    failed = sorted(r if isinstance(r, int) else r.rank for r, _, _ in ei.value.failures)
    assert failed == [4, 5], ei.value
    print(f"cut link: ranks 4, 5 failed after {time.monotonic() - t0:.1f} s")
    assert time.monotonic() - t0 < 120
    # Supervision: a failure for each rank of host 2, none for the others.
    deadline = time.monotonic() + 60
    cut = {got[4][2], got[5][2]}
    while len([f for f in failures if f.proc in cut]) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    mine = [f for f in failures if f.proc in {g[2] for g in got}]
    assert sorted(r for f in mine for r in f.ranks) == [4, 5], mine
    assert all(f.cause in ("connection_lost", "heartbeat_lost") for f in mine), mine
    ok = am.slice(hosts=slice(0, 2)).whoami.call().get(timeout=60)
    assert [v[1] for _, v in ok.items()] == pids[:4]
    with pytest.raises(ActorError):
        am.slice(hosts=2).whoami.call().get(timeout=120)
    pm.slice(hosts=slice(0, 2)).stop().get(timeout=60)
