"""libmonarch for Python: single-controller distributed programs with actor
meshes. The public API lives in :mod:`monarch.actor`."""

__version__ = "0.1.0"
