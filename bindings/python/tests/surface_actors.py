"""Actor classes of test_upstream_surface.py (importable by the worker procs)."""

import logging
import os
import sys

from monarch.actor import Actor, context, current_actor_name, endpoint, get_or_spawn_controller


class Leaf(Actor):
    @endpoint
    def where(self):
        return os.getpid(), context().actor_instance.rank.rank

    @endpoint
    def env(self, name):
        return os.environ.get(name)

    @endpoint
    def xoption(self, name):
        """An ``-X name=value`` option of this proc's interpreter."""
        return sys._xoptions.get(name)

    def plain(self, x):
        """Not an endpoint: reached through as_endpoint(mesh.plain)."""
        return x * 2


class Owner(Actor):
    """Spawns on procs it was given."""

    @endpoint
    def spawn_on(self, procs):
        leaves = procs.spawn("leaves", Leaf)
        return sorted(p for p, _ in leaves.where.call().get().values())

    @endpoint
    def try_stop(self, procs):
        try:
            procs.stop()
        except ValueError as e:
            return str(e)
        return "stopped"


class Named(Actor):
    def __init__(self):
        self.hits = 0

    @endpoint
    def hit(self):
        self.hits += 1
        return self.hits, os.getpid()


class Asker(Actor):
    @endpoint
    def ask(self, name):
        named = get_or_spawn_controller(name, Named).get()
        return named.hit.call_one().get()


class Logs(Actor):
    @endpoint
    def log(self, text):
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        self.logger.logger.addHandler(handler)
        try:
            self.logger.warning(text)
        finally:
            self.logger.logger.removeHandler(handler)
        r = records[0]
        return current_actor_name(), r.actor, dict(r.rank), r.getMessage()

    @endpoint
    def level(self):
        return logging.getLogger().level


def set_env():
    os.environ["SURFACE_BOOTSTRAP"] = f"ran in {os.getpid()}"


def failing_bootstrap():
    raise RuntimeError("bootstrap refused")


class Spawner(Actor):
    @endpoint
    def spawn_from(self, host):
        procs = host.spawn_procs(per_host={"sub": 2})
        n = len(procs.spawn("leaf", Leaf).where.call().get())
        procs.stop().get()
        return n


class Aborter(Actor):
    @endpoint
    def abort_now(self, reason):
        try:
            context().actor_instance.abort(reason)
        except Exception:  # noqa: BLE001 - abort is not an Exception: this does not catch it
            return "caught"
