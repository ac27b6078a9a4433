"""MONARCH_TRACE with Python procs: a controller and three Python worker
procs give one Chrome trace file with every proc, the endpoint call's
spans and the same message id on both sides."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_a_python_run_gives_one_chrome_trace(tmp_path):
    trace = tmp_path / "run.json"
    env = dict(os.environ, MONARCH_TRACE=str(trace), PYTHONPATH=HERE)
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
    names = sorted(e["args"]["name"].split(" (pid")[0] for e in events if e["name"] == "process_name")
    assert names == ["controller", "proc rank 0", "proc rank 1", "proc rank 2"]
    ctl = next(e["pid"] for e in events if e["name"] == "process_name" and e["args"]["name"].startswith("controller"))
    call = next(e for e in events if e["ph"] == "X" and e["name"] == "call")
    assert call["pid"] == ctl and call["args"]["method"] == "get"
    send = next(e for e in events if e["name"] == "send" and e["args"]["parent"] == call["args"]["span"])
    msg = send["args"]["msg"]
    assert msg != 0 and send["args"]["rank"] == 0  # the slice's one point
    handle = next(e for e in events if e["name"] == "handle" and e["ph"] == "b" and e["args"]["msg"] == msg)
    assert handle["pid"] != ctl and handle["args"]["method"] == "get"
    reply = next(e for e in events if e["name"] == "reply" and e["args"]["parent"] == handle["args"]["span"])
    assert reply["pid"] == handle["pid"] and reply["args"]["msg"] == msg
    # The reply is delivered back at the controller.
    assert any(
        e["name"] == "deliver" and e["pid"] == ctl and e["args"]["kind"] == "Reply" and e["args"]["msg"] == msg
        for e in events
    )
