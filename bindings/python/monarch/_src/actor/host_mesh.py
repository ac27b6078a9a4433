"""Host meshes: ``HostMesh`` (a set of hosts on which procs are started),
``this_host()`` (the controller's machine), and what a spawned proc runs:
``monarch_binary()`` (the CLI that runs native workers), the import path
Python workers get, ``default_bootstrap_cmd()``; ``shutdown_context()``;
upstream's ``run_worker_loop_forever`` / ``attach_to_workers`` (hosts that
something else started, joining a controller: our host agents).
"""

from __future__ import annotations

import inspect
import os
import shutil
import sys
import sysconfig
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..._lib import _PKG_DIR, _REPO_ROOT, PACKAGED_LIBRARY, c_strings, error_for, ffi, lib, runtime
from .actor_mesh import Actor, StopState
from .controller import env_for_children
from .debugger import watch_terminal
from .endpoint import endpoint
from .future import Future
from .proc_mesh import ProcMesh
from .shape import Extent, owned_shape
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


class BootstrapCommand:
    """What a proc runs: ``program`` with ``args`` and ``env`` added to the
    inherited environment. ``default_bootstrap_cmd()`` is the one Python
    procs run; ``with_env`` gives a copy with more variables, for
    ``spawn_procs(bootstrap_command=...)``."""

    __slots__ = ("program", "args", "env")

    def __init__(self, program: str, args: Sequence[str] = (), env: Mapping[str, str] | None = None) -> None:
        self.program = os.fspath(program)
        self.args = [str(a) for a in args]
        self.env = dict(env or {})

    def with_env(self, env: Mapping[str, str]) -> BootstrapCommand:
        return BootstrapCommand(self.program, self.args, {**self.env, **env})

    def argv(self) -> list[str]:
        return [self.program, *self.args]

    def __repr__(self) -> str:
        return f"BootstrapCommand({self.program!r}, {self.args!r}, {self.env!r})"


def default_bootstrap_cmd() -> BootstrapCommand:
    """The command Python procs run: this interpreter with ``-m
    monarch._bootstrap``."""
    return BootstrapCommand(sys.executable, ["-m", "monarch._bootstrap"])


# Proc meshes this process spawned, stopped by shutdown_context().
_spawned: list = []


def shutdown_context() -> Future[None]:
    """Stop every proc this process spawned (as upstream, at the end of a
    script, to shut the job down cleanly before exiting); the Future
    completes when they have exited."""
    meshes, _spawned[:] = list(_spawned), []
    futures = [m.stop() for m in meshes if not m._states[0].stopped]
    for f in futures:
        f.get()
    return Future._ready(None)


class _ProcSetup(Actor):
    """Runs ``spawn_procs(bootstrap=fn)``'s ``fn`` in each new proc before
    any other actor is spawned there."""

    @endpoint
    def run(self, fn: Callable[[], Any]) -> None:
        result = fn()
        if inspect.isawaitable(result):
            import asyncio

            async def wait():
                return await result

            asyncio.run(wait())


def _run_setup(procs: ProcMesh, fn: Callable[[], Any]) -> None:
    """Run ``fn`` on every proc of ``procs`` and wait; on failure stop the
    procs and raise the failure."""
    try:
        setup = procs.spawn("bootstrap", _ProcSetup)
        setup.run.call(fn).get()
        setup.stop().get()
    except BaseException:
        procs.stop().get()
        raise


class HostMesh:
    """A set of hosts. ``this_host()`` is the controller's machine, a host
    mesh with no dimensions. ``monarch.job.HostListJob`` (or
    ``HostMesh.attach``) gives a mesh of hosts running ``monarch host``
    agents, with one dimension ``hosts``; ``slice(hosts=...)`` narrows it."""

    def __init__(self) -> None:
        self._extent: dict[str, int] = {}
        self._h = None
        self._python: str | None = None  # the interpreter Python procs run (None: this one)

    def with_python_executable(self, python_executable: str | os.PathLike) -> HostMesh:
        """The same hosts, whose Python procs run ``python_executable``
        (e.g. another virtual environment's interpreter, which must have
        this package installed) instead of this process's interpreter."""
        other = object.__new__(HostMesh)
        other.__dict__.update(self.__dict__)
        other._python = os.fspath(python_executable)
        return other

    def _python_argv(self) -> list[str]:
        return [self._python or sys.executable, "-m", "monarch._bootstrap"]

    def __reduce__(self):
        if self._h is not None:
            raise TypeError(
                "a host mesh of attached host agents cannot be sent to another proc; "
                "send a proc mesh spawned on it instead"
            )
        return (_local_host_mesh, (self._python,))

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
    def _wrap(cls, handle: Any, python: str | None = None) -> HostMesh:
        self = object.__new__(cls)
        self._h = handle
        self._python = python
        shape = owned_shape(lib.monarch_host_mesh_shape, handle)
        self._extent = dict(zip(shape.labels, shape.sizes))
        return self

    @property
    def extent(self) -> Extent:
        return Extent(self._extent.keys(), self._extent.values())

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
        return HostMesh._wrap(h, self._python)

    def spawn_procs(
        self,
        per_host: Mapping[str, int] | None = None,
        bootstrap: Callable[[], Any] | Sequence[str] | None = None,
        name: str | None = None,
        plugins: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        bootstrap_command: BootstrapCommand | None = None,
    ) -> ProcMesh:
        """Start ``per_host`` procs (e.g. ``{"gpus": 4}``) on every host;
        the result has the host mesh's dimensions followed by ``per_host``'s.

        ``bootstrap`` is, as upstream, a function (or ``async def``) run in
        every new proc before this returns and before any actor is spawned
        there (e.g. to set environment variables or configure a library);
        if it raises in any proc, the procs are stopped and the error
        (``ActorError``) is raised here. A sequence of strings instead is
        the command each proc runs (default: this interpreter with ``-m
        monarch._bootstrap``, hosting Python actors). ``plugins``
        (paths of plugin libraries, e.g. C++ actors built with
        monarch/plugin.hpp) instead runs ``monarch worker --plugin LIB ...``
        (the binary from ``monarch_binary()``); spawn their actor types
        with ``ProcMesh.spawn_native``. ``bootstrap_command`` (see
        ``default_bootstrap_cmd``) sets the command and extra environment
        of the procs. ``name`` is accepted as upstream
        does but not used yet: supervision events call the mesh
        ``procs.<n>``."""
        per_host = dict(per_host or {})
        setup = None
        extra_env: dict[str, str] = {}
        if callable(bootstrap):
            setup, bootstrap = bootstrap, self._python_argv()
        if bootstrap_command is not None:
            if bootstrap is not None or plugins is not None:
                raise ValueError("spawn_procs() takes bootstrap_command, or an argv bootstrap, or plugins")
            if not isinstance(bootstrap_command, BootstrapCommand):
                raise TypeError(f"bootstrap_command must be a BootstrapCommand, not {bootstrap_command!r}")
            bootstrap = bootstrap_command.argv()
            extra_env = bootstrap_command.env
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
        argv_py = self._python_argv() if bootstrap is None else list(bootstrap)
        argv = [_new("char[]", os.fsencode(a)) for a in argv_py]
        c_argv = _new("char *[]", argv)
        out = _new("monarch_proc_mesh **")
        zygote = self._h is None and argv_py == self._python_argv()
        # The job's controller registry (get_or_spawn_controller), when there is one.
        env = [_new("char[]", e) for e in _spawn_env(extra_env, zygote) + env_for_children()]
        c_env = _new("char *[]", env)
        ensure_watcher()
        claim_spawn_owner()
        watch_terminal(monarch_binary)
        if self._h is not None:
            st = lib.monarch_host_mesh_spawn_procs(
                self._h, c_labels, c_sizes, len(dims), c_argv, len(argv), c_env, len(env), out
            )
        else:
            st = lib.monarch_proc_mesh_spawn(
                runtime(), c_labels, c_sizes, len(dims), c_argv, len(argv), c_env, len(env), out
            )
        if st:
            raise error_for(st, "cannot spawn procs")
        procs = ProcMesh._wrap(_gc(out[0], _pm_free), (StopState("proc mesh"),))
        _spawned[:] = [m for m in _spawned if not m._states[0].stopped]
        _spawned.append(procs)
        if setup is not None:
            _run_setup(procs, setup)
        return procs

    def _warm_zygote(self) -> None:
        """Start the template this host's Python procs are forked from, so
        the first spawn does not wait for an interpreter to start."""
        argv = [_new("char[]", os.fsencode(a)) for a in self._python_argv()]
        env = [_new("char[]", e) for e in _spawn_env({}, True)]
        c_argv, c_env = _new("char *[]", argv), _new("char *[]", env)
        st = lib.monarch_runtime_warm_zygote(runtime(), c_argv, len(argv), c_env, len(env))
        if st:
            raise error_for(st, "cannot start the procs' template")

    def __repr__(self) -> str:
        return f"<HostMesh {self._extent}>"


def _spawn_env(extra_env: dict[str, str], zygote: bool) -> list[bytes]:
    """What procs get added to this process's environment."""
    # Workers import user modules (and a source-tree monarch) the way
    # this process does.
    env = [b"PYTHONPATH=" + os.fsencode(_child_pythonpath())]
    # Procs' output is piped (to the runtime here, or to their host
    # agent) and printed line by line with a rank prefix: keep Python
    # from block-buffering it.
    env.append(b"PYTHONUNBUFFERED=1")
    env.extend(os.fsencode(f"{k}={v}") for k, v in extra_env.items())
    # Local procs of the standard Python bootstrap are forked from a warm
    # template (the runtime starts it, and execs when it cannot).
    if zygote:
        env.append(b"MONARCH_ZYGOTE=1")
    return env


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


def _local_host_mesh(python: str | None) -> HostMesh:
    """A host mesh received in a message that named the receiver's own
    machine (``this_host()`` of the sender, on the same machine)."""
    h = this_host()
    return h if python is None else h.with_python_executable(python)


_this_host = None


def this_host() -> HostMesh:
    """The host mesh of the controller's own machine (no dimensions)."""
    global _this_host
    if _this_host is None:
        _this_host = HostMesh()
        _this_host._warm_zygote()
    return _this_host


def _host_port(addr: str) -> str:
    """``"IP:PORT"`` of an upstream-style worker address (``tcp://IP:PORT``
    or ``IP:PORT``)."""
    if addr.startswith("tcp://"):
        addr = addr[len("tcp://") :]
    if "@" in addr:
        addr = addr.split("@", 1)[0]
    if "://" in addr:
        raise ValueError(f"worker address {addr!r}: only tcp://HOST:PORT (or HOST:PORT) is supported")
    return addr


def _check_security(private_key: Any, ca: Any) -> None:
    if private_key is not None or ca != "trust_all_connections":
        raise NotImplementedError(
            "private_key/ca: use the job secret (MONARCH_JOB_TOKEN) and optional mutual TLS "
            "(MONARCH_TLS_CERT/KEY/CA, see docs/hosts.md); pass ca='trust_all_connections'"
        )


def run_worker_loop_forever(*, address: str, ca: Any = "trust_all_connections", private_key: Any = None) -> None:
    """Make this machine a host that a controller can attach (upstream's
    worker loop): runs the host agent ``monarch host --listen HOST:PORT``
    in the foreground until it is killed. Controllers attach it with
    ``attach_to_workers`` (same ``MONARCH_JOB_TOKEN`` on both sides)."""
    _check_security(private_key, ca)
    listen = _host_port(address)
    if listen.startswith("*:"):
        listen = "0.0.0.0:" + listen[2:]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(monarch_binary(), [monarch_binary(), "host", "--listen", listen])


def attach_to_workers(
    *, workers: Sequence[Any], ca: Any = "trust_all_connections", private_key: Any = None, name: str | None = None
) -> HostMesh:
    """A host mesh (dimension ``hosts``) of the workers at ``workers``
    (``tcp://HOST:PORT`` addresses of ``run_worker_loop_forever`` /
    ``monarch host`` agents; a ``Future`` of such an address is waited
    for)."""
    _check_security(private_key, ca)
    addrs = [_host_port(w.get() if isinstance(w, Future) else str(w)) for w in workers]
    return HostMesh.attach(addrs)
