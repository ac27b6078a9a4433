# Actor meshes: spawning Julia actors (or any language's, raw), calling
# their endpoints (call, call_one, choose, broadcast, stream), stopping.

"""An n-d array of actors. `mesh.name` is an `Endpoint` for `call(mesh.name, args...)`."""
mutable struct ActorMesh <: AbstractMesh
    ptr::Ptr{CAPI.monarch_actor_mesh}
    name::String
    type::Any          # the Julia type, or the type name of a raw (native) mesh
    native::Bool       # every endpoint raw
end
ops(::Type{ActorMesh}) = (shape = CAPI.monarch_actor_mesh_shape, slice_index = CAPI.monarch_actor_mesh_slice_index,
    slice_range = CAPI.monarch_actor_mesh_slice_range, flatten = CAPI.monarch_actor_mesh_flatten,
    rename = CAPI.monarch_actor_mesh_rename, split = CAPI.monarch_actor_mesh_split, free = CAPI.monarch_actor_mesh_free)
derive(m::ActorMesh, p) = managed(ActorMesh(p, getfield(m, :name), getfield(m, :type), getfield(m, :native)))
Base.show(io::IO, m::ActorMesh) = print(io, "ActorMesh(", repr(getfield(m, :name)), " of ", getfield(m, :type), ", ",
    getfield(m, :ptr) == C_NULL ? "closed" : sizes(m), ")")

"""One endpoint of an actor mesh."""
struct Endpoint
    mesh::ActorMesh
    name::Symbol
end
Base.getproperty(m::ActorMesh, s::Symbol) = s in fieldnames(ActorMesh) ? getfield(m, s) : Endpoint(m, s)

"""The name libmonarch carries for a Julia type (its module path and name)."""
type_name(T::Type) = string(parentmodule(T), ".", nameof(T))

function spawn_mesh(pm::ProcMesh, name, tname, parts, what, timeout, wait::Bool, julia_actors::Bool)
    mesh = Ref{Ptr{CAPI.monarch_actor_mesh}}(C_NULL)
    ready = Ref{Ptr{CAPI.monarch_future}}(C_NULL)
    claim_spawns(runtime())
    with_parts(parts) do arr, n
        check_actors(CAPI.monarch_actor_mesh_spawn(handle(pm), cstr(name), cstr(tname), arr, n, mesh, ready), what)
    end
    fut = Future(ready[], all_points(raw_value, what, julia_actors), what)
    wait || return mesh[]
    try
        fetch(fut; timeout = timeout)
    catch
        CAPI.monarch_actor_mesh_free(mesh[])
        rethrow()
    end
    return mesh[]
end

"""
    spawn(procs, "name", ActorType, args...; timeout=120, wait=true) -> ActorMesh

One `ActorType(args...)` on every proc (a Julia worker, where the type is
defined because the worker runs the same script). Waits until every
constructor ran. A constructor that throws fails its actor: `spawn` throws
a SupervisionError with the failure report (naming the constructor's
exception), the mesh's owner hears of it once (a supervision event), and
later calls to that actor fail with the same report. With `wait=false` it
returns at once (messages wait for construction; a failed constructor then
fails them with SupervisionError).
"""
function spawn(pm::ProcMesh, name::AbstractString, T::Type, args...; timeout::Real = 120, wait::Bool = true)
    p = spawn_mesh(pm, name, type_name(T), [serialize_bytes(args)], "spawning $name of $T", timeout, wait, true)
    return managed(ActorMesh(p, String(name), T, false))
end

"""
    spawn_native(procs, "name", "TypeName", parts::Vector{UInt8}...) -> ActorMesh

Spawn actors of any language by type name with raw argument parts: a
`monarch worker --plugin` type ("CCounter"), a Python actor
("module:Class"), a Julia one ("Module:Type"). Every endpoint is raw.
"""
function spawn_native(pm::ProcMesh, name::AbstractString, tname::AbstractString, parts...; timeout::Real = 120,
                      wait::Bool = true)
    p = spawn_mesh(pm, name, tname, [as_part(x) for x in parts], "spawning $name of $tname", timeout, wait, false)
    return managed(ActorMesh(p, String(name), String(tname), true))
end

function encoding(m::ActorMesh, method::Symbol)
    getfield(m, :native) && return true
    return find_endpoint(getfield(m, :type), method)[2]
end
encode(raw::Bool, args) = raw ? [as_part(x) for x in args] : [serialize_bytes(args)]
decoder(raw::Bool) = raw ? raw_value : julia_value
describe(m::ActorMesh, method) = (getfield(m, :type), method)

function start_call(m::ActorMesh, method::Symbol, args, mode)
    raw = encoding(m, method)
    out = Ref{Ptr{CAPI.monarch_future}}(C_NULL)
    with_parts(encode(raw, args)) do arr, n
        st = CAPI.monarch_actor_mesh_call(handle(m), cstr(String(method)), arr, n, UInt32(mode), out)
        st == CAPI.MONARCH_OK || check_actors(st, what_text(describe(m, method)))
    end
    return raw, out[]
end

"""Call `method` on every actor: a Future of the ValueMesh of replies."""
function call(m::ActorMesh, method::Symbol, args...)
    raw, f = start_call(m, method, args, CAPI.MONARCH_CALL_ALL)
    what = describe(m, method)
    return Future(f, all_points(decoder(raw), what, !getfield(m, :native)), what)
end
"""Call `method` of the mesh's single actor: a Future of its reply."""
function call_one(m::ActorMesh, method::Symbol, args...)
    raw, f = start_call(m, method, args, CAPI.MONARCH_CALL_ONE)
    what = describe(m, method)
    return Future(f, one_point(decoder(raw), what, !getfield(m, :native)), what)
end
"""Call `method` of one actor chosen by the runtime: a Future of its reply."""
function choose(m::ActorMesh, method::Symbol, args...)
    raw, f = start_call(m, method, args, CAPI.MONARCH_CALL_CHOOSE)
    what = describe(m, method)
    return Future(f, one_point(decoder(raw), what, !getfield(m, :native)), what)
end
"""Send to every actor, nobody answers; a failure goes to the mesh's owner."""
function Base.broadcast(m::ActorMesh, method::Symbol, args...)
    start_call(m, method, args, CAPI.MONARCH_CALL_BROADCAST)
    return nothing
end

"""Call `method` on every actor and stream the replies as they arrive: a
Channel yielding one value per actor (an error closes it with ActorError)."""
function stream(m::ActorMesh, method::Symbol, args...; timeout::Real = DEFAULT_TIMEOUT)
    raw = encoding(m, method)
    n = length(m)
    out = Ref{Ptr{CAPI.monarch_port_receiver}}(C_NULL)
    with_parts(encode(raw, args)) do arr, k
        check_actors(CAPI.monarch_actor_mesh_stream(handle(m), cstr(String(method)), arr, k, out),
            what_text(describe(m, method)))
    end
    rx = managed_receiver(out[], decoder(raw), what_text(describe(m, method)))
    return Channel{Any}(n) do ch
        try
            for _ in 1:n
                put!(ch, fetch(recv(rx); timeout = timeout))
            end
        finally
            close(rx)
        end
    end
end

call(e::Endpoint, args...) = call(e.mesh, e.name, args...)
call_one(e::Endpoint, args...) = call_one(e.mesh, e.name, args...)
choose(e::Endpoint, args...) = choose(e.mesh, e.name, args...)
Base.broadcast(e::Endpoint, args...) = Base.broadcast(e.mesh, e.name, args...)
# Base has broadcast(f, x::Number...): this one is more specific for endpoints.
Base.broadcast(e::Endpoint, args::Number...) = Base.broadcast(e.mesh, e.name, args...)
stream(e::Endpoint, args...; kw...) = stream(e.mesh, e.name, args...; kw...)

"""Stop the actors (their procs keep running): a Future of completion."""
function stop(m::ActorMesh)
    out = Ref{Ptr{CAPI.monarch_future}}(C_NULL)
    check(CAPI.monarch_actor_mesh_stop(handle(m), out))
    return Future(out[], raw -> (read_points(raw, raw_value); nothing), "stopping $(getfield(m, :name))")
end
