"""Actor classes of test_hardening_names.py (importable by the worker
procs): endpoints named like actor mesh attributes."""

from monarch.actor import Actor, endpoint


class MeshNamed(Actor):
    """Endpoints named like the mesh's own methods."""

    @endpoint
    def size(self):
        return "size endpoint"

    @endpoint
    def stop(self, x):
        return ("stop endpoint", x)

    @endpoint
    def slice(self):
        return "slice endpoint"

    @endpoint
    def plain(self):
        return "plain"


class PropertyNamed(Actor):
    """An endpoint named like a mesh property."""

    @endpoint
    def sizes(self):
        return 0


class PrivateNamed(Actor):
    """An endpoint named like a private attribute of the mesh."""

    @endpoint
    def _call(self):
        return 0
