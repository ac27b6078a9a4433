# Errors: a failed C call (MonarchError), failed endpoints (ActorError),
# failed meshes (SupervisionError), what an endpoint throws to fail its
# actor (ActorFailure), and waits that ran out (TimeoutError).

"""A libmonarch call that failed: its status code, name and message."""
struct MonarchError <: Exception
    status::Int32
    name::String
    message::String
end
Base.showerror(io::IO, e::MonarchError) = print(io, "MonarchError(", e.name, "): ", e.message)

"""A wait that ran out of time; nothing was lost."""
struct TimeoutError <: Exception
    what::String
end
Base.showerror(io::IO, e::TimeoutError) = print(io, "TimeoutError: ", e.what)

"""One failed point of a call: its rank, the remote message (with the
remote traceback), the remote exception when it came from Julia, and
whether the actor answered (false: a failure report of the runtime, for a
failed actor or proc)."""
struct Failure
    rank::Int
    message::String
    exception::Any
    answered::Bool
end

"""Endpoints that failed: the first failure's message, every failure, and
the remote exception (a Julia actor's, deserialized) when there is one."""
struct ActorError <: Exception
    message::String
    failures::Vector{Failure}
    total::Int
end
function Base.showerror(io::IO, e::ActorError)
    print(io, "ActorError: ", e.message)
    n = length(e.failures)
    n > 1 && print(io, "\n(", n - 1, " more of ", e.total, " points failed)")
end
"""The remote exception of the first failure (or `nothing`)."""
remote_exception(e::ActorError) = isempty(e.failures) ? nothing : e.failures[1].exception

"""An operation refused because the actors or procs it needed failed (a
proc that died, an actor that failed under a broadcast): libmonarch's
message, and the supervision event when one is known."""
struct SupervisionError <: Exception
    message::String
    event::Any
end
Base.showerror(io::IO, e::SupervisionError) = print(io, "SupervisionError: ", e.message)

"""
    ActorFailure(message)

Thrown by an endpoint to fail its actor (monarch_event_fail): the caller
gets the failure report (a SupervisionError), later calls to the actor
fail, and the actor's owner hears of it once. Any other exception only
fails the call (an ActorError), and the actor lives on.
"""
struct ActorFailure <: Exception
    message::String
end
Base.showerror(io::IO, e::ActorFailure) = print(io, "ActorFailure: ", e.message)

function status_error(status::Integer)
    msg = unsafe_string(CAPI.monarch_last_error())
    name = unsafe_string(CAPI.monarch_status_name(Int32(status)))
    return MonarchError(Int32(status), name, msg)
end

"""Throw a MonarchError unless `status` is MONARCH_OK."""
@inline function check(status::Integer)
    status == CAPI.MONARCH_OK || throw(status_error(status))
    return nothing
end

"""As `check`, for an operation on actors: a proc or actor that failed
(MONARCH_ERR_PROC_FAILED) is a SupervisionError, anything else a MonarchError."""
@inline function check_actors(status::Integer, what)
    status == CAPI.MONARCH_OK && return nothing
    err = status_error(status)
    status == CAPI.MONARCH_ERR_PROC_FAILED && throw(SupervisionError("$what: $(err.message)", nothing))
    throw(err)
end

"""Copy an owned buffer returned by libmonarch into a Vector and free it."""
function take_buffer(ptr::Ptr{UInt8}, len::Integer)
    ptr == C_NULL && return UInt8[]
    v = unsafe_wrap(Array, ptr, Int(len)) |> copy
    CAPI.monarch_buffer_free(ptr, len)
    return v
end

"""Call `f(outptr, outlen)` (a C function writing an owned buffer) and take it."""
function owned_bytes(f)
    out = Ref{Ptr{UInt8}}(C_NULL)
    n = Ref{Csize_t}(0)
    check(f(out, n))
    return take_buffer(out[], n[])
end

"""A string for a `const char *` argument (refused when it holds a NUL)."""
function cstr(s::AbstractString)
    str = String(s)
    occursin('\0', str) && throw(ArgumentError("string $(repr(str)) holds a NUL byte"))
    return str
end

"""Call `f(ptrs)` with a `const char *const *` array of `strs`, kept alive meanwhile."""
function with_cstrings(f, strs)
    ss = String[cstr(s) for s in strs]
    ptrs = Ptr{UInt8}[pointer(s) for s in ss]
    GC.@preserve ss ptrs begin
        return f(ptrs)
    end
end

"""Call `f(arr, n)` with a `monarch_bytes` array of `parts` (kept alive)."""
function with_parts(f, parts)
    ps = parts
    arr = CAPI.monarch_bytes[CAPI.monarch_bytes(isempty(p) ? Ptr{UInt8}(C_NULL) : pointer(p), length(p)) for p in ps]
    GC.@preserve ps arr begin
        return f(arr, Csize_t(length(arr)))
    end
end

"""A part: bytes as a Vector{UInt8}."""
as_part(b::Vector{UInt8}) = b
as_part(b::AbstractVector{UInt8}) = Vector{UInt8}(b)
as_part(s::AbstractString) = throw(ArgumentError("raw parts are bytes: pass Vector{UInt8} (e.g. Vector{UInt8}(\"text\")), not a string"))
as_part(x) = throw(ArgumentError("raw parts are bytes (Vector{UInt8}), got $(typeof(x))"))
