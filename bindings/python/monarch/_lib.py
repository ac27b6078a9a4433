"""Loading libmonarch (cffi), status -> exception mapping, and the
per-process runtime singleton.

Two ways to call the library: the compiled (API-mode) module
``_monarch_api`` that ``pip install`` builds beside the package's
``libmonarch.so`` (fastest: a call costs a few hundred instructions), and
cffi's ABI mode through ``dlopen`` (the pre-built ``_monarch_cffi``, or the
header parsed at import), used when the library comes from elsewhere, when
no compiled module matches the header, or when ``MONARCH_CFFI_ABI`` is set.

Where the library is found, in order:

1. ``monarch/libmonarch.so`` with ``monarch/monarch.h`` beside it (an
   installed package);
2. the file named by the environment variable ``MONARCH_LIB`` (the header is
   taken from ``MONARCH_HEADER``, from beside the library, or from the source
   tree);
3. ``<repo>/target/release/libmonarch.so`` and ``<repo>/include/monarch.h``
   when running from the source tree.

The cdef is built from the header text itself, so the binding never drifts
from the library it loads; ``monarch_abi_version()`` is checked at load.
"""

from __future__ import annotations

import atexit
import os
import threading

ABI_VERSION = 1

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_PKG_DIR)))

from ._cdef import cdef_from_header as _cdef_from_header  # noqa: E402
from ._cdef import header_digest  # noqa: E402


def _locate() -> tuple[str, str]:
    so = os.path.join(_PKG_DIR, "libmonarch.so")
    hdr = os.path.join(_PKG_DIR, "monarch.h")
    if os.path.exists(so) and os.path.exists(hdr):
        return so, hdr
    repo_hdr = os.path.join(_REPO_ROOT, "include", "monarch.h")
    env = os.environ.get("MONARCH_LIB")
    if env:
        h = os.environ.get("MONARCH_HEADER")
        if not h:
            beside = os.path.join(os.path.dirname(os.path.abspath(env)), "monarch.h")
            h = beside if os.path.exists(beside) else repo_hdr
        return env, h
    so = os.path.join(_REPO_ROOT, "target", "release", "libmonarch.so")
    if os.path.exists(so) and os.path.exists(repo_hdr):
        return so, repo_hdr
    raise ImportError(
        "cannot find libmonarch.so: not inside the package, MONARCH_LIB is not set, "
        f"and {so} does not exist (run `cargo build --release -p monarch-ffi`)"
    )


def _ffi_for(hdr: str):
    """The pre-built cffi module when it was made from this very header
    (fast), else a cdef parsed from the header text (~50 ms of pycparser)."""
    with open(hdr, encoding="utf-8") as f:
        text = f.read()
    try:
        from . import _monarch_cffi

        if _monarch_cffi.HEADER_DIGEST == header_digest(text):
            return _monarch_cffi.ffi
    except ImportError:
        pass
    from cffi import FFI

    ffi = FFI()
    ffi.cdef(_cdef_from_header(text))
    return ffi


def _compiled_for(so: str, hdr: str):
    """The compiled (API-mode) module built at install time, when the
    library is the package's own and the module was made from this very
    header; else None."""
    if os.path.dirname(os.path.abspath(so)) != _PKG_DIR or os.environ.get("MONARCH_CFFI_ABI"):
        return None
    try:
        from . import _monarch_api
    except ImportError:
        return None
    with open(hdr, encoding="utf-8") as f:
        digest = header_digest(f.read())
    if _monarch_api.ffi.string(_monarch_api.lib.monarch_api_header_digest()).decode() != digest:
        return None
    return _monarch_api


def _load():
    so, hdr = _locate()
    api = _compiled_for(so, hdr)
    if api is not None:
        ffi, lib = api.ffi, api.lib
    else:
        ffi = _ffi_for(hdr)
        lib = ffi.dlopen(so)
    version = lib.monarch_abi_version()
    if version != ABI_VERSION:
        raise ImportError(
            f"{so} implements libmonarch ABI version {version}, "
            f"but this binding only knows version {ABI_VERSION}"
        )
    return ffi, lib, so


ffi, lib, LIBRARY_PATH = _load()
NULL = ffi.NULL

OK = lib.MONARCH_OK
ERR_INVALID_ARGUMENT = lib.MONARCH_ERR_INVALID_ARGUMENT
ERR_INVALID_HANDLE = lib.MONARCH_ERR_INVALID_HANDLE
ERR_TIMEOUT = lib.MONARCH_ERR_TIMEOUT
ERR_PROC_FAILED = lib.MONARCH_ERR_PROC_FAILED
ERR_STOPPED = lib.MONARCH_ERR_STOPPED
ERR_IO = lib.MONARCH_ERR_IO


class MonarchError(RuntimeError):
    """An error reported by libmonarch that has no more specific type."""

    status = None


class ActorError(Exception):
    """An actor failed while handling a message (or its constructor raised).

    ``exception`` is the remote exception when it could be transported
    (unpickled on this side), else None; ``message`` is the remote traceback
    text. Raised by ``Future.get()`` when at least one point failed.
    """

    def __init__(self, message: str, exception: BaseException | None = None, failures=None):
        super().__init__(message)
        self.message = message
        self.exception = exception
        # list of (Point-or-rank, message, exception) for every failed point
        self.failures = failures or []

    def __str__(self):
        return self.message


class SupervisionError(ActorError, RuntimeError):
    """A proc or actor that an operation needed has failed, exited or was
    stopped (not an exception raised by an endpoint)."""


_STATUS_EXC = {
    ERR_INVALID_ARGUMENT: ValueError,
    ERR_INVALID_HANDLE: ValueError,
    ERR_TIMEOUT: TimeoutError,
    ERR_PROC_FAILED: SupervisionError,
    ERR_STOPPED: SupervisionError,
    ERR_IO: OSError,
}


def last_error() -> str:
    return ffi.string(lib.monarch_last_error()).decode("utf-8", "replace")


def error_for(status: int, what: str = "") -> BaseException:
    msg = last_error()
    if what:
        msg = f"{what}: {msg}" if msg else what
    cls = _STATUS_EXC.get(status, MonarchError)
    exc = cls(msg)
    try:
        exc.status = status
    except AttributeError:  # pragma: no cover
        pass
    return exc


def check(status: int, what: str = "") -> None:
    if status:
        raise error_for(status, what)


def take_buffer(ptr, length) -> bytes:
    """Copy an owned libmonarch buffer into bytes and free it."""
    try:
        return ffi.buffer(ptr, length)[:]
    finally:
        lib.monarch_buffer_free(ptr, length)


def c_strings(strs) -> tuple:
    """A ``char *[]`` of ``strs`` and the buffers it points to (keep both)."""
    bufs = [ffi.new("char[]", s.encode()) for s in strs]
    return (ffi.new("char *[]", bufs) if bufs else ffi.NULL), bufs


# ---------------------------------------------------------------------------
# Runtime singleton

_rt = None
_rt_lock = threading.Lock()
_rt_freed = False


def runtime():
    """This process's runtime handle (created on first use)."""
    rt = _rt
    if rt is not None:
        return rt
    return _create_runtime()


def _create_runtime():
    global _rt
    with _rt_lock:
        if _rt is not None:
            return _rt
        if _rt_freed:
            raise SupervisionError("the monarch runtime of this process was shut down")
        out = ffi.new("monarch_runtime **")
        check(lib.monarch_runtime_new(out), "cannot create the monarch runtime")
        _rt = out[0]
        atexit.register(shutdown_runtime)
        return _rt


def shutdown_runtime() -> None:
    """Free the runtime: stops every proc it started. Idempotent."""
    global _rt, _rt_freed
    with _rt_lock:
        rt, _rt = _rt, None
        if rt is None:
            return
        _rt_freed = True
    lib.monarch_runtime_free(rt)


def runtime_is_live() -> bool:
    return _rt is not None
