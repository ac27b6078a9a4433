# RDMA buffers: Julia arrays registered for one-sided reads and writes by
# other procs, and handles on other procs' buffers.

"""A registered buffer (`RDMABuffer(array)`: this process's `Vector{UInt8}`
or any bits-type Array, kept alive while registered) or another proc's
(`RDMABuffer(descriptor)` from the `RDMADescriptor` it sent)."""
mutable struct RDMABuffer
    ptr::Ptr{CAPI.monarch_rdma_buffer}
    memory::Any   # the registered array (owner's handle), kept alive
end

function RDMABuffer(a::Array{T}; read_only::Bool = false) where {T}
    isbitstype(T) || throw(ArgumentError("only arrays of bits types can be registered"))
    isempty(a) && throw(ArgumentError("cannot register an empty array"))
    out = Ref{Ptr{CAPI.monarch_rdma_buffer}}(C_NULL)
    flags = read_only ? UInt32(CAPI.MONARCH_RDMA_READ_ONLY) : UInt32(0)
    check(CAPI.monarch_rdma_register(runtime().ptr, Ptr{UInt8}(pointer(a)), sizeof(a), flags, UInt32(0), out))
    b = RDMABuffer(out[], a)
    finalizer(close, b)
    return b
end

"""The bytes describing a buffer (owner proc, id, size, how to reach it):
send them to another proc (any language), which opens the buffer with
`RDMABuffer(descriptor)`."""
struct RDMADescriptor
    bytes::Vector{UInt8}
end

"""Another proc's buffer, from its descriptor."""
function RDMABuffer(d::RDMADescriptor)
    out = Ref{Ptr{CAPI.monarch_rdma_buffer}}(C_NULL)
    check(CAPI.monarch_rdma_buffer_from_bytes(runtime().ptr, d.bytes, length(d.bytes), out))
    b = RDMABuffer(out[], nothing)
    finalizer(close, b)
    return b
end

handle(b::RDMABuffer) = b.ptr == C_NULL ? throw(ArgumentError("the buffer handle was closed")) : b.ptr

"""The descriptor to send to another proc, which opens the buffer with `RDMABuffer(descriptor)`."""
descriptor(b::RDMABuffer) = RDMADescriptor(owned_bytes((o, n) -> CAPI.monarch_rdma_buffer_to_bytes(handle(b), o, n)))

Base.sizeof(b::RDMABuffer) = (r = Ref{UInt64}(0); check(CAPI.monarch_rdma_buffer_size(handle(b), r)); Int(r[]))

"""Free the handle (an owner's handle unregisters the buffer first)."""
function Base.close(b::RDMABuffer)
    p = b.ptr
    b.ptr = C_NULL
    p == C_NULL || CAPI.monarch_rdma_buffer_free(p)
    b.memory = nothing
    return
end

function transfer(f, b::RDMABuffer, a::Array, offset, what, timeout)
    isbitstype(eltype(a)) || throw(ArgumentError("only arrays of bits types can be transferred"))
    out = Ref{Ptr{CAPI.monarch_future}}(C_NULL)
    GC.@preserve a begin
        check(f(handle(b), UInt64(offset), Ptr{UInt8}(pointer(a)), sizeof(a), out))
        fut = Future(out[], raw -> String(read_points(raw, raw_value)[2][1]), what)
        # The array must stay untouched until the copy ends, so this waits
        # (on the fd, not blocking the scheduler) and then returns the backend.
        try
            return fetch(fut; timeout = timeout)
        catch e
            e isa TimeoutError && (CAPI.monarch_future_wait(fut.ptr, -1))
            rethrow()
        end
    end
end

"""Copy `sizeof(dst)` bytes of the buffer from `offset` into `dst`; returns the backend name."""
read_into!(dst::Array, b::RDMABuffer; offset::Integer = 0, timeout::Real = DEFAULT_TIMEOUT) =
    transfer(CAPI.monarch_rdma_read_into, b, dst, offset, "RDMA read", timeout)

"""Copy `src` into the buffer at `offset`; returns the backend name."""
write_from!(b::RDMABuffer, src::Array; offset::Integer = 0, timeout::Real = DEFAULT_TIMEOUT) =
    transfer(CAPI.monarch_rdma_write_from, b, src, offset, "RDMA write", timeout)
