"""TLS from Python needs only environment variables: a Python controller
(a subprocess, so its environment is set before its runtime starts) with
MONARCH_TLS_CERT/KEY/CA attaches two real `monarch host --tls-*` agents on
127.0.0.1, spawns procs across them and calls them; the same controller
without TLS is refused. Certificates come from scripts/gen-test-certs.sh
(openssl). The same across two network namespaces (own IPs on veth
pairs; root + iproute2), with casts forwarded between the hosts' procs."""

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from monarch.actor import monarch_binary

GEN = Path(__file__).resolve().parents[3] / "scripts" / "gen-test-certs.sh"
TLS_VARS = ("MONARCH_TLS_CERT", "MONARCH_TLS_KEY", "MONARCH_TLS_CA")

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for test certificates")

CONTROLLER = """
import sys
from monarch.actor import Actor, endpoint
from monarch.job import HostListJob

class Where(Actor):
    @endpoint
    def rank(self, payload):
        from monarch.actor import current_rank
        return current_rank().rank, len(payload)

    @endpoint
    def addr(self):
        import os
        return os.environ["MONARCH_PROC_ADDR"]

hosts = HostListJob(sys.argv[1:]).host_mesh()
pm = hosts.spawn_procs(per_host={"gpus": 2})
am = pm.spawn("where", Where)
got = am.rank.call(b"x" * 1_000_000).get(timeout=60)
print("GOT", sorted(v for _, v in got.items()), flush=True)
print("ADDRS", " ".join(v for _, v in am.addr.call().get(timeout=60).items()), flush=True)
pm.stop().get(timeout=60)
"""


def start_agent(certs, name, secret, prefix=(), listen="127.0.0.1:0"):
    p = subprocess.Popen(
        [
            *prefix,
            monarch_binary(),
            "host",
            "--listen",
            listen,
            "--tls-cert",
            str(certs / f"{name}.pem"),
            "--tls-key",
            str(certs / f"{name}.key"),
            "--tls-ca",
            str(certs / "ca.pem"),
        ],
        env={k: v for k, v in os.environ.items() if k not in TLS_VARS}
        | {"MONARCH_JOB_TOKEN": secret, "MONARCH_CAST_FANOUT": "2"},
        stdout=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    assert line.startswith("MONARCH_HOST_READY "), line
    return p, line.split()[1]


def run_controller(addrs, env):
    return subprocess.run(
        [sys.executable, "-c", CONTROLLER, *addrs],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def controller_envs(certs, secret):
    base = {k: v for k, v in os.environ.items() if k not in TLS_VARS}
    base |= {"MONARCH_JOB_TOKEN": secret, "MONARCH_CAST_FANOUT": "2"}
    tls = base | {
        "MONARCH_TLS_CERT": str(certs / "controller.pem"),
        "MONARCH_TLS_KEY": str(certs / "controller.key"),
        "MONARCH_TLS_CA": str(certs / "ca.pem"),
    }
    return base, tls


def stop_agents(agents):
    for p, _ in agents:
        if p.poll() is None:
            p.terminate()
    for p, _ in agents:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_python_controller_over_mutual_tls(tmp_path):
    subprocess.run([str(GEN), str(tmp_path), "controller", "agent0", "agent1"], check=True)
    secret = secrets.token_hex(16)
    agents = []
    try:
        for name in ("agent0", "agent1"):
            agents.append(start_agent(tmp_path, name, secret))
        addrs = [a for _, a in agents]
        base, tls = controller_envs(tmp_path, secret)
        r = run_controller(addrs, tls)
        assert r.returncode == 0, r.stderr
        assert "GOT [(0, 1000000), (1, 1000000), (2, 1000000), (3, 1000000)]" in r.stdout, r.stdout
        # Without TLS the same controller cannot attach (the agents refuse
        # plain TCP and say so); the agents serve on.
        r = run_controller(addrs, base)
        assert r.returncode != 0
        assert "TLS" in r.stderr, r.stderr
        assert all(p.poll() is None for p, _ in agents)
        r = run_controller(addrs, tls)
        assert r.returncode == 0, r.stderr
    finally:
        stop_agents(agents)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (ip) for network namespaces"
)
def test_tls_across_namespaced_hosts(tmp_path):
    from test_netns_hosts import IP, Net

    subprocess.run([str(GEN), str(tmp_path), "controller", "agent0", "agent1"], check=True)
    secret = secrets.token_hex(16)
    net = Net(2)
    agents = []
    try:
        for i, (ns, ip) in enumerate(zip(net.ns, net.ips)):
            agents.append(start_agent(tmp_path, f"agent{i}", secret, [IP, "netns", "exec", ns], f"{ip}:0"))
            net.agents.append(agents[-1][0])
        addrs = [a for _, a in agents]
        base, tls = controller_envs(tmp_path, secret)
        r = run_controller(addrs, tls)
        assert r.returncode == 0, r.stderr
        assert "GOT [(0, 1000000), (1, 1000000), (2, 1000000), (3, 1000000)]" in r.stdout, r.stdout
        # Each proc listens on its own host's IP (so links between the two
        # hosts' procs cross the veth pairs, inside TLS).
        procs = r.stdout.split("ADDRS ", 1)[1].split()
        assert [p.rsplit(":", 1)[0] for p in procs] == [f"tcp:{net.ips[k // 2]}" for k in range(4)], procs
        r = run_controller(addrs, base)
        assert r.returncode != 0
        assert "TLS" in r.stderr, r.stderr
    finally:
        net.close()
