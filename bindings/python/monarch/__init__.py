"""libmonarch for Python: single-controller distributed programs with actor
meshes. The public API lives in :mod:`monarch.actor`."""

# The workspace version of Cargo.toml (checked by tests/test_version.py).
__version__ = "0.1.0"
