"""What upstream programs use beyond calls: meshes and values that travel
(proc meshes as arguments, ValueMesh views), spawn_procs(bootstrap=...),
the public names of upstream's monarch.actor and monarch.rdma, config,
get_or_spawn_controller, logging options. Real procs throughout."""

import asyncio
import os
import shlex
import subprocess
import sys
import textwrap

import pytest

import monarch.actor as ma
from monarch.actor import ActorError, Channel, Extent, Future, Port, PortReceiver, ValueMesh, this_host

# Upstream's monarch.actor.__all__ (meta-pytorch/monarch, python/monarch/actor/__init__.py).
UPSTREAM_ACTOR_ALL = """Accumulator Actor ActorError current_actor_name as_endpoint current_rank current_size
endpoint Future local_proc_mesh Point proc_mesh ProcMesh Channel send shutdown_context sim_proc_mesh
ValueMesh debug_controller get_or_spawn_controller this_host this_proc HostMesh context
hosts_from_config Port PortReceiver Endpoint Extent run_worker_loop_forever attach_to_workers
enable_transport Context ChannelTransport unhandled_fault_hook MeshFailure config
gpu_direct_rdma_supported""".split()
# Names absent on purpose; docs/upstream.md says why for each.
ABSENT = {
    "local_proc_mesh",
    "proc_mesh",
    "sim_proc_mesh",
    "debug_controller",
    "hosts_from_config",
    "enable_transport",
    "ChannelTransport",
    "gpu_direct_rdma_supported",
}
UPSTREAM_RDMA_ALL = """get_rdma_backend is_ibverbs_available RDMABuffer RDMAAction
RDMAReadTransferWarning RDMAWriteTransferWarning""".split()


def test_every_upstream_name_is_exported_but_the_documented_absences():
    missing = [n for n in UPSTREAM_ACTOR_ALL if n not in ABSENT and not hasattr(ma, n)]
    assert not missing, missing
    not_in_all = [n for n in UPSTREAM_ACTOR_ALL if n not in ABSENT and n not in ma.__all__]
    assert not not_in_all, not_in_all
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "upstream.md")).read()
    for name in ABSENT:
        assert f"`{name}`" in doc, f"docs/upstream.md does not explain the absence of {name}"
    import monarch.rdma as mr

    assert [n for n in UPSTREAM_RDMA_ALL if n not in mr.__all__] == []


# The tensor-engine names of upstream's monarch.__all__; the absent ones are
# in docs/tensors.md ("Not done" or "Differences from upstream").
UPSTREAM_TENSOR_NAMES = """coalescing get_active_mesh no_mesh remote get_active_stream Stream Tensor
reduce reduce_ to_mesh slice_mesh call_on_shard_and_fetch fetch_shard inspect show""".split()
TENSOR_ABSENT = {"Tensor"}


def test_upstream_tensor_engine_names_are_at_the_top_of_monarch():
    pytest.importorskip("torch")
    import monarch

    missing = [n for n in UPSTREAM_TENSOR_NAMES if n not in TENSOR_ABSENT and not hasattr(monarch, n)]
    assert not missing, missing
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "tensors.md")).read()
    for name in TENSOR_ABSENT:
        assert f"`{name}`" in doc or f"`monarch.{name}`" in doc, f"docs/tensors.md does not mention {name}"


def test_generic_names_are_subscriptable_at_run_time():
    for generic in (Future[int], Port[int], PortReceiver[str], ValueMesh[float], Channel[int]):
        assert generic is not None
    assert ma.Endpoint[[int], str] is not None
    assert ma.Accumulator[[int], int, int] is not None
    assert ma.ActorMesh[ma.Actor] is not None
    port, rx = Channel[int].open()
    port.send(3)
    assert rx.recv().result(timeout=10) == 3


def test_extent_is_a_mapping_with_labels_and_sizes(procs):
    e = Extent(["hosts", "gpus"], [2, 4])
    assert (e.labels, e.sizes, e.nelements, e["gpus"]) == (["hosts", "gpus"], [2, 4], 8, 4)
    assert dict(e) == {"hosts": 2, "gpus": 4}
    assert procs.extent == {"gpus": 4} and isinstance(procs.extent, Extent)
    with pytest.raises(ValueError):
        Extent(["a"], [1, 2])


def test_value_mesh_views():
    vm = ValueMesh({"hosts": 2, "gpus": 3}, range(6))
    assert list(vm.values()) == [0, 1, 2, 3, 4, 5]
    assert [(p.rank, v) for p, v in vm] == [(i, i) for i in range(6)]
    row = vm.slice(hosts=1)
    assert row.extent == {"gpus": 3} and list(row.values()) == [3, 4, 5]
    cols = vm.slice(gpus=slice(1, 3))
    assert cols.extent == {"hosts": 2, "gpus": 2} and list(cols.values()) == [1, 2, 4, 5]
    assert vm.slice(hosts=0, gpus=2).item() == 2
    flat = vm.flatten("all")
    assert flat.extent == {"all": 6} and flat.item(all=4) == 4
    assert vm.rename(gpus="tp").item(hosts=1, tp=0) == 3
    assert vm.split(gpus=("a", "b"), b=3).extent == {"hosts": 2, "a": 1, "b": 3}
    with pytest.raises(KeyError):
        vm.slice(nope=0)
    with pytest.raises(IndexError):
        vm.slice(gpus=3)
    import pickle

    assert list(pickle.loads(pickle.dumps(cols)).values()) == [1, 2, 4, 5]


def test_a_proc_mesh_and_its_slice_travel_to_an_actor_that_spawns_on_them(procs):
    from surface_actors import Leaf, Owner

    owner_procs = this_host().spawn_procs(per_host={"o": 1})
    try:
        owner = owner_procs.spawn("owner", Owner)
        by_rank = [p for p, _ in procs.spawn("probe", Leaf).where.call().get().values()]
        assert owner.spawn_on.call_one(procs).get(timeout=60) == sorted(by_rank)
        part = procs.slice(gpus=slice(1, 3))
        assert owner.spawn_on.call_one(part).get(timeout=60) == sorted(by_rank[1:3])
        assert "only the process that spawned it" in owner.try_stop.call_one(part).get(timeout=60)
        # this_proc() travels too: the owner spawns an actor in this process.
        assert owner.spawn_on.call_one(ma.this_proc()).get(timeout=60) == [os.getpid()]
    finally:
        owner_procs.stop().get(timeout=30)


def test_spawn_procs_bootstrap_runs_in_every_proc_first():
    from surface_actors import Leaf, failing_bootstrap, set_env

    pm = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=set_env)
    try:
        leaves = pm.spawn("leaves", Leaf)
        got = leaves.env.call("SURFACE_BOOTSTRAP").get(timeout=30)
        pids = [p for p, _ in leaves.where.call().get().values()]
        assert list(got.values()) == [f"ran in {p}" for p in pids]
    finally:
        pm.stop().get(timeout=30)
    with pytest.raises(ActorError, match="bootstrap refused"):
        this_host().spawn_procs(per_host={"gpus": 1}, bootstrap=failing_bootstrap)


def test_bootstrap_command_and_python_executable():
    from surface_actors import Leaf

    cmd = ma.default_bootstrap_cmd().with_env({"SURFACE_CMD": "3"})
    assert cmd.program == sys.executable
    pm = this_host().with_python_executable(sys.executable).spawn_procs(per_host={"g": 1}, bootstrap_command=cmd)
    try:
        assert pm.spawn("l", Leaf).env.call_one("SURFACE_CMD").get(timeout=30) == "3"
    finally:
        pm.stop().get(timeout=30)


@pytest.mark.parametrize("zygote", ["1", "0"])
def test_with_python_executable_runs_the_procs_with_that_interpreter(tmp_path, monkeypatch, zygote):
    # The interpreter given is a wrapper that runs this one with an -X
    # option the procs report (forked procs keep it from their template).
    from surface_actors import Leaf

    monkeypatch.setenv("MONARCH_USE_ZYGOTE", zygote)
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -X surface_wrapper=ran "$@"\n')
    wrapper.chmod(0o755)
    meshes = []
    try:
        meshes.append(this_host().spawn_procs(per_host={"g": 1}))
        meshes.append(this_host().with_python_executable(wrapper).spawn_procs(per_host={"g": 2}))
        meshes.append(this_host().spawn_procs(per_host={"g": 1}))
        seen = [list(m.spawn("l", Leaf).xoption.call("surface_wrapper").get(timeout=60).values()) for m in meshes]
        # Each interpreter its own procs, whichever was started first.
        assert seen == [[None], ["ran", "ran"], [None]]
    finally:
        for m in meshes:
            m.stop().get(timeout=30)


def test_as_endpoint_calls_a_plain_method(procs):
    from surface_actors import Leaf

    leaves = procs.spawn("plain", Leaf)
    with pytest.raises(AttributeError, match="as_endpoint"):
        leaves.plain.call(1)
    assert list(ma.as_endpoint(leaves.plain).call(21).get(timeout=30).values()) == [42] * 4


def test_get_or_spawn_controller_is_one_actor_per_name_for_the_job():
    from surface_actors import Asker, Named

    first = ma.get_or_spawn_controller("surface_named", Named).get(timeout=30)
    assert first.hit.call_one().get(timeout=30) == (1, os.getpid())
    again = ma.get_or_spawn_controller("surface_named", Named).get(timeout=30)
    assert again.hit.call_one().get(timeout=30) == (2, os.getpid())
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        askers = pm.spawn("askers", Asker)
        hits = sorted(h for h, _ in askers.ask.call("surface_named").get(timeout=60).values())
        assert hits == [3, 4]
        # A name first asked for from a proc is spawned in the controller too.
        assert askers.slice(gpus=0).ask.call_one("surface_other").get(timeout=60) == (1, os.getpid())
    finally:
        pm.stop().get(timeout=30)


def test_logger_current_actor_name_and_logging_option(procs, capfd):
    from surface_actors import Logs

    logs = procs.spawn("logs", Logs)
    got = logs.log.call("hello from the logger").get(timeout=30)
    for point, (name, actor, rank, message) in got.items():
        # The record carries the actor and its rank; the message names them.
        assert name.startswith("logs.") and actor == name and rank == {"gpus": point["gpus"]}
        assert message == f"[{name} gpus={point['gpus']}] hello from the logger"
    # Awaitable and usable without await.
    procs.logging_option(stream_to_client=True, aggregate_window_sec=None, level=10)
    asyncio.run(_await(procs.logging_option(stream_to_client=True, level=20)))
    assert set(logs.level.call().get(timeout=30).values()) == {20}


async def _await(f):
    return await f


def test_config_configure_and_configured():
    from monarch import config

    with config.configured(host_spawn_ready_timeout="90s", tail_log_lines=5) as merged:
        assert os.environ["MONARCH_SPAWN_TIMEOUT_S"] == "90"
        assert merged["host_spawn_ready_timeout"] == "90s"
        assert config.get_runtime_config()["tail_log_lines"] == 5
    assert "MONARCH_SPAWN_TIMEOUT_S" not in os.environ
    # A value the environment had comes back after the block.
    os.environ["MONARCH_SPAWN_TIMEOUT_S"] = "77"
    try:
        with config.configured(host_spawn_ready_timeout="2m"):
            assert os.environ["MONARCH_SPAWN_TIMEOUT_S"] == "120"
        assert os.environ["MONARCH_SPAWN_TIMEOUT_S"] == "77"
    finally:
        del os.environ["MONARCH_SPAWN_TIMEOUT_S"]
    with pytest.raises(TypeError, match="no_such_setting"):
        config.configure(no_such_setting=1)
    with pytest.raises(ValueError):
        config.configure(host_spawn_ready_timeout="soon")


def test_config_configure_applies_to_this_process_and_later_procs():
    from surface_actors import Leaf

    from monarch import config

    before = {v: os.environ.get(v) for v in ("MONARCH_TCP_TIMEOUT_MS", "MONARCH_HEARTBEAT_TIMEOUT_MS")}
    try:
        config.configure(message_delivery_timeout="2m", supervision_watchdog_timeout=90, tail_log_lines=7)
        assert os.environ["MONARCH_TCP_TIMEOUT_MS"] == "120000"
        assert os.environ["MONARCH_HEARTBEAT_TIMEOUT_MS"] == "90000"
        assert config.get_runtime_config() == {
            "message_delivery_timeout": "2m",
            "supervision_watchdog_timeout": 90,
            "tail_log_lines": 7,
        }
        assert config.get_global_config()["message_delivery_timeout"] == "2m"
        # Procs spawned afterwards run with the settings.
        pm = this_host().spawn_procs(per_host={"g": 1})
        try:
            leaf = pm.spawn("configured", Leaf)
            assert leaf.env.call_one("MONARCH_TCP_TIMEOUT_MS").get(timeout=60) == "120000"
            assert leaf.env.call_one("MONARCH_HEARTBEAT_TIMEOUT_MS").get(timeout=60) == "90000"
        finally:
            pm.stop().get(timeout=30)
    finally:
        config.clear_runtime_config()
    assert {v: os.environ.get(v) for v in before} == before
    assert config.get_runtime_config() == {}


def test_rdma_names():
    import numpy

    from monarch.rdma import RDMAAction, RDMABuffer, is_ibverbs_available

    assert isinstance(is_ibverbs_available(), bool)
    src = numpy.arange(16, dtype=numpy.uint8)
    buf = RDMABuffer(src)
    dst = numpy.zeros(16, dtype=numpy.uint8)
    RDMAAction().read_into(buf, dst).submit().get(timeout=30)
    assert (dst == src).all()
    asyncio.run(_await(buf.drop()))


# A controller whose procs print a coloured line, then similar lines
# aggregated within a window.
AGG_SCRIPT = """
from monarch.actor import Actor, endpoint, this_host, current_rank

class P(Actor):
    @endpoint
    def say(self, text):
        r = current_rank().rank
        print(text.format(r=r, loss=50 + r), flush=True)

pm = this_host().spawn_procs(per_host={"gpus": 4})
p = pm.spawn("p", P)
p.slice(gpus=2).say.call_one("\x1b[31mred{r}\x1b[0m alone").get()
# A window far longer than the call: the lines are printed when
# the runtime shuts down at exit, after the procs' last lines.
pm.logging_option(aggregate_window_sec=600)
p.say.call("step 12 loss 0.{loss}").get()
pm.stop().get()
"""


def test_proc_output_ranks_aggregation_files_and_colour(tmp_path):
    """Lines come with their rank; similar lines within a window are merged;
    every proc's lines are also in its own file, whose directory is printed
    at start; colour codes are dropped when the output is not a terminal."""
    script = tmp_path / "agg.py"
    script.write_text(AGG_SCRIPT)
    logs = tmp_path / "logs"
    env = dict(os.environ, MONARCH_LOG_DIR=str(logs))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert f"proc output is kept in {logs}" in out.stderr
    assert "[rank 2] red0 alone" in out.stdout and "\x1b" not in out.stdout, out.stdout
    lines = [ln for ln in out.stdout.splitlines() if "loss" in ln]
    assert len(lines) == 1, out.stdout
    assert lines[0].startswith("[4 similar lines, ranks 0-3] step 12 loss 0.5"), lines
    kept = sorted(f.read_text() for f in logs.iterdir())
    assert len(kept) == 4, kept
    assert len([t for t in kept if "red0 alone" in t]) == 1 and all("step 12 loss 0.5" in t for t in kept)


def test_proc_output_keeps_its_colour_on_a_terminal(tmp_path):
    from terminal import run_on_a_terminal

    script = tmp_path / "agg.py"
    script.write_text(AGG_SCRIPT)
    env = dict(os.environ, MONARCH_LOG_DIR=str(tmp_path / "logs"))
    rc, out = run_on_a_terminal([sys.executable, str(script)], env)
    assert rc == 0, out
    # The proc's colour codes as it wrote them, after the dimmed rank.
    assert "\x1b[2m[rank 2]\x1b[0m \x1b[31mred0\x1b[0m alone" in out, repr(out)
    # The kept file has the text without them.
    kept = [f.read_text() for f in (tmp_path / "logs").iterdir()]
    assert [t for t in kept if "red0 alone" in t and "\x1b" not in t], kept


def test_logging_option_without_streaming_keeps_output_in_files_only(tmp_path):
    script = tmp_path / "quiet.py"
    script.write_text(
        textwrap.dedent(
            """
            from monarch.actor import Actor, endpoint, this_host, current_rank

            class P(Actor):
                @endpoint
                def say(self, text):
                    print(text.format(r=current_rank().rank), flush=True)

            pm = this_host().spawn_procs(per_host={"gpus": 2})
            pm.logging_option(stream_to_client=False)
            pm.spawn("p", P).say.call("quiet line of rank {r}").get()
            pm.stop().get()
            print("controller done", flush=True)
            """
        )
    )
    logs = tmp_path / "logs"
    env = dict(os.environ, MONARCH_LOG_DIR=str(logs))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert "controller done" in out.stdout
    # Not on the controller's output (the runtime prints what its procs
    # wrote before it exits, so it would be there by now)...
    assert "quiet line" not in out.stdout + out.stderr, out.stdout + out.stderr
    # ...but in each proc's own file.
    kept = sorted(f.read_text() for f in logs.iterdir())
    assert len(kept) == 2, kept
    assert [("quiet line of rank 0" in t, "quiet line of rank 1" in t) for t in kept] == [(True, False), (False, True)]


def test_run_worker_loop_forever_and_attach_to_workers():
    """A host started with upstream's worker loop, attached by address."""
    from surface_actors import Leaf

    from monarch.job import job_secret

    code = "from monarch.actor import run_worker_loop_forever as r; r(address='tcp://127.0.0.1:0')"
    agent = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "MONARCH_JOB_TOKEN": job_secret()},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = agent.stdout.readline()
        assert line.startswith("MONARCH_HOST_READY "), line
        hosts = ma.attach_to_workers(workers=[f"tcp://{line.split()[1]}"], ca="trust_all_connections")
        assert hosts.extent == {"hosts": 1}
        import pickle

        with pytest.raises(TypeError, match="send a proc mesh"):
            pickle.dumps(hosts)
        pm = hosts.spawn_procs(per_host={"gpus": 2})
        assert len(pm.spawn("leaf", Leaf).where.call().get(timeout=60)) == 2
        pm.stop().get(timeout=60)
        with pytest.raises(NotImplementedError):
            ma.attach_to_workers(workers=["tcp://127.0.0.1:1"], ca=b"a ca")
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def test_this_host_travels():
    from surface_actors import Spawner

    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        # The actor spawns procs of its own from the host it was given.
        assert pm.spawn("spawner", Spawner).spawn_from.call_one(this_host()).get(timeout=60) == 2
    finally:
        pm.stop().get(timeout=30)


def test_shutdown_context_stops_every_proc(tmp_path):
    # In a program of its own: it stops every proc of the process.
    script = tmp_path / "shutdown.py"
    script.write_text(
        textwrap.dedent(
            """
            import os
            from monarch.actor import Actor, SupervisionError, endpoint, shutdown_context, this_host

            class Pid(Actor):
                @endpoint
                def pid(self):
                    return os.getpid()

            a = this_host().spawn_procs(per_host={"g": 2}).spawn("a", Pid)
            b = this_host().spawn_procs(per_host={"g": 1}).spawn("b", Pid)
            pids = list(a.pid.call().get().values()) + list(b.pid.call().get().values())
            shutdown_context().get()
            for mesh in (a, b):
                try:
                    mesh.pid.call().get()
                    raise SystemExit("a call after shutdown_context() worked")
                except SupervisionError:
                    pass
            for pid in pids:
                try:
                    os.kill(pid, 0)
                    raise SystemExit(f"proc {pid} outlived shutdown_context()")
                except ProcessLookupError:
                    pass
            print("all stopped")
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "all stopped" in out.stdout, out.stdout + out.stderr


def test_abort_fails_the_call_with_its_reason():
    from surface_actors import Aborter

    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        with pytest.raises((ActorError, ma.SupervisionError), match="the reason to stop"):
            pm.spawn("aborter", Aborter).abort_now.call_one("the reason to stop").get(timeout=60)
    finally:
        pm.stop().get(timeout=30)
    assert issubclass(ma.ActorAbort, BaseException) and not issubclass(ma.ActorAbort, Exception)
