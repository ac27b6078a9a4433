# Views shared by host, proc and actor meshes: shape, slice, split,
# flatten, rename. Each mesh type names its C functions in `ops`.

abstract type AbstractMesh end

"""Free the handle of a mesh (also done by its finalizer); safe twice."""
function Base.close(m::AbstractMesh)
    p = getfield(m, :ptr)
    setfield!(m, :ptr, typeof(p)(C_NULL))
    p == C_NULL || ops(typeof(m)).free(p)
    return
end
handle(m::AbstractMesh) = (p = getfield(m, :ptr); p == C_NULL && throw(ArgumentError("the mesh handle was closed")); p)

"""Register the finalizer of a new mesh object."""
managed(m::AbstractMesh) = (finalizer(close, m); m)

function shape(m::AbstractMesh)
    h = handle(m)
    return parse_shape(owned_bytes((o, n) -> ops(typeof(m)).shape(h, o, n)))
end
"""The dimension sizes, as a NamedTuple (e.g. `(hosts = 1, gpus = 4)`)."""
sizes(m::AbstractMesh) = (s = shape(m); NamedTuple{Tuple(Symbol.(s.labels))}(Tuple(s.sizes)))
labels(m::AbstractMesh) = shape(m).labels
Base.size(m::AbstractMesh) = Tuple(shape(m).sizes)
Base.length(m::AbstractMesh) = length(shape(m))

function new_view(m::AbstractMesh, f)
    out = Ref{Ptr{eltype(typeof(getfield(m, :ptr)))}}(C_NULL)
    check(f(out))
    return derive(m, out[])
end

"""A view of the mesh: `slice(m; gpus=1)` fixes a dimension (removing it),
`slice(m; gpus=1:2)` keeps indices 1 and 2 (0-based, a step range keeps its
step). Several dimensions may be given at once."""
function slice(m::AbstractMesh; dims...)
    isempty(dims) && throw(ArgumentError("slice: name at least one dimension"))
    out = m
    for (label, sel) in pairs(dims)
        h = handle(out)
        o = ops(typeof(m))
        out = if sel isa Integer
            sel < 0 && throw(ArgumentError("slice: index $sel of $label is negative"))
            new_view(out, r -> o.slice_index(h, cstr(String(label)), Csize_t(sel), r))
        elseif sel isa AbstractRange{<:Integer}
            isempty(sel) && throw(ArgumentError("slice: empty range for $label"))
            new_view(out, r -> o.slice_range(h, cstr(String(label)), Int64(first(sel)), Int64(last(sel) + 1), Int64(step(sel)), r))
        else
            throw(ArgumentError("slice: $label must be an index or a range, got $(typeof(sel))"))
        end
    end
    return out
end

"""All dimensions merged into one named `label` (row-major)."""
function flatten(m::AbstractMesh, label::AbstractString)
    h = handle(m)
    return new_view(m, r -> ops(typeof(m)).flatten(h, cstr(label), r))
end

"""Dimensions renamed: `rename(m, :gpus => :workers, ...)`."""
function rename(m::AbstractMesh, pairs::Pair...)
    h = handle(m)
    from = [String(Symbol(p.first)) for p in pairs]
    to = [String(Symbol(p.second)) for p in pairs]
    return with_cstrings(from) do f
        with_cstrings(to) do t
            new_view(m, r -> ops(typeof(m)).rename(h, f, t, Csize_t(length(pairs)), r))
        end
    end
end

"""Dimension `label` split into several: `split(m, :gpus; nodes=2, local=0)`
(a size 0 is inferred from the others)."""
function Base.split(m::AbstractMesh, label::Union{Symbol, AbstractString}; dims...)
    h = handle(m)
    names = [String(k) for k in keys(dims)]
    szs = Csize_t[v for v in values(dims)]
    return with_cstrings(names) do n
        new_view(m, r -> ops(typeof(m)).split(h, cstr(String(label)), n, szs, Csize_t(length(names)), r))
    end
end
