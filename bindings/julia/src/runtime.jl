# The runtime of this process: its lifetime, and the task that watches its
# notification fd (readable when a future completes or an event arrives)
# and wakes the tasks waiting for either, so no wait blocks the scheduler.

"""This process's runtime (one per process). `Runtime()` starts it (or
returns the running one); `shutdown()` stops it and the procs it started."""
mutable struct Runtime
    ptr::Ptr{CAPI.monarch_runtime}
    is_worker::Bool
    # Notified on every wake of the fd: futures and the event loop re-check.
    tick::Condition
    watcher::Any
    pump::Union{Nothing, Task}
end

const RUNTIME = Ref{Union{Nothing, Runtime}}(nothing)

function Runtime()
    rt = RUNTIME[]
    rt === nothing || return rt
    out = Ref{Ptr{CAPI.monarch_runtime}}(C_NULL)
    check(CAPI.monarch_runtime_new(out))
    w = Ref{Bool}(false)
    check(CAPI.monarch_runtime_is_worker(out[], w))
    rt = Runtime(out[], w[], Condition(), nothing, nothing)
    RUNTIME[] = rt
    start_pump!(rt)
    atexit(shutdown)
    return rt
end

"""The running runtime, started on first use."""
runtime() = (rt = RUNTIME[]; rt === nothing ? Runtime() : rt)
is_running(rt::Runtime) = rt.ptr != C_NULL

# Asking for the fd has libmonarch's I/O thread read the sockets for the
# tasks sleeping on it; a wait inside libmonarch (futures.jl, worker.jl)
# reads them itself and ends that, so every sleep on the fd asks again.
function watch_fd(rt::Runtime)
    fd = Ref{Cint}(-1)
    check(CAPI.monarch_runtime_fd(rt.ptr, fd))
    return fd[]
end

function start_pump!(rt::Runtime)
    rt.watcher = FileWatching.FDWatcher(RawFD(watch_fd(rt)), true, false)
    rt.pump = @async begin
        try
            while is_running(rt)
                wait(rt.watcher)
                is_running(rt) || break
                CAPI.monarch_runtime_clear_fd(rt.ptr)
                notify(rt.tick)
            end
        catch e
            is_running(rt) && @error "monarch: the notification task stopped" exception = e
        finally
            notify(rt.tick)
        end
    end
    return
end

# The longest a wait stays inside libmonarch before libuv and the other
# tasks of the process run (futures.jl, worker.jl).
const BLOCK_MS = 5
# Base.Workqueue is the scheduler's run queue of Julia 1.5 (internal; where
# a Julia version lacks it, waits block their slices regardless).
other_tasks_waiting() = isdefined(Base, :Workqueue) && !isempty(Base.Workqueue)
run_other_tasks() = (isdefined(Base, :process_events) && Base.process_events(); yield())

# How many actor handlers are in progress in this process (worker.jl):
# while one is, no wait holds the thread inside libmonarch, since the
# events and replies it may wait for are taken by other tasks.
const HANDLING = Ref(0)
# Task-local key of the actor whose handler runs on a task (worker.jl).
const OWNER_KEY = :monarch_actor

"""Make the actor whose handler runs on the current task (none: this
process's top level) the owner of the meshes spawned next: tasks of several
actors share the thread whose owner libmonarch records."""
claim_spawns(rt::Runtime) = check(CAPI.monarch_runtime_set_owner(rt.ptr, get(task_local_storage(), OWNER_KEY, "")))

"""Wait for the next wake of the runtime's fd, at most `timeout` seconds."""
function wait_tick(rt::Runtime, timeout::Real)
    is_running(rt) && watch_fd(rt)
    timer = Timer(_ -> notify(rt.tick), max(timeout, 0.0))
    try
        wait(rt.tick)
    finally
        close(timer)
    end
end

"""Shut the runtime down: stops every proc it started; pending futures fail."""
function shutdown()
    rt = RUNTIME[]
    rt === nothing && return
    RUNTIME[] = nothing
    ptr = rt.ptr
    rt.ptr = C_NULL
    rt.watcher === nothing || close(rt.watcher)
    CAPI.monarch_runtime_free(ptr)
    notify(rt.tick)
    return
end

"""Whether this process is a proc started by a controller."""
is_worker() = runtime().is_worker

"""The next supervision event for this process's top level (failures of
meshes this program spawned itself), waiting up to `timeout` seconds;
`nothing` if none came."""
function next_supervision_event(; timeout::Real = 0)
    rt = runtime()
    deadline = time() + timeout
    while true
        out = Ref{Ptr{UInt8}}(C_NULL)
        n = Ref{Csize_t}(0)
        st = CAPI.monarch_supervision_next(rt.ptr, 0, out, n)
        st == CAPI.MONARCH_OK && return parse_supervision(take_buffer(out[], n[]))
        st == CAPI.MONARCH_ERR_TIMEOUT || check(st)
        remaining = deadline - time()
        remaining <= 0 && return nothing
        wait_tick(rt, remaining)
    end
end

"""The job secret peers authenticate with (MONARCH_JOB_TOKEN when it was set
as the runtime started, else a random one): give it to `monarch host`
agents in their environment, never on a command line."""
job_secret() = String(owned_bytes((o, n) -> CAPI.monarch_runtime_job_token(runtime().ptr, o, n)))

"""Streaming of remote procs' stdout/stderr: printed with a `[rank N]`
prefix (`stream_to_client`), identical lines within `aggregate_window`
seconds printed once."""
function logging_option(; stream_to_client::Bool = true, aggregate_window::Real = 0)
    check(CAPI.monarch_runtime_logging_option(runtime().ptr, stream_to_client, UInt64(round(aggregate_window * 1000))))
end
