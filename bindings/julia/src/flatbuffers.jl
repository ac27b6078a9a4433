# Reading the two flatbuffer tables that cross the C ABI
# (core/schema/monarch.fbs): Shape and SupervisionEvent.

ru32(b, i) = ltoh(unsafe_load(Ptr{UInt32}(pointer(b, i + 1))))
ru16(b, i) = ltoh(unsafe_load(Ptr{UInt16}(pointer(b, i + 1))))

"""Position of field `id` of the table at `t`, or 0 when absent."""
function fb_field(b::Vector{UInt8}, t::Int, id::Int)
    vt = t - reinterpret(Int32, ru32(b, t))
    vtlen = ru16(b, vt)
    slot = 4 + 2 * id
    slot >= vtlen && return 0
    off = ru16(b, vt + slot)
    return off == 0 ? 0 : t + Int(off)
end
fb_root(b::Vector{UInt8}) = Int(ru32(b, 0))
fb_deref(b, p) = p + Int(ru32(b, p))
function fb_string(b, t, id)
    p = fb_field(b, t, id)
    p == 0 && return ""
    s = fb_deref(b, p)
    return String(b[s + 5:s + 4 + Int(ru32(b, s))])
end
function fb_u64s(b, t, id)
    p = fb_field(b, t, id)
    p == 0 && return UInt64[]
    v = fb_deref(b, p)
    return [ltoh(unsafe_load(Ptr{UInt64}(pointer(b, v + 5 + 8k)))) for k in 0:Int(ru32(b, v)) - 1]
end
function fb_strings(b, t, id)
    p = fb_field(b, t, id)
    p == 0 && return String[]
    v = fb_deref(b, p)
    out = String[]
    for k in 0:Int(ru32(b, v)) - 1
        e = v + 4 + 4k
        s = fb_deref(b, e)
        push!(out, String(b[s + 5:s + 4 + Int(ru32(b, s))]))
    end
    return out
end
function fb_bytes(b, t, id)
    p = fb_field(b, t, id)
    p == 0 && return UInt8[]
    v = fb_deref(b, p)
    return b[v + 5:v + 4 + Int(ru32(b, v))]
end
fb_scalar(::Type{T}, b, t, id, default) where {T} =
    (p = fb_field(b, t, id); p == 0 ? default : ltoh(unsafe_load(Ptr{T}(pointer(b, p + 1)))))

"""A mesh's shape: dimension names and sizes (row-major)."""
struct Shape
    labels::Vector{String}
    sizes::Vector{Int}
end
function parse_shape(b::Vector{UInt8})
    isempty(b) && return Shape(String[], Int[])
    t = fb_root(b)
    return Shape(fb_strings(b, t, 0), Int.(fb_u64s(b, t, 2)))
end
Base.length(s::Shape) = isempty(s.sizes) ? 1 : prod(s.sizes)

const FAILURE_CAUSES = Dict(0 => :exit_code, 1 => :signal, 2 => :endpoint_error, 3 => :heartbeat_lost,
    4 => :undeliverable, 5 => :connection_lost, 6 => :supervisor_failed, 7 => :spawn_failed)

"""A failure of (part of) a mesh, for its owner (see docs/supervision.md)."""
struct SupervisionEvent
    mesh::String
    mesh_key::String
    ranks::Vector{Int}
    proc::String
    actor::String
    owner::String
    cause::Symbol
    code::Int32
    report::String
    caused_by::Union{Nothing, SupervisionEvent}
    payload::Vector{UInt8}
end

function parse_supervision(b::Vector{UInt8}, t::Int = fb_root(b))
    cb = fb_field(b, t, 10)
    cause = get(FAILURE_CAUSES, Int(fb_scalar(UInt8, b, t, 7, 0x00)), :unknown)
    return SupervisionEvent(fb_string(b, t, 1), fb_string(b, t, 2), Int.(fb_u64s(b, t, 3)), fb_string(b, t, 4),
        fb_string(b, t, 5), fb_string(b, t, 6), cause, fb_scalar(Int32, b, t, 8, Int32(0)), fb_string(b, t, 9),
        cb == 0 ? nothing : parse_supervision(b, fb_deref(b, cb)), fb_bytes(b, t, 11))
end
