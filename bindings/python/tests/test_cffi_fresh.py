"""The pre-built cffi module must match include/monarch.h (make header); the
installed package uses the compiled one and can fall back to ABI mode."""

import os

from monarch._cffi_build import MODULE, generate

_PKG = os.path.join(os.path.dirname(__file__), "..", "monarch")
_HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "include", "monarch.h")


def test_prebuilt_cffi_module_is_fresh():
    with open(os.path.join(_PKG, MODULE + ".py"), encoding="utf-8") as f:
        committed = f.read()
    assert committed == generate(_HEADER), "monarch/_monarch_cffi.py is stale: run `make header`"


def test_installed_package_calls_through_the_compiled_module():
    """The package build compiles the API-mode module beside the package's
    library, and that is what the binding uses."""
    from monarch import _lib, _monarch_api

    assert _lib.LIBRARY_PATH == os.path.join(os.path.dirname(_lib.__file__), "libmonarch.so.0")
    assert _lib.ffi is _monarch_api.ffi and _lib.lib is _monarch_api.lib


ABI_FALLBACK = """
from monarch import _lib, _monarch_cffi
from monarch.actor import Actor, endpoint, this_host

class Echo(Actor):
    @endpoint
    def echo(self, x):
        return x

assert _lib.ffi is _monarch_cffi.ffi, "expected the ABI-mode module"
procs = this_host().spawn_procs(per_host={"gpus": 2})
print(sorted(procs.spawn("e", Echo).echo.call(7).get().values()))
procs.stop().get()
"""


def test_abi_mode_fallback_works(tmp_path):
    """MONARCH_CFFI_ABI (as when no compiler was at hand at install time)
    loads the pre-built ABI-mode module, here and in the procs, and calls
    work the same."""
    import subprocess
    import sys

    env = dict(os.environ, MONARCH_CFFI_ABI="1")
    r = subprocess.run(
        [sys.executable, "-c", ABI_FALLBACK], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[7, 7]"


def test_status_names_come_from_the_library():
    from monarch._lib import error_for, lib, status_name

    assert status_name(lib.MONARCH_OK) == "MONARCH_OK"
    assert status_name(lib.MONARCH_ERR_TIMEOUT) == "MONARCH_ERR_TIMEOUT"
    assert status_name(9999) == "MONARCH_ERR_UNKNOWN"
    exc = error_for(lib.MONARCH_ERR_INVALID_HANDLE, "lookup")
    assert isinstance(exc, ValueError)
    assert (exc.status, exc.status_name) == (lib.MONARCH_ERR_INVALID_HANDLE, "MONARCH_ERR_INVALID_HANDLE")
