"""A snapshot of this controller's job: its procs (host, pid, state), the
actors they host with their counters, and its meshes (docs/operating.md).

``introspect()`` wraps ``monarch_runtime_introspect`` and decodes its
``Introspection`` flatbuffer; ``stop_mesh(name)`` wraps
``monarch_runtime_stop_mesh``. ``monarch top`` shows the same snapshot of
a running controller from another terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._lib import check, ffi, lib, runtime, take_buffer

#: ``EntityState`` values of the schema, by number.
STATES = ("starting", "ready", "failed", "stopped")


@dataclass
class ActorStats:
    key: str
    mesh: str
    rank: int
    state: str
    messages: int
    errors: int
    queue_depth: int
    handler_ns: int
    #: ``handler_hist[0]``: handlers under 1 us; ``[i]``: in [2^(i-1), 2^i)
    #: us; the last bucket is open-ended.
    handler_hist: list[int] = field(default_factory=list)
    last_error: str = ""


@dataclass
class ProcInfo:
    addr: str
    host: str
    pid: int
    mesh: str
    rank: int
    state: str
    error: str
    answered: bool
    actors: list[ActorStats] = field(default_factory=list)


@dataclass
class MeshInfo:
    name: str
    #: Actor key of an actor mesh; "" for a proc mesh.
    key: str
    state: str
    procs: list[str] = field(default_factory=list)


@dataclass
class JobSnapshot:
    controller: str
    #: The controller first, then every proc it started.
    procs: list[ProcInfo]
    meshes: list[MeshInfo]

    def actors(self) -> list[tuple[ProcInfo, ActorStats]]:
        """Every actor with its proc."""
        return [(p, a) for p in self.procs for a in p.actors]


def _s(b) -> str:
    return b.decode() if b is not None else ""


def _state(n: int) -> str:
    return STATES[n] if 0 <= n < len(STATES) else f"unknown({n})"


def decode(data: bytes) -> JobSnapshot:
    """Decode an ``Introspection`` flatbuffer."""
    from .schema.Introspection import Introspection

    r = Introspection.GetRootAs(data, 0)
    procs = []
    for i in range(r.ProcsLength()):
        p = r.Procs(i)
        actors = []
        for j in range(p.ActorsLength()):
            a = p.Actors(j)
            actors.append(
                ActorStats(
                    key=_s(a.Key()),
                    mesh=_s(a.Mesh()),
                    rank=a.Rank(),
                    state=_state(a.State()),
                    messages=a.Messages(),
                    errors=a.Errors(),
                    queue_depth=a.QueueDepth(),
                    handler_ns=a.HandlerNs(),
                    handler_hist=[a.HandlerHist(k) for k in range(a.HandlerHistLength())],
                    last_error=_s(a.LastError()),
                )
            )
        procs.append(
            ProcInfo(
                addr=_s(p.Addr()),
                host=_s(p.Host()),
                pid=p.Pid(),
                mesh=_s(p.Mesh()),
                rank=p.Rank(),
                state=_state(p.State()),
                error=_s(p.Error()),
                answered=p.Answered(),
                actors=actors,
            )
        )
    meshes = []
    for i in range(r.MeshesLength()):
        m = r.Meshes(i)
        meshes.append(
            MeshInfo(
                name=_s(m.Name()),
                key=_s(m.Key()),
                state=_state(m.State()),
                procs=[_s(m.Procs(k)) for k in range(m.ProcsLength())],
            )
        )
    return JobSnapshot(controller=_s(r.Controller()), procs=procs, meshes=meshes)


def introspect(timeout: float = 5.0) -> JobSnapshot:
    """A snapshot of this process's job; waits up to ``timeout`` seconds in
    all for the procs' answers (a proc that does not answer in time is
    listed with ``answered`` false and no actors)."""
    if timeout < 0:
        raise ValueError("timeout must be >= 0")
    out = ffi.new("uint8_t **")
    n = ffi.new("size_t *")
    check(lib.monarch_runtime_introspect(runtime(), int(timeout * 1000), out, n), "introspect")
    return decode(take_buffer(out[0], n[0]))


def stop_mesh(name: str) -> None:
    """Stop mesh ``name`` (as named in a snapshot) spawned by this process:
    a proc mesh's procs, or an actor mesh's actors."""
    check(lib.monarch_runtime_stop_mesh(runtime(), name.encode()), f"stop_mesh {name!r}")
