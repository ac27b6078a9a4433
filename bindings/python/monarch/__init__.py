"""libmonarch for Python: single-controller distributed programs with actor
meshes. The public API lives in :mod:`monarch.actor`."""

# The workspace version of Cargo.toml (checked by tests/test_version.py).
__version__ = "0.1.0"

# The tensor API needs torch: its names are imported on first use, so
# `import monarch` works without torch.
_TENSOR_NAMES = {
    "fetch_shard": "monarch._src.tensor.api",
    "call_on_shard_and_fetch": "monarch._src.tensor.api",
    "inspect": "monarch._src.tensor.api",
    "show": "monarch._src.tensor.api",
    "get_active_mesh": "monarch._src.tensor.api",
    "to_mesh": "monarch._src.tensor.api",
    "reduce": "monarch._src.tensor.api",
    "reduce_": "monarch._src.tensor.api",
    "slice_mesh": "monarch._src.tensor.api",
    "coalescing": "monarch._src.tensor.coalescing",
    "remote": "monarch._src.tensor.api",
    "Remote": "monarch._src.tensor.api",
    "no_mesh": "monarch._src.tensor.dtensor",
    "DTensor": "monarch._src.tensor.dtensor",
    "Stream": "monarch._src.tensor.stream",
    "Borrow": "monarch._src.tensor.borrow",
    "BorrowError": "monarch._src.tensor.borrow",
    "get_active_stream": "monarch._src.tensor.stream",
    "RemoteTensorError": "monarch._src.tensor.worker",
}


def __getattr__(name):
    module = _TENSOR_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'monarch' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
