# Introspection: a snapshot of this controller's job (monarch_runtime_introspect,
# the Introspection table of core/schema/monarch.fbs) and stopping a mesh by name.

const ENTITY_STATES = Dict(0 => :starting, 1 => :ready, 2 => :failed, 3 => :stopped)
entity_state(b, t, id) = get(ENTITY_STATES, Int(fb_scalar(UInt8, b, t, id, 0x00)), :unknown)

"""One actor hosted by a proc and its counters; `handler_hist[1]` counts handlers
under 1 us, `handler_hist[i]` those in [2^(i-2), 2^(i-1)) us, the last is open-ended."""
struct ActorStats
    key::String
    mesh::String
    rank::Int
    state::Symbol
    messages::Int
    errors::Int
    queue_depth::Int
    handler_ns::Int
    handler_hist::Vector{Int}
    last_error::String
end

"""One proc of the job (the controller first in `JobSnapshot.procs`)."""
struct ProcInfo
    addr::String
    host::String
    pid::Int
    mesh::String
    rank::Int
    state::Symbol
    error::String
    actors::Vector{ActorStats}
    answered::Bool
end

"""One mesh the controller spawned (`key` is "" for a proc mesh)."""
struct MeshInfo
    name::String
    key::String
    state::Symbol
    procs::Vector{String}
end

"""A snapshot of the controller's job."""
struct JobSnapshot
    controller::String
    procs::Vector{ProcInfo}
    meshes::Vector{MeshInfo}
end

"""The tables of the vector field `id` of the table at `t`."""
function fb_tables(b, t, id)
    p = fb_field(b, t, id)
    p == 0 && return Int[]
    v = fb_deref(b, p)
    return [fb_deref(b, v + 4 + 4k) for k in 0:Int(ru32(b, v)) - 1]
end

parse_actor_stats(b, t) = ActorStats(fb_string(b, t, 0), fb_string(b, t, 1), Int(fb_scalar(UInt64, b, t, 2, UInt64(0))),
    entity_state(b, t, 3), Int(fb_scalar(UInt64, b, t, 4, UInt64(0))), Int(fb_scalar(UInt64, b, t, 5, UInt64(0))),
    Int(fb_scalar(UInt64, b, t, 6, UInt64(0))), Int(fb_scalar(UInt64, b, t, 7, UInt64(0))), Int.(fb_u64s(b, t, 8)),
    fb_string(b, t, 9))

parse_proc_info(b, t) = ProcInfo(fb_string(b, t, 0), fb_string(b, t, 1), Int(fb_scalar(UInt32, b, t, 2, UInt32(0))),
    fb_string(b, t, 3), Int(fb_scalar(UInt64, b, t, 4, UInt64(0))), entity_state(b, t, 5), fb_string(b, t, 6),
    [parse_actor_stats(b, a) for a in fb_tables(b, t, 7)], fb_scalar(UInt8, b, t, 8, 0x00) != 0x00)

function parse_introspection(b::Vector{UInt8})
    length(b) < 8 && throw(ArgumentError("malformed Introspection flatbuffer"))
    t = fb_root(b)
    meshes = [MeshInfo(fb_string(b, m, 0), fb_string(b, m, 1), entity_state(b, m, 2), fb_strings(b, m, 3))
              for m in fb_tables(b, t, 2)]
    return JobSnapshot(fb_string(b, t, 0), [parse_proc_info(b, p) for p in fb_tables(b, t, 1)], meshes)
end

"""A snapshot of this process's job: its procs (host, pid, state), the actors
they host with their counters, and its meshes; waits up to `timeout` seconds in
all for the procs' answers (a proc that does not answer in time has
`answered == false` and no actors)."""
function introspect(; timeout::Real = 5)
    timeout < 0 && throw(ArgumentError("timeout must be >= 0"))
    ms = Int64(round(timeout * 1000))
    return parse_introspection(owned_bytes((o, n) -> CAPI.monarch_runtime_introspect(runtime().ptr, ms, o, n)))
end

"""Stop mesh `name` (as named in a snapshot) that this process spawned: a proc
mesh's procs, or an actor mesh's actors."""
stop_mesh(name::AbstractString) = check(CAPI.monarch_runtime_stop_mesh(runtime().ptr, String(name)))
