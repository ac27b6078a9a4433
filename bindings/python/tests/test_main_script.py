import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    from monarch.actor import Actor, endpoint, this_host, this_proc

    class Greeter(Actor):  # defined in __main__: travels by value
        def __init__(self, greeting):
            self.greeting = greeting

        @endpoint
        def greet(self, name):
            return f"{self.greeting}, {name}"

    def helper(x):
        return x * 2

    class Applier(Actor):
        @endpoint
        def apply(self, fn, x):
            return fn(x)

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    g = procs.spawn("g", Greeter, "hello")
    print(sorted(g.greet.call("world").get().values()))
    a = procs.spawn("a", Applier)
    print(a.slice(gpus=1).apply.call_one(helper, 21).get())
    print(a.slice(gpus=0).apply.call_one(lambda x: x + 1, 1).get())
    local = this_proc().spawn("l", Greeter, "hi")
    print(local.greet.call_one("me").get())
    procs.stop().get()
    print("done")
    """
)


def test_main_defined_classes(tmp_path):
    script = tmp_path / "main_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = pkg_root
    r = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["['hello, world', 'hello, world']", "42", "2", "hi, me", "done"]


CLEANUP_AT_EXIT = textwrap.dedent(
    """
    import sys
    from monarch.actor import Actor, endpoint, this_proc

    class Tidy(Actor):
        def __init__(self, tag):
            self.tag = tag

        @endpoint
        def hi(self):
            return self.tag

        def __cleanup__(self, exc):
            with open(sys.argv[1], "a") as f:
                f.write(f"{self.tag} {exc}\\n")

    kept = this_proc().spawn("kept", Tidy, "kept")
    stopped = this_proc().spawn("stopped", Tidy, "stopped")
    print(kept.hi.call_one().get(), stopped.hi.call_one().get())
    stopped.stop().get()
    """
)


def test_this_proc_actors_clean_up_at_exit(tmp_path):
    """Actors the controller hosts itself get __cleanup__ when it exits,
    once; one already stopped is not cleaned up twice."""
    script = tmp_path / "cleanup_script.py"
    script.write_text(CLEANUP_AT_EXIT)
    log = tmp_path / "cleanups.txt"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(
        [sys.executable, str(script), str(log)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["kept", "stopped"]
    assert sorted(log.read_text().splitlines()) == ["kept None", "stopped None"], r.stderr
