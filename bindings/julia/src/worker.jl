# Serving Julia actors: the event loop of a worker proc (the controller's
# script re-run, see serve_if_worker) and of `this_proc()` in any process.
#
# Each actor is its own sequential worker: a task with a queue, running the
# actor's events (constructor, messages, supervise, stop) one at a time in
# order of arrival, while the proc's other actors go on whenever it yields
# (waits for a future, sleeps, does I/O). So an endpoint may call and wait
# for another actor of its own proc, and a long wait in one actor does not
# hold up its neighbours. One serving task takes the events from libmonarch
# and queues each on its actor's worker (hosted.jl handles it there).

"""An actor's worker: its queue of events and the task running them."""
mutable struct ActorWorker
    key::String
    queue::Channel{Tuple{Ptr{CAPI.monarch_event}, CAPI.monarch_event_header}}
    task::Union{Nothing, Task}
    # The event being handled (its point is read only when asked for).
    event::Ptr{CAPI.monarch_event}
end

# Task-local key of the worker running on a task (hosted.jl's current_worker).
const WORKER_KEY = :monarch_actor_worker
# The workers of this process's actors, by actor key.
const WORKERS = Dict{String, ActorWorker}()
# How many handlers are running (started and not finished: possibly waiting).
const BUSY = Ref(0)
# How long a stopping proc waits for its actors' queued events.
const STOP_WAIT_S = 5.0

function start_worker(key::String)
    w = ActorWorker(key, Channel{Tuple{Ptr{CAPI.monarch_event}, CAPI.monarch_event_header}}(typemax(Int)),
        nothing, C_NULL)
    WORKERS[key] = w
    w.task = @async run_worker(w)
    return w
end

function run_worker(w::ActorWorker)
    task_local_storage(WORKER_KEY, w)
    task_local_storage(OWNER_KEY, w.key)
    for (ev, hdr) in w.queue
        BUSY[] += 1
        try
            handle_event(ev, hdr, w)
        catch e
            @error "monarch: handling an event failed" actor = w.key exception = (e, catch_backtrace())
        finally
            BUSY[] -= 1
        end
        if hdr.kind == CAPI.MONARCH_EVENT_STOP_ACTOR
            # Events queued after the stop are answered ("no actor") as the queue drains.
            get(WORKERS, w.key, nothing) === w && delete!(WORKERS, w.key)
            close(w.queue)
        end
    end
end

"""Queue one event (not STOP_PROC) on its actor's worker; a spawn starts
the worker. Events for an actor without one are answered here."""
function dispatch_event(ev::Ptr{CAPI.monarch_event}, hdr::CAPI.monarch_event_header)
    key = unsafe_string(hdr.actor)
    w = get(WORKERS, key, nothing)
    if w === nothing
        hdr.kind == CAPI.MONARCH_EVENT_SPAWN || return handle_event(ev, hdr)
        w = start_worker(key)
    end
    put!(w.queue, (ev, hdr))
    return nothing
end

"""STOP_PROC: the workers finish the events they hold (for up to STOP_WAIT_S), then end."""
function stop_workers()
    ws = collect(values(WORKERS))
    empty!(WORKERS)
    foreach(w -> close(w.queue), ws)
    deadline = time() + STOP_WAIT_S
    while any(w -> !istaskdone(w.task), ws) && time() < deadline
        sleep(0.01)
    end
end

# The serving task waits for events inside libmonarch (`block=true`, a
# worker's loop) for at most BLOCK_MS at a time, then lets libuv and the
# other tasks of the process run: an event is picked up within
# microseconds, other tasks wait at most BLOCK_MS, and while other tasks
# are runnable it only checks. While a handler is running (it may be
# waiting for a future, which must not find the thread held), and in a
# controller's loop for `this_proc()` (`block=false`), it sleeps on the
# runtime's fd instead, never holding the thread.

"""Serve this process's actors for up to `timeout` seconds (`Inf`: until
the proc is stopped). Returns false once the runtime stopped."""
function serve(; timeout::Real = Inf, block::Bool = true)
    rt = runtime()
    deadline = time() + timeout
    ev = Ref{Ptr{CAPI.monarch_event}}(C_NULL)
    hdr = Ref{CAPI.monarch_event_header}()
    while true
        is_running(rt) || return false
        remaining = deadline - time()
        holds = block && BUSY[] == 0
        slice_ms = (!holds || other_tasks_waiting()) ? 0 : clamp(round(Int64, min(remaining, 1.0) * 1000), 0, BLOCK_MS)
        st = CAPI.monarch_runtime_next_event_header(rt.ptr, slice_ms, ev, hdr)
        if st == CAPI.MONARCH_OK
            if hdr[].kind == CAPI.MONARCH_EVENT_STOP_PROC
                CAPI.monarch_event_free(ev[])
                stop_workers()
                return false
            end
            dispatch_event(ev[], hdr[])
            # The actor's worker runs now, then this loop goes on.
            yield()
        elseif st == CAPI.MONARCH_ERR_TIMEOUT
            remaining <= 0 && return true
            if holds
                run_other_tasks()
            else
                # Counted as a waiter, so a future's wait does not hold the thread meanwhile.
                WAITERS[] += 1
                try
                    other_tasks_waiting() ? run_other_tasks() : wait_tick(rt, min(remaining, 3600.0))
                finally
                    WAITERS[] -= 1
                end
            end
        elseif st == CAPI.MONARCH_ERR_STOPPED
            return false
        else
            check(st)
        end
    end
end

const LOCAL_SERVER = Ref{Union{Nothing, Task}}(nothing)

"""In a controller, serve the actors of `this_proc()` on a task of their own."""
function start_local_server!()
    runtime().is_worker && return
    t = LOCAL_SERVER[]
    (t === nothing || istaskdone(t)) || return
    LOCAL_SERVER[] = @async try
        serve(; block = false)
    catch e
        @error "monarch: the this_proc() actors stopped being served" exception = (e, catch_backtrace())
    end
    return
end

"""
    serve_if_worker()

Call after the script's actor types and endpoints are defined, before its
controller code: in a proc started by a controller (this script re-run), it
serves the actors until the proc is stopped, then exits; in the controller
it returns at once.
"""
function serve_if_worker()
    rt = runtime()
    rt.is_worker || return
    code = 0
    try
        serve()
    catch e
        @error "monarch worker" exception = (e, catch_backtrace())
        code = 1
    end
    shutdown()
    exit(code)
end
