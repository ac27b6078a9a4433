# Julia actors with raw-bytes endpoints, hosted by Julia worker procs that a
# controller of another language starts with the argv
# `julia --startup-file=no tests/cross_language/julia_actors.jl`
# (test_julia.py: a Python controller). Spawned by type name "Main:JCounter"
# or "Main:JSlow".

pushfirst!(LOAD_PATH, joinpath(@__DIR__, "..", "..", "bindings", "julia"))
using Monarch
using Monarch: @endpoint, current_rank

i64(v) = reinterpret(UInt8, [Int64(v)])

"""Constructed from an optional 8-byte little-endian start value."""
mutable struct JCounter
    n::Int64
    function JCounter(parts::Vector{UInt8}...)
        length(parts) <= 1 || throw(ArgumentError("JCounter takes at most one part"))
        isempty(parts) && return new(0)
        length(parts[1]) == 8 || throw(ArgumentError("JCounter: start must be 8 bytes"))
        return new(reinterpret(Int64, parts[1])[1])
    end
end
@endpoint raw function incr(c::JCounter, by::Vector{UInt8})
    length(by) == 8 || throw(ArgumentError("JCounter.incr takes one 8-byte part"))
    c.n += reinterpret(Int64, by)[1]
    return i64(c.n)
end
@endpoint raw rank(c::JCounter) = i64(current_rank().rank)
@endpoint raw echo(c::JCounter, parts::Vector{UInt8}...) = parts
@endpoint raw upper(c::JCounter, data::Vector{UInt8}) = Vector{UInt8}(uppercase(String(copy(data))))
@endpoint raw fail(c::JCounter, parts::Vector{UInt8}...) = error("JCounter.fail with $(length(parts)) parts")
@endpoint raw read_buffer(c::JCounter, desc::Vector{UInt8}, n::Vector{UInt8}) = begin
    buf = Monarch.RDMABuffer(Monarch.RDMADescriptor(desc))
    dst = zeros(UInt8, reinterpret(Int64, n)[1])
    Monarch.read_into!(dst, buf)
    close(buf)
    dst
end

"""The callee of a caller that dies while it computes the answer
(test_julia.py): `nap` touches the file named by its first part, sleeps
for its second (8-byte milliseconds), counts and answers."""
mutable struct JSlow
    answered::Int64
    JSlow() = new(0)
end
@endpoint raw pid(s::JSlow) = i64(getpid())
@endpoint raw function nap(s::JSlow, started::Vector{UInt8}, ms::Vector{UInt8})
    touch(String(copy(started)))
    sleep(reinterpret(Int64, ms)[1] / 1000)
    s.answered += 1
    return i64(s.answered)
end
@endpoint raw answered(s::JSlow) = i64(s.answered)

Monarch.serve_if_worker()
error("julia_actors.jl is a worker script: a controller starts it as a proc")
