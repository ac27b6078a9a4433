"""Ping and broadcast+gather latency: procs on this host (Unix sockets)
vs procs behind host agents reached over TCP — an agent on 127.0.0.1, and
two agents in network namespaces (each its own IP on a veth pair to a
bridge; needs root and iproute2, otherwise that row is skipped); each
TCP row again with mutual TLS (`monarch host --tls-*`, the controller's
MONARCH_TLS_* set; throwaway certificates from scripts/gen-test-certs.sh,
needs openssl).

Run with `make bench-hosts` (or `.venv/bin/python benches/hosts.py`).
Namespaced "hosts" share this machine's CPUs and kernel: the numbers show
the cost of the TCP path and the agent plumbing, not of a real network.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

from monarch.actor import Actor, endpoint, monarch_binary, this_host
from monarch.job import HostListJob, job_secret

IP = shutil.which("ip")
GEN_CERTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "gen-test-certs.sh")


class Bench(Actor):
    @endpoint
    def ping(self):
        return None


def measure(pm, n_ping, n_gather):
    am = pm.spawn("bench", Bench)
    am.ping.call().get()
    first = am.slice(**{k: 0 for k in pm.extent})
    lat = []
    for _ in range(n_ping):
        t = time.perf_counter()
        first.ping.call_one().get()
        lat.append(time.perf_counter() - t)
    gat = []
    for _ in range(n_gather):
        t = time.perf_counter()
        am.ping.call().get()
        gat.append(time.perf_counter() - t)
    return statistics.median(lat) * 1e6, statistics.median(gat) * 1e6


def start_agent(argv_prefix, listen, env, tls_args=()):
    p = subprocess.Popen(
        [*argv_prefix, monarch_binary(), "host", "--listen", listen, *tls_args],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    if not line.startswith("MONARCH_HOST_READY "):
        p.kill()
        raise RuntimeError(f"agent did not start: {line!r}")
    return p, line.split()[1]


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def sh(*args, check=True):
    return subprocess.run([IP, *args], check=check, capture_output=True, text=True)


def netns_setup(n):
    tag = f"{os.getpid() % 100000}"
    subnet = f"10.214.{os.getpid() % 250}"
    br, nss, outers = f"mbb{tag}", [f"monarch-b{tag}-h{i}" for i in range(n)], [f"mbv{tag}h{i}" for i in range(n)]
    ips = [f"{subnet}.{i + 2}" for i in range(n)]
    sh("link", "add", br, "type", "bridge")
    sh("addr", "add", f"{subnet}.1/24", "dev", br)
    sh("link", "set", br, "up")
    for ns, outer, ip in zip(nss, outers, ips):
        sh("netns", "add", ns)
        sh("link", "add", outer, "type", "veth", "peer", "name", outer + "i")
        sh("link", "set", outer + "i", "netns", ns)
        sh("link", "set", outer, "master", br)
        sh("link", "set", outer, "up")
        sh("-n", ns, "addr", "add", f"{ip}/24", "dev", outer + "i")
        sh("-n", ns, "link", "set", outer + "i", "up")
        sh("-n", ns, "link", "set", "lo", "up")

    def teardown():
        for ns in nss:
            for pid in sh("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("netns", "del", ns, check=False)
        for o in outers:
            sh("link", "del", o, check=False)
        sh("link", "del", br, check=False)

    return nss, ips, teardown


def agents_row(rows, name, prefixes, listens, env, args, tls_args=()):
    agents = []
    try:
        for prefix, listen in zip(prefixes, listens):
            agents.append(start_agent(prefix, listen, env, tls_args))
        pm = HostListJob([a for _, a in agents]).host_mesh().spawn_procs(per_host={"gpus": 2})
        rows.append((name, *measure(pm, args.pings, args.gathers)))
        pm.stop().get()
    finally:
        stop([p for p, _ in agents])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--gathers", type=int, default=500)
    ap.add_argument("--no-tls", action="store_true", help="skip the TLS rows")
    args = ap.parse_args()
    env = {**os.environ, "MONARCH_JOB_TOKEN": job_secret()}
    for v in ("MONARCH_TLS_CERT", "MONARCH_TLS_KEY", "MONARCH_TLS_CA"):
        env.pop(v, None)
    rows = []

    pm = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    rows.append(("this host, Unix sockets", *measure(pm, args.pings, args.gathers)))
    pm.stop().get()

    netns = os.geteuid() == 0 and IP
    tls = not args.no_tls and shutil.which("openssl")
    certs = tempfile.TemporaryDirectory(prefix="monarch-bench-tls-")
    tls_args = ()
    if tls:
        subprocess.run([GEN_CERTS, certs.name, "controller", "agent"], check=True)
        tls_args = (
            *("--tls-cert", os.path.join(certs.name, "agent.pem")),
            *("--tls-key", os.path.join(certs.name, "agent.key")),
            *("--tls-ca", os.path.join(certs.name, "ca.pem")),
        )
    for with_tls in (False, True):
        suffix = ", TCP+TLS" if with_tls else ", TCP"
        if with_tls:
            if not tls:
                rows.append(("2 agents on 127.0.0.1" + suffix, None, None))
                break
            # The controller (this process) reads its TLS configuration at
            # each new TCP connection: from here on, they are TLS. (No
            # connection is being made while we set it.)
            os.environ["MONARCH_TLS_CERT"] = os.path.join(certs.name, "controller.pem")
            os.environ["MONARCH_TLS_KEY"] = os.path.join(certs.name, "controller.key")
            os.environ["MONARCH_TLS_CA"] = os.path.join(certs.name, "ca.pem")
        agents_row(
            rows,
            "2 agents on 127.0.0.1" + suffix,
            [[], []],
            ["127.0.0.1:0"] * 2,
            env,
            args,
            tls_args if with_tls else (),
        )
        if netns:
            nss, ips, teardown = netns_setup(2)
            try:
                agents_row(
                    rows,
                    "2 namespaced hosts (veth)" + suffix,
                    [[IP, "netns", "exec", ns] for ns in nss],
                    [f"{ip}:0" for ip in ips],
                    env,
                    args,
                    tls_args if with_tls else (),
                )
            finally:
                teardown()
        else:
            rows.append(("2 namespaced hosts (veth)" + suffix, None, None))
    certs.cleanup()

    print(f"{'where (4 procs: 2 x 2)':38} {'ping median':>14} {'bcast+gather 4':>16}")
    for name, ping, gat in rows:
        if ping is None:
            why = "needs root + ip"
            if "TLS" in name and not tls:
                why = "--no-tls" if args.no_tls else "needs openssl"
            print(f"{name:38} {'skipped (' + why + ')':>31}")
        else:
            print(f"{name:38} {ping:11.1f} us {gat:13.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
