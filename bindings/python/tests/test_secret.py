"""The job secret from Python: a weak MONARCH_JOB_TOKEN is refused with a
clear error when the runtime starts, `monarch secret` prints one that is
accepted, and a controller and an agent sharing it work together. Each
case runs a fresh interpreter (the runtime reads the variable once)."""

import os
import subprocess
import sys

import pytest

from monarch.actor import monarch_binary

PROBE = "from monarch.job import job_secret; print(job_secret())"


def run_controller(token, code=PROBE):
    env = {k: v for k, v in os.environ.items() if k not in ("MONARCH_CONTROLLER", "MONARCH_JOB_TOKEN")}
    if token is not None:
        env["MONARCH_JOB_TOKEN"] = token
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def monarch_secret():
    out = subprocess.run([monarch_binary(), "secret"], capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize("weak", ["password", "correct horse battery staple", "0123456789abcdef" * 2, "x" * 200])
def test_weak_job_secret_is_refused_with_a_clear_error(weak):
    p = run_controller(weak)
    assert p.returncode != 0, p.stdout
    assert "ValueError" in p.stderr, p.stderr
    for words in ("MONARCH_JOB_TOKEN", "too weak", "monarch secret"):
        assert words in p.stderr, p.stderr


def test_monarch_secret_is_accepted_and_used():
    secret = monarch_secret()
    assert len(secret) == 64 and all(c in "0123456789abcdef" for c in secret), secret
    assert monarch_secret() != secret
    p = run_controller(secret)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == secret


def test_a_generated_secret_is_strong():
    p = run_controller(None)
    assert p.returncode == 0, p.stderr
    made = p.stdout.strip()
    assert len(made) == 64, made
    # The secret the runtime made is accepted where secrets are checked.
    assert run_controller(made).returncode == 0


def test_controller_and_agent_share_a_monarch_secret():
    secret = monarch_secret()
    env = {**os.environ, "MONARCH_JOB_TOKEN": secret}
    env.pop("MONARCH_CONTROLLER", None)
    agent = subprocess.Popen(
        [monarch_binary(), "host", "--listen", "127.0.0.1:0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = agent.stdout.readline()
        assert line.startswith("MONARCH_HOST_READY "), line
        addr = line.split()[1]
        code = (
            "from monarch.job import HostListJob\n"
            f"hosts = HostListJob([{addr!r}]).host_mesh()\n"
            "print(hosts.extent)\n"
        )
        p = run_controller(secret, code)
        assert p.returncode == 0, p.stderr
        assert "'hosts': 1" in p.stdout, p.stdout
    finally:
        agent.terminate()
        try:
            agent.wait(timeout=15)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
