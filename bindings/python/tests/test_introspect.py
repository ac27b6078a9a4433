"""Introspection of the controller's job (monarch.introspect over
monarch_runtime_introspect) against real procs: states, hosts, pids,
per-actor counters, the handler-time histogram, the last error, and
stopping a mesh by its name."""

import os
import socket
import time
import uuid

import pytest
from introspect_actors import Probe

from monarch import introspect
from monarch.actor import ActorError, this_host


def _mine(snap, mesh_name):
    return [(p, a) for p, a in snap.actors() if a.mesh == mesh_name]


def test_snapshot_counts_messages_errors_and_time():
    name = f"probe_{uuid.uuid4().hex[:8]}"
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        probes = procs.spawn(name, Probe)
        for _ in range(5):
            probes.ping.call().get(timeout=60)
        with pytest.raises(ActorError):
            probes.slice(gpus=1).boom.call_one().get(timeout=60)

        snap = introspect.introspect(timeout=30)
        assert snap.controller == snap.procs[0].addr
        assert snap.procs[0].pid == os.getpid()
        mine = _mine(snap, name)
        assert sorted(a.rank for _, a in mine) == [0, 1]
        for p, a in mine:
            assert p.state == "ready" and p.answered
            assert p.host == socket.gethostname()
            assert p.pid > 0 and p.pid != os.getpid()
            assert a.state == "ready"
            assert a.queue_depth == 0
            assert len(a.handler_hist) == 24
            assert sum(a.handler_hist) == a.messages
            assert a.handler_ns > 0
        by_rank = {a.rank: a for _, a in mine}
        assert by_rank[0].messages == 5 and by_rank[0].errors == 0
        assert by_rank[0].last_error == ""
        assert by_rank[1].messages == 6 and by_rank[1].errors == 1
        assert "probe exploded" in by_rank[1].last_error
        meshes = {m.name: m for m in snap.meshes}
        assert meshes[name].state == "ready"
        assert meshes[name].key and len(meshes[name].procs) == 2
        proc_mesh = next(m for m in snap.meshes if m.key == "" and m.procs == meshes[name].procs)
        assert proc_mesh.state == "ready"
    finally:
        procs.stop().get(timeout=60)


def test_queue_depth_counts_a_running_handler():
    name = f"probe_{uuid.uuid4().hex[:8]}"
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        probe = procs.spawn(name, Probe)
        probe.ping.call_one().get(timeout=60)
        held = probe.hold.call_one(60.0)
        # The runtime answers introspection itself, so a busy actor is seen.
        seen = None
        deadline = time.monotonic() + 60
        while seen is None and time.monotonic() < deadline:
            snap = introspect.introspect(timeout=30)
            ((_, a),) = _mine(snap, name)
            if a.queue_depth == 1:
                seen = a
        assert seen is not None, "the held message was never counted as waiting"
        assert seen.messages == 1
        del held
    finally:
        procs.stop().get(timeout=60)


def test_stop_mesh_by_name_and_stopped_state():
    name = f"probe_{uuid.uuid4().hex[:8]}"
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        probes = procs.spawn(name, Probe)
        probes.ping.call().get(timeout=60)
        snap = introspect.introspect(timeout=30)
        addrs = {m.name: m for m in snap.meshes}[name].procs
        proc_mesh = next(m for m in snap.meshes if m.key == "" and m.procs == addrs)
        introspect.stop_mesh(proc_mesh.name)
        snap = introspect.introspect(timeout=30)
        states = {p.addr: p.state for p in snap.procs}
        assert [states[a] for a in addrs] == ["stopped", "stopped"]
        assert {m.name: m for m in snap.meshes}[proc_mesh.name].state == "stopped"
        with pytest.raises(Exception, match="no mesh named"):
            introspect.stop_mesh("no-such-mesh")
        with pytest.raises(ValueError):
            introspect.introspect(timeout=-1)
    finally:
        procs.stop().get(timeout=60)
