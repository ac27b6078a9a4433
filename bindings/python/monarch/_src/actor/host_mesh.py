"""Host meshes: ``HostMesh`` (a set of hosts on which procs are started),
``this_host()`` (the controller's machine), and what a spawned proc runs:
``monarch_binary()`` (the CLI that runs native workers) and the import path
Python workers get.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..._lib import _PKG_DIR, _REPO_ROOT, PACKAGED_LIBRARY, c_strings, error_for, ffi, lib, runtime
from .actor_mesh import StopState
from .proc_mesh import ProcMesh
from .shape import owned_shape
from .supervision import claim_spawn_owner, ensure_watcher

_gc = ffi.gc
_new = ffi.new
_NULL = ffi.NULL
_pm_free = lib.monarch_proc_mesh_free


def _child_pythonpath() -> str:
    """PYTHONPATH for worker procs: this process's import path (minus the
    interpreter's own directories, which the child has anyway), so user
    modules and a source-tree ``monarch`` import the same way there."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    entries = []
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        real = os.path.realpath(p)
        if any(real == pre or real.startswith(pre + os.sep) for pre in prefixes):
            continue
        if p not in entries:
            entries.append(p)
    pkg_root = os.path.dirname(_PKG_DIR)
    if pkg_root not in entries:
        entries.insert(0, pkg_root)
    old = os.environ.get("PYTHONPATH")
    if old:
        entries.extend(e for e in old.split(os.pathsep) if e and e not in entries)
    return os.pathsep.join(entries)


def host_mesh_free(h: Any) -> None:
    """The destructor of a gc'd ``monarch_host_mesh`` handle."""
    lib.monarch_host_mesh_free(h)


class HostMesh:
    """A set of hosts. ``this_host()`` is the controller's machine, a host
    mesh with no dimensions. ``monarch.job.HostListJob`` (or
    ``HostMesh.attach``) gives a mesh of hosts running ``monarch host``
    agents, with one dimension ``hosts``; ``slice(hosts=...)`` narrows it."""

    def __init__(self) -> None:
        self._extent: dict[str, int] = {}
        self._h = None

    @classmethod
    def attach(cls, addrs: Iterable[str]) -> HostMesh:
        """Attach the running host agents at ``addrs`` (``"IP:PORT"`` as
        printed by ``monarch host``): authenticated with the job secret
        (``MONARCH_JOB_TOKEN``, which must be set before the first runtime
        use and equal the agents'). A mesh with dimension ``hosts``."""
        addrs = [str(a) for a in addrs]
        if not addrs:
            raise ValueError("HostMesh.attach() needs at least one host address")
        c_addrs, keep = c_strings(addrs)
        out = _new("monarch_host_mesh **")
        st = lib.monarch_host_mesh_attach(runtime(), c_addrs, len(addrs), out)
        del keep
        if st:
            raise error_for(st, "cannot attach hosts")
        return cls._wrap(_gc(out[0], host_mesh_free))

    @classmethod
    def _wrap(cls, handle: Any) -> HostMesh:
        self = object.__new__(cls)
        self._h = handle
        shape = owned_shape(lib.monarch_host_mesh_shape, handle)
        self._extent = dict(zip(shape.labels, shape.sizes))
        return self

    @property
    def extent(self) -> dict[str, int]:
        return dict(self._extent)

    def slice(self, **dims: int | slice) -> HostMesh:
        """The hosts at ``dims`` (an int fixes a dimension and removes it;
        a ``slice`` narrows it), e.g. ``hosts.slice(hosts=slice(0, 2))``."""
        if self._h is None:
            raise ValueError("this_host() has no dimensions to slice")
        h = self._h
        for label, sel in dims.items():
            out = _new("monarch_host_mesh **")
            if isinstance(sel, slice):
                start = 0 if sel.start is None else sel.start
                stop = lib.MONARCH_SLICE_END if sel.stop is None else sel.stop
                step = 1 if sel.step is None else sel.step
                st = lib.monarch_host_mesh_slice_range(h, label.encode(), start, stop, step, out)
            elif isinstance(sel, int) and not isinstance(sel, bool) and sel >= 0:
                st = lib.monarch_host_mesh_slice_index(h, label.encode(), sel, out)
            else:
                raise TypeError(f"slice({label}=...) takes a non-negative int or a slice, not {sel!r}")
            if st:
                raise error_for(st, f"cannot slice host mesh at {label}={sel!r}")
            h = _gc(out[0], host_mesh_free)
        return HostMesh._wrap(h)

    def spawn_procs(
        self,
        per_host: Mapping[str, int] | None = None,
        bootstrap: Sequence[str] | None = None,
        name: str | None = None,
        plugins: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    ) -> ProcMesh:
        """Start ``per_host`` procs (e.g. ``{"gpus": 4}``) on every host;
        the result has the host mesh's dimensions followed by ``per_host``'s.

        Each proc runs ``bootstrap`` (an argv; default: this interpreter
        with ``-m monarch._bootstrap``, hosting Python actors). ``plugins``
        (paths of plugin libraries, e.g. C++ actors built with
        monarch/plugin.hpp) instead runs ``monarch worker --plugin LIB ...``
        (the binary from ``monarch_binary()``); spawn their actor types
        with ``ProcMesh.spawn_native``. ``name`` is accepted as upstream
        does but not used yet: supervision events call the mesh
        ``procs.<n>``."""
        per_host = dict(per_host or {})
        if plugins is not None:
            if bootstrap is not None:
                raise ValueError("spawn_procs() takes bootstrap or plugins, not both")
            if isinstance(plugins, (str, bytes, os.PathLike)):
                plugins = [plugins]
            bootstrap = [monarch_binary(), "worker"]
            for p in plugins:
                if not os.path.exists(p):
                    raise FileNotFoundError(f"plugin library {os.fsdecode(p)!r} does not exist")
                bootstrap += ["--plugin", os.path.abspath(p)]
        dims = dict(per_host) if self._h is not None else {**self._extent, **per_host}
        labels = [_new("char[]", k.encode()) for k in dims]
        for k, v in dims.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"size of dimension {k!r} must be a non-negative int, not {v!r}")
        c_labels = _new("char *[]", labels) if labels else _NULL
        c_sizes = _new("size_t[]", list(dims.values())) if dims else _NULL
        argv_py = [sys.executable, "-m", "monarch._bootstrap"] if bootstrap is None else list(bootstrap)
        argv = [_new("char[]", os.fsencode(a)) for a in argv_py]
        c_argv = _new("char *[]", argv)
        out = _new("monarch_proc_mesh **")
        # Workers import user modules (and a source-tree monarch) the way
        # this process does.
        env = [_new("char[]", b"PYTHONPATH=" + os.fsencode(_child_pythonpath()))]
        # Procs' output is piped (to the runtime here, or to their host
        # agent) and printed line by line with a rank prefix: keep Python
        # from block-buffering it.
        env.append(_new("char[]", b"PYTHONUNBUFFERED=1"))
        c_env = _new("char *[]", env)
        ensure_watcher()
        claim_spawn_owner()
        if self._h is not None:
            st = lib.monarch_host_mesh_spawn_procs(
                self._h, c_labels, c_sizes, len(dims), c_argv, len(argv), c_env, len(env), out
            )
        else:
            st = lib.monarch_proc_mesh_spawn(runtime(), c_labels, c_sizes, len(dims), c_argv, len(argv), c_env, 1, out)
        if st:
            raise error_for(st, "cannot spawn procs")
        return ProcMesh._wrap(_gc(out[0], _pm_free), (StopState("proc mesh"),))

    def __repr__(self) -> str:
        return f"<HostMesh {self._extent}>"


def _installed_cli_candidates() -> list[str]:
    """Where installing the package put its ``monarch`` CLI: the scripts
    directory of this interpreter's environment (or of the user's, for
    ``pip install --user``). Empty when running from the source tree."""
    if not os.path.exists(os.path.join(_PKG_DIR, PACKAGED_LIBRARY)):
        return []
    schemes = [sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme("user")]
    return [os.path.join(sysconfig.get_path("scripts", scheme), "monarch") for scheme in schemes]


def monarch_binary() -> str:
    """Path of the ``monarch`` CLI (which runs ``monarch worker``): from
    ``$MONARCH_BIN``; else the one installed with the package; else
    ``<repo>/target/release/monarch`` when running from the source tree;
    else ``monarch`` on ``PATH``. FileNotFoundError if there is none."""
    env = os.environ.get("MONARCH_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise FileNotFoundError(f"MONARCH_BIN={env!r} is not an executable file")
        return env
    for cand in (*_installed_cli_candidates(), os.path.join(_REPO_ROOT, "target", "release", "monarch")):
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    found = shutil.which("monarch")
    if found:
        return found
    raise FileNotFoundError(
        "cannot find the monarch binary: set MONARCH_BIN, install the package (it installs one), "
        "or build it with `cargo build --release -p monarch-cli` in the source tree"
    )


_this_host = None


def this_host() -> HostMesh:
    """The host mesh of the controller's own machine (no dimensions)."""
    global _this_host
    if _this_host is None:
        _this_host = HostMesh()
    return _this_host
