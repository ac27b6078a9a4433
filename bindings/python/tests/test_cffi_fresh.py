"""The pre-built cffi module must match include/monarch.h (make header)."""

import os

from monarch._cffi_build import MODULE, generate

_PKG = os.path.join(os.path.dirname(__file__), "..", "monarch")
_HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "include", "monarch.h")


def test_prebuilt_cffi_module_is_fresh():
    with open(os.path.join(_PKG, MODULE + ".py"), encoding="utf-8") as f:
        committed = f.read()
    assert committed == generate(_HEADER), "monarch/_monarch_cffi.py is stale: run `make header`"


def test_loaded_ffi_is_the_prebuilt_one():
    from monarch import _lib, _monarch_cffi

    assert _lib.ffi is _monarch_cffi.ffi
