# ValueMesh: the gathered replies of a call, one value per point of the
# called mesh; points and their coordinates.

"""A point of a mesh: its rank and its coordinates (a NamedTuple)."""
struct Point
    rank::Int
    coords::NamedTuple
end
Base.getproperty(p::Point, s::Symbol) = s in (:rank, :coords) ? getfield(p, s) : getfield(getfield(p, :coords), s)
Base.show(io::IO, p::Point) = print(io, "Point(", p.rank, ", ", p.coords, ")")

"""The coordinates of `rank` in row-major order of `shape`."""
function coords_of(shape::Shape, rank::Integer)
    c = zeros(Int, length(shape.sizes))
    r = Int(rank)
    for i in length(shape.sizes):-1:1
        c[i] = r % shape.sizes[i]
        r = r ÷ shape.sizes[i]
    end
    return NamedTuple{Tuple(Symbol.(shape.labels))}(Tuple(c))
end

"""The gathered replies of a call: iterate `(point, value)` pairs, index by
rank (`vm[rank+1]` as a vector) or by coordinates (`vm[gpus=1]`)."""
struct ValueMesh{T}
    shape::Shape
    values::Vector{T}
end
Base.length(v::ValueMesh) = length(v.values)
Base.values(v::ValueMesh) = v.values
Base.collect(v::ValueMesh) = [(Point(r - 1, coords_of(v.shape, r - 1)), x) for (r, x) in enumerate(v.values)]
function Base.iterate(v::ValueMesh, r::Int = 0)
    r >= length(v.values) && return nothing
    return ((Point(r, coords_of(v.shape, r)), v.values[r + 1]), r + 1)
end
Base.getindex(v::ValueMesh, i::Integer) = v.values[i]
function Base.getindex(v::ValueMesh; coords...)
    length(coords) == length(v.shape.labels) ||
        throw(ArgumentError("give every dimension of $(v.shape.labels), got $(keys(coords))"))
    rank = 0
    for (l, n) in zip(v.shape.labels, v.shape.sizes)
        i = coords[Symbol(l)]
        0 <= i < n || throw(BoundsError(v, i))
        rank = rank * n + i
    end
    return v.values[rank + 1]
end
"""The dimension sizes, as a NamedTuple."""
sizes(v::ValueMesh) = NamedTuple{Tuple(Symbol.(v.shape.labels))}(Tuple(v.shape.sizes))
Base.size(v::ValueMesh) = Tuple(v.shape.sizes)
labels(v::ValueMesh) = copy(v.shape.labels)
Base.show(io::IO, v::ValueMesh) = print(io, "ValueMesh(", sizes(v), ", ", v.values, ")")

"""A value mesh as libmonarch returned it; freed once converted."""
struct RawValueMesh
    ptr::Ptr{CAPI.monarch_value_mesh}
end

"""Read every point of `raw`: returns (shape, values or failures), freeing it.
`decode(parts::Vector{Vector{UInt8}})` turns one point's parts into a value."""
function read_points(raw::RawValueMesh, decode, want_shape::Bool = true, julia_actors::Bool = false)
    ptr = raw.ptr
    try
        shape = want_shape ? parse_shape(owned_bytes((o, n) -> CAPI.monarch_value_mesh_shape(ptr, o, n))) :
            Shape(String[], Int[])
        n = Ref{Csize_t}(0)
        check(CAPI.monarch_value_mesh_len(ptr, n))
        values = Vector{Any}(undef, n[])
        failures = Failure[]
        iserr = Ref{Bool}(false)
        err = Ref{Ptr{UInt8}}(C_NULL)
        np = Ref{Csize_t}(0)
        for r in 0:Int(n[]) - 1
            check(CAPI.monarch_value_mesh_point(ptr, r, iserr, err, np))
            parts = point_parts(ptr, r, Int(np[]))
            if iserr[]
                msg = err[] == C_NULL ? "" : unsafe_string(err[])
                # A Julia actor's error answer always has a part; other languages' may not.
                push!(failures, Failure(r, msg, remote_exception_of(parts), !julia_actors || !isempty(parts)))
                values[r + 1] = nothing
            else
                values[r + 1] = decode(parts)
            end
        end
        return shape, values, failures
    finally
        CAPI.monarch_value_mesh_free(ptr)
    end
end

function point_parts(ptr, r, np)
    parts = Vector{Vector{UInt8}}(undef, np)
    d = Ref{Ptr{UInt8}}(C_NULL)
    l = Ref{Csize_t}(0)
    for i in 0:np - 1
        check(CAPI.monarch_value_mesh_part(ptr, r, i, d, l))
        parts[i + 1] = l[] == 0 ? UInt8[] : copy(unsafe_wrap(Array, d[], Int(l[])))
    end
    return parts
end

"""The Julia exception an error answer carries (a Julia actor's), or nothing."""
function remote_exception_of(parts)
    isempty(parts) && return nothing
    return try
        deserialize_bytes(parts[1])
    catch
        nothing
    end
end

const JULIA_MAGIC = UInt8[0x37, 0x4a, 0x4c]  # what Serialization writes first ("7JL")

function deserialize_bytes(b::Vector{UInt8})
    (length(b) >= 3 && b[1:3] == JULIA_MAGIC) || throw(ArgumentError("not a Julia serialization"))
    return deserialize(IOBuffer(b))
end
function serialize_bytes(x)
    io = IOBuffer()
    serialize(io, x)
    return take!(io)
end

"""Raw parts as a value: none -> nothing, one -> its bytes, more -> a tuple."""
raw_value(parts::Vector{Vector{UInt8}}) = isempty(parts) ? nothing : length(parts) == 1 ? parts[1] : Tuple(parts)
julia_value(parts::Vector{Vector{UInt8}}) = isempty(parts) ? nothing : deserialize_bytes(parts[1])

"""Throw for failed points: ActorError when an actor answered with an
error, else (only failure reports of the runtime) SupervisionError."""
function raise_failures(failures, total, what)
    isempty(failures) && return
    msg = failures[1].message
    msg = isempty(msg) ? "$(what_text(what)) failed" : msg
    any(f -> f.answered, failures) || throw(SupervisionError(msg, nothing))
    throw(ActorError(msg, failures, total))
end

"""Converters for futures: every point (a ValueMesh) or the single one.
`julia_actors`: the points come from Julia actors (whose error answers
always have a part; one without is a failure report)."""
function all_points(decode, what, julia_actors::Bool = false)
    return raw -> begin
        shape, values, failures = read_points(raw, decode, true, julia_actors)
        raise_failures(failures, length(values), what)
        ValueMesh(shape, values)
    end
end
function one_point(decode, what, julia_actors::Bool = false)
    return raw -> begin
        _, values, failures = read_points(raw, decode, false, julia_actors)
        raise_failures(failures, length(values), what)
        length(values) == 1 || throw(ArgumentError("$(what_text(what)): expected one reply, got $(length(values))"))
        values[1]
    end
end
