"""MONARCH_TRACE with Python procs: a controller and three Python worker
procs give one Chrome trace file with every proc, the endpoint call's
spans and the call's message id on both sides; through a forwarding proc
(fan-out 2), the forwarder's `forward` span links the id the caller sent
to the id its subtree answers to."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("fanout", [None, "2"])
def test_a_python_run_gives_one_chrome_trace(tmp_path, fanout):
    trace = tmp_path / "run.json"
    env = dict(os.environ, MONARCH_TRACE=str(trace), PYTHONPATH=HERE)
    env.pop("MONARCH_CAST_FANOUT", None)
    if fanout is not None:
        env["MONARCH_CAST_FANOUT"] = fanout
    r = subprocess.run(
        [sys.executable, os.path.join(HERE, "progress_controller.py")],
        env=env,
        capture_output=True,
        timeout=120,
    )
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, err
    assert f"written to {trace}" in err
    events = json.loads(trace.read_text())["traceEvents"]
    pids = {e["args"]["name"].split(" (pid")[0]: e["pid"] for e in events if e["name"] == "process_name"}
    assert sorted(pids) == ["controller", "proc rank 0", "proc rank 1", "proc rank 2"]
    ctl = pids["controller"]
    call = next(e for e in events if e["ph"] == "X" and e["name"] == "call")
    assert call["pid"] == ctl and call["args"]["method"] == "get"
    send = next(e for e in events if e["name"] == "send" and e["args"]["parent"] == call["args"]["span"])
    msg = send["args"]["msg"]
    assert msg != 0 and send["args"]["rank"] == 0  # the slice's one point
    # Follow the call down the tree: each forwarder names the id it sent on.
    forwards = []
    ids = {msg}
    while True:
        more = [
            e for e in events if e["name"] == "forward" and e["args"]["msg"] in ids and e["args"]["relay"] not in ids
        ]
        if not more:
            break
        forwards += more
        ids |= {e["args"]["relay"] for e in more}
    if fanout == "2":
        # Base rank 2's parent in a binary tree is rank 0: one forwarder,
        # which collects the reply on a relay port of its own.
        assert [e["pid"] for e in forwards] == [pids["proc rank 0"]]
        (fwd,) = forwards
        assert fwd["args"]["method"] == "get" and fwd["args"]["relay"] != msg
        here = fwd["args"]["relay"]
    else:
        assert forwards == []
        here = msg
    handle = next(e for e in events if e["name"] == "handle" and e["ph"] == "b" and e["args"]["msg"] == here)
    assert handle["pid"] == pids["proc rank 2"] and handle["args"]["method"] == "get"
    reply = next(e for e in events if e["name"] == "reply" and e["args"]["parent"] == handle["args"]["span"])
    assert reply["pid"] == handle["pid"] and reply["args"]["msg"] == here
    # The reply is delivered back at the controller, under the caller's id.
    assert any(
        e["name"] == "deliver" and e["pid"] == ctl and e["args"]["kind"] == "Reply" and e["args"]["msg"] == msg
        for e in events
    )
