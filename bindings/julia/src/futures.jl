# Futures: a pending result. `fetch`/`wait` take a timeout and leave the
# Julia scheduler running. A task that is the only one waiting, while no
# other task is runnable and no actor handler is in progress (worker.jl),
# waits inside libmonarch (whose waiting thread reads
# the sockets itself: the fast path) in slices of at most BLOCK_MS, letting
# libuv and other tasks run between slices; otherwise tasks sleep on the
# runtime's notification fd (runtime.jl), woken by its task.

"""A pending result of a call, spawn, stop, port receive or transfer.
`fetch(f; timeout=60)` returns the converted result (a ValueMesh, one
value, ...) or throws; `wait(f; timeout)` only waits."""
mutable struct Future{T}
    ptr::Ptr{CAPI.monarch_future}
    convert::T
    what::Any      # a String, or (type, method) formatted only when needed
    result::Any
    done::Bool
end

const DEFAULT_TIMEOUT = 60.0

function Future(ptr::Ptr{CAPI.monarch_future}, convert, what)
    f = Future(ptr, convert, what, nothing, false)
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

# How many tasks are in `wait` on a future.
const WAITERS = Ref(0)

function Base.wait(f::Future; timeout::Real = DEFAULT_TIMEOUT)
    isready(f) && return f
    rt = runtime()
    deadline = time() + timeout
    WAITERS[] += 1
    try
        while !isready(f)
            remaining = deadline - time()
            remaining <= 0 && throw(TimeoutError("$(what_text(f.what)) not complete after $(timeout) s"))
            is_running(rt) || throw(status_error(CAPI.MONARCH_ERR_STOPPED))
            if WAITERS[] == 1 && HANDLING[] == 0 && !other_tasks_waiting()
                ms = clamp(round(Int64, min(remaining, 1.0) * 1000), 0, BLOCK_MS)
                st = CAPI.monarch_future_wait(f.ptr, ms)
                st == CAPI.MONARCH_OK && break
                st == CAPI.MONARCH_ERR_TIMEOUT || check(st)
                run_other_tasks()
            else
                wait_tick(rt, remaining)
            end
        end
    finally
        WAITERS[] -= 1
    end
    return f
end

what_text(w::AbstractString) = w
what_text(w::Tuple) = string(w[1], ".", w[2])

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
            check_actors(st, what_text(f.what))
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
