"""
Monarch: Julia controllers and Julia actors over libmonarch's C ABI.

One file per concept: `library.jl` (finding and checking libmonarch, the
generated ccall layer), `errors.jl`, `flatbuffers.jl` (the Shape and
SupervisionEvent tables), `runtime.jl` (lifetime and the notification fd),
`futures.jl`, `values.jl` (ValueMesh), `views.jl` (slicing shared by every
mesh), `procs.jl` (host and proc meshes), `actors.jl` (actor meshes and
calls), `endpoints.jl` (declaring a type's endpoints), `ports.jl`,
`hosted.jl` (handling an actor's events), `worker.jl` (serving actors, one task each), `rdma.jl`,
`introspect.jl` (the job's procs, actors and meshes).
"""
module Monarch

using Libdl
using Serialization
using FileWatching

export Runtime, shutdown, this_host, this_proc, spawn_procs, attach_hosts, slurm_hosts, HostMesh, ProcMesh,
    ActorMesh, Endpoint, spawn, spawn_native, call, call_one, choose, stream, stop, Future, ValueMesh,
    Point, slice, flatten, rename, sizes, labels, open_port, PortRef, PortReceiver, send, send_parts, send_error, recv,
    MonarchError, ActorError, SupervisionError, SupervisionEvent, next_supervision_event, @endpoint,
    serve_if_worker, current_rank, ActorFailure, to_ref, proc_mesh_from_ref, RDMABuffer, RDMADescriptor, descriptor, read_into!, write_from!, TimeoutError,
    introspect, stop_mesh, JobSnapshot,
    ProgressEvent, Progress, watch_progress, next_progress_event, set_progress!, finish!

include("library.jl")
include("errors.jl")
include("flatbuffers.jl")
include("runtime.jl")
include("futures.jl")
include("values.jl")
include("views.jl")
include("procs.jl")
include("endpoints.jl")
include("actors.jl")
include("ports.jl")
include("hosted.jl")
include("worker.jl")
include("rdma.jl")
include("introspect.jl")
include("progress.jl")

function __init__()
    load_library!()
end

end # module
