"""A worker proc outlives what it should: a caller that dies while it
computes the answer, and a terminal's Ctrl-C (which goes to the whole
process group; the controller decides). A blocking ``get()`` is
interrupted by Ctrl-C at once. Deadlines only turn hangs into failures;
they are generous for a loaded machine."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from hardening_actors import Slow
from pids import alive, wait_gone
from relay_actor import Relay

from monarch.actor import SupervisionError, this_host

HERE = os.path.dirname(os.path.abspath(__file__))


def wait_for_file(path, timeout=60):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.01)


@pytest.mark.parametrize("method", ["sleep", "sleep_then_answer"])
def test_a_killed_caller_does_not_take_its_callee_down(method, tmp_path):
    # Proc A calls a slow endpoint of an actor on proc B and is SIGKILLed
    # while B computes: B's answer cannot be delivered, and B serves on.
    callee_procs = this_host().spawn_procs(per_host={"b": 1})
    caller_procs = this_host().spawn_procs(per_host={"a": 1})
    new_caller_procs = None
    try:
        slow = callee_procs.spawn("slow", Slow)
        relay = caller_procs.spawn("relay", Relay)
        callee_pid = slow.pid.call_one().get(timeout=60)
        caller_pid = relay.pid.call_one().get(timeout=60)
        started = tmp_path / "started"
        pending = relay.call.call_one(slow, method, str(started), 1.0)
        wait_for_file(started)
        os.kill(caller_pid, signal.SIGKILL)
        with pytest.raises(SupervisionError):
            pending.get(timeout=60)
        # Handled after the slow call has answered (events are handled in
        # order): the answer went nowhere, and B is still there.
        assert slow.count.call_one().get(timeout=60) == 1
        assert alive(callee_pid)
        time.sleep(0.2)
        assert alive(callee_pid)
        assert slow.ping.call_one().get(timeout=60) == "pong"
        # A new caller, from another proc, is answered too.
        new_caller_procs = this_host().spawn_procs(per_host={"a": 1})
        relay2 = new_caller_procs.spawn("relay2", Relay)
        assert relay2.call.call_one(slow, "ping").get(timeout=60) == "pong"
        assert slow.pid.call_one().get(timeout=60) == callee_pid
    finally:
        for pm in (new_caller_procs, caller_procs, callee_procs):
            if pm is not None:
                pm.stop().get(timeout=60)


def _controller(script, *args, **popen):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, *sys.path])
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def _finish(p, timeout):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"controller still running after {timeout} s:\n{out}\n{err}") from None
    return out, err


def test_ctrl_c_interrupts_a_blocking_get(tmp_path):
    # SIGINT while the controller's main thread waits in get() on a 60 s
    # call: KeyboardInterrupt at once, and the controller exits (its procs
    # with it) long before the call would have returned.
    gate = tmp_path / "gate"
    p = _controller(
        """
        import os, sys
        from monarch.actor import this_host
        from hardening_actors import Slow
        pm = this_host().spawn_procs(per_host={"b": 1})
        s = pm.spawn("s", Slow)
        print(s.pid.call_one().get(timeout=60), flush=True)
        s.wait_for.call_one(sys.argv[1], 60).get()
        print("not reached", flush=True)
        """,
        str(gate),
    )
    try:
        proc_pid = int(p.stdout.readline())
        time.sleep(0.5)  # well inside get() by now
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = _finish(p, 30)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    print(f"controller exited {took:.2f} s after SIGINT")
    assert "KeyboardInterrupt" in err, err
    assert p.returncode != 0
    assert "not reached" not in out
    assert wait_gone([proc_pid], 10) == []


def test_ctrl_c_to_the_process_group_leaves_the_procs_to_the_controller(tmp_path):
    # A terminal's Ctrl-C reaches every process of the foreground group:
    # the controller and its procs. The procs live on; the controller
    # catches KeyboardInterrupt, calls them again, and stops them.
    gate = tmp_path / "gate"
    p = _controller(
        """
        import sys
        from monarch.actor import this_host
        from hardening_actors import Slow
        gate = sys.argv[1]
        pm = this_host().spawn_procs(per_host={"b": 2})
        s = pm.spawn("s", Slow)
        print(" ".join(map(str, s.pid.call().get(timeout=60).values())), flush=True)
        try:
            s.wait_for.call(gate, 60).get()
            print("not interrupted", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        open(gate, "w").close()
        print("answers", list(s.ping.call().get(timeout=60).values()), flush=True)
        pm.stop().get(timeout=60)
        print("stopped", flush=True)
        """,
        str(gate),
        start_new_session=True,
    )
    try:
        proc_pids = [int(x) for x in p.stdout.readline().split()]
        assert len(proc_pids) == 2
        assert all(os.getpgid(pid) == p.pid for pid in proc_pids)
        time.sleep(0.5)  # well inside get() by now
        os.killpg(p.pid, signal.SIGINT)
        out, err = _finish(p, 45)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, (p.returncode, out, err)
    assert "interrupted" in out and "not interrupted" not in out, (out, err)
    assert "answers ['pong', 'pong']" in out, (out, err)
    assert "stopped" in out
    assert wait_gone(proc_pids, 10) == []
