"""A controller whose actors stop in the debugger, driven by test_debug.py
in tmux. ``python debug_prog.py MODE``:

- ``pause``: two procs; ``Trainer.step`` calls ``breakpoint()`` on both
  while ``Other`` (same procs) keeps answering;
- ``one``: one proc, ``pdb.set_trace()``;
- ``postmortem``: one proc, ``Trainer.fail`` raises (run with
  ``MONARCH_DEBUG_POSTMORTEM=1``).
"""

import os
import pdb
import sys

from monarch.actor import Actor, endpoint, this_host


class Trainer(Actor):
    @endpoint
    def step(self, x):
        y = x * 10
        breakpoint()
        return y + 1

    @endpoint
    def step_set_trace(self, x):
        y = x * 10
        pdb.set_trace()
        return y + 2

    @endpoint
    def fail(self):
        secret = 42  # noqa: F841 - read in the post-mortem session
        raise ValueError("boom")


class Other(Actor):
    @endpoint
    def ping(self):
        return "pong"


def main(mode: str) -> None:
    print(f"PID {os.getpid()}", flush=True)
    n = 2 if mode == "pause" else 1
    procs = this_host().spawn_procs(per_host={"gpus": n})
    trainer = procs.spawn("trainer", Trainer)
    if mode == "pause":
        other = procs.spawn("other", Other)
        fut = trainer.step.call(3)
        # The paused actors' neighbours still answer.
        print("other says", other.ping.call().get(timeout=120).item(gpus=0), flush=True)
        print("result", sorted(fut.get(timeout=600).values()), flush=True)
    elif mode == "one":
        print("result", trainer.step_set_trace.call_one(4).get(timeout=600), flush=True)
    else:
        try:
            trainer.fail.call_one().get(timeout=600)
        except Exception as e:  # noqa: BLE001 - printed for the test
            print("caught", type(e).__name__, "boom" in str(e), flush=True)
    procs.stop().get(timeout=60)
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
