# Futures: a pending result. `fetch`/`wait` never block the Julia
# scheduler (they sleep on the runtime's fd wakes) and take a timeout.

"""A pending result of a call, spawn, stop, port receive or transfer.
`fetch(f; timeout=60)` returns the converted result (a ValueMesh, one
value, ...) or throws; `wait(f; timeout)` only waits."""
mutable struct Future{T}
    ptr::Ptr{CAPI.monarch_future}
    convert::T
    what::String
    result::Any
    done::Bool
end

const DEFAULT_TIMEOUT = 60.0

function Future(ptr::Ptr{CAPI.monarch_future}, convert, what::AbstractString)
    f = Future(ptr, convert, String(what), nothing, false)
    finalizer(free!, f)
    return f
end

function free!(f::Future)
    p = f.ptr
    f.ptr = C_NULL
    p == C_NULL || CAPI.monarch_future_free(p)
    return
end
Base.close(f::Future) = free!(f)

"""Whether the future is complete (without waiting)."""
function Base.isready(f::Future)
    f.done && return true
    f.ptr == C_NULL && throw(ArgumentError("the future was closed"))
    r = Ref{Bool}(false)
    check(CAPI.monarch_future_poll(f.ptr, r))
    return r[]
end

function Base.wait(f::Future; timeout::Real = DEFAULT_TIMEOUT)
    isready(f) && return f
    rt = runtime()
    deadline = time() + timeout
    # A few turns of the scheduler first: most replies arrive within them.
    for _ in 1:64
        yield()
        isready(f) && return f
    end
    while !isready(f)
        remaining = deadline - time()
        remaining <= 0 && throw(TimeoutError("$(f.what) not complete after $(timeout) s"))
        is_running(rt) || throw(status_error(CAPI.MONARCH_ERR_STOPPED))
        wait_tick(rt, remaining)
    end
    return f
end

function Base.fetch(f::Future; timeout::Real = DEFAULT_TIMEOUT)
    f.done && return unwrap(f.result)
    wait(f; timeout = timeout)
    vm = Ref{Ptr{CAPI.monarch_value_mesh}}(C_NULL)
    st = CAPI.monarch_future_take(f.ptr, vm)
    f.done = true
    f.result = if st == CAPI.MONARCH_OK
        try
            f.convert(RawValueMesh(vm[]))
        catch e
            CapturedError(e)
        end
    else
        # The whole operation failed (PROC_FAILED: because its actors or procs did).
        try
            check_actors(st, f.what)
        catch e
            CapturedError(e)
        end
    end
    free!(f)
    return unwrap(f.result)
end

struct CapturedError
    e::Any
end
unwrap(x) = x
unwrap(x::CapturedError) = throw(x.e)
