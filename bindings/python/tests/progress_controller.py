"""A controller run by test_progress.py with its stderr on a pty (or a
pipe): spawns procs, calls them once, stops."""

from actors import Counter

from monarch.actor import this_host

if __name__ == "__main__":
    pm = this_host().spawn_procs(per_host={"gpus": 3})
    c = pm.spawn("c", Counter, 0)
    assert c.slice(gpus=2).get.call_one().get(timeout=60) == 0
    pm.stop().get(timeout=30)
    print("controller done", flush=True)
