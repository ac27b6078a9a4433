"""TLS from Python needs only environment variables: a Python controller
(a subprocess, so its environment is set before its runtime starts) with
MONARCH_TLS_CERT/KEY/CA attaches two real `monarch host --tls-*` agents on
127.0.0.1, spawns procs across them and calls them; the same controller
without TLS is refused. Certificates come from scripts/gen-test-certs.sh
(openssl)."""

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

hosts = HostListJob(sys.argv[1:]).host_mesh()
pm = hosts.spawn_procs(per_host={"gpus": 2})
am = pm.spawn("where", Where)
got = am.rank.call(b"x" * 1_000_000).get(timeout=60)
print("GOT", sorted(v for _, v in got.items()), flush=True)
pm.stop().get(timeout=60)
"""


def start_agent(certs, name, secret):
    p = subprocess.Popen(
        [
            monarch_binary(),
            "host",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            str(certs / f"{name}.pem"),
            "--tls-key",
            str(certs / f"{name}.key"),
            "--tls-ca",
            str(certs / "ca.pem"),
        ],
        env={k: v for k, v in os.environ.items() if k not in TLS_VARS} | {"MONARCH_JOB_TOKEN": secret},
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


def test_python_controller_over_mutual_tls(tmp_path):
    subprocess.run([str(GEN), str(tmp_path), "controller", "agent0", "agent1"], check=True)
    secret = secrets.token_hex(16)
    agents = []
    try:
        for name in ("agent0", "agent1"):
            agents.append(start_agent(tmp_path, name, secret))
        addrs = [a for _, a in agents]
        base = {k: v for k, v in os.environ.items() if k not in TLS_VARS} | {"MONARCH_JOB_TOKEN": secret}
        tls = base | {
            "MONARCH_TLS_CERT": str(tmp_path / "controller.pem"),
            "MONARCH_TLS_KEY": str(tmp_path / "controller.key"),
            "MONARCH_TLS_CA": str(tmp_path / "ca.pem"),
        }
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
        for p, _ in agents:
            p.terminate()
        for p, _ in agents:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
