# Serving Julia actors: the event loop of a worker proc (the controller's
# script re-run, see serve_if_worker) and of `this_proc()` in any process.
#
# Each actor is its own sequential worker: its events (constructor,
# messages, supervise, stop) run one at a time in order of arrival, while
# the proc's other actors go on whenever it yields (waits for a future,
# sleeps, does I/O). So an endpoint may call and wait for another actor of
# its own proc, and a long wait in one actor does not hold up its
# neighbours. hosted.jl handles each event.
#
# The serving task takes events from libmonarch. The first actor of the
# proc runs on the serving task itself (a proc with one actor switches no
# task per event); every other actor has a task of its own with a queue.
# While the first actor's handler runs, a relief task takes the events
# instead (it wakes on the runtime's fd, which needs the handler to yield,
# so a handler that does not yield costs nothing), queueing the first
# actor's own events for the serving task to run after it.

"""An actor's worker: its queue of events and the task running them
(`nothing`: the serving task, for the proc's first actor)."""
mutable struct ActorWorker
    key::String
    queue::Channel{Tuple{Ptr{CAPI.monarch_event}, CAPI.monarch_event_header}}
    task::Union{Nothing, Task}
    slot::EventSlot
end
# The workers of this process's actors, by actor key.
const WORKERS = Dict{String, ActorWorker}()
# The actor running on the serving task, and whether its handler is running.
const FIRST = Ref{Union{Nothing, ActorWorker}}(nothing)
const FIRST_RUNNING = Ref(false)
# Set when the relief task took STOP_PROC.
const STOPPING = Ref(false)
# How long a stopping proc waits for its actors' queued events.
const STOP_WAIT_S = 5.0

const EventQueue = Channel{Tuple{Ptr{CAPI.monarch_event}, CAPI.monarch_event_header}}

function new_worker(key::String, own_task::Bool)
    w = ActorWorker(key, EventQueue(typemax(Int)), nothing, EventSlot())
    WORKERS[key] = w
    if own_task
        w.task = @async run_worker(w)
    else
        FIRST[] = w
        task_local_storage(EVENT_SLOT_KEY, w.slot)
        task_local_storage(OWNER_KEY, key)
    end
    return w
end

"""Run one event of `w` on the current task (its own, or the serving task's)."""
function run_handler(w::ActorWorker, ev, hdr)
    HANDLING[] += 1
    try
        handle_event(ev, hdr, w.slot)
    catch e
        @error "monarch: handling an event failed" actor = w.key exception = (e, catch_backtrace())
    finally
        HANDLING[] -= 1
    end
    if hdr.kind == CAPI.MONARCH_EVENT_STOP_ACTOR
        # Events queued after the stop are answered ("no actor") as the queue drains.
        get(WORKERS, w.key, nothing) === w && delete!(WORKERS, w.key)
        close(w.queue)
    end
end

function run_worker(w::ActorWorker)
    task_local_storage(EVENT_SLOT_KEY, w.slot)
    task_local_storage(OWNER_KEY, w.key)
    for (ev, hdr) in w.queue
        run_handler(w, ev, hdr)
    end
end

"""On the serving task: run an event of the first actor, then the events
the relief task queued for it meanwhile."""
function run_first(w::ActorWorker, ev, hdr)
    FIRST_RUNNING[] = true
    try
        run_handler(w, ev, hdr)
        while isready(w.queue)
            run_handler(w, take!(w.queue)...)
        end
    finally
        FIRST_RUNNING[] = false
    end
    if !isopen(w.queue)
        FIRST[] = nothing
        task_local_storage(EVENT_SLOT_KEY, nothing)
        task_local_storage(OWNER_KEY, "")
        # Events that came after its stop: answered ("no actor").
        while isready(w.queue)
            handle_event(take!(w.queue)...)
        end
    end
end

"""Route one event (not STOP_PROC) to its actor's worker; a spawn starts
one (on the serving task when the proc has no first actor). Events for an
actor without a worker are answered here."""
function dispatch_event(ev::Ptr{CAPI.monarch_event}, hdr::CAPI.monarch_event_header, serving::Bool)
    key = unsafe_string(hdr.actor)
    w = get(WORKERS, key, nothing)
    if w === nothing
        hdr.kind == CAPI.MONARCH_EVENT_SPAWN || return handle_event(ev, hdr)
        w = new_worker(key, !(serving && FIRST[] === nothing))
    end
    if w.task === nothing
        serving ? run_first(w, ev, hdr) : put!(w.queue, (ev, hdr))
    else
        put!(w.queue, (ev, hdr))
        # The actor's task runs now, then this loop goes on.
        yield()
    end
    return nothing
end

"""STOP_PROC: the workers finish the events they hold (for up to STOP_WAIT_S), then end."""
function stop_workers()
    ws = collect(values(WORKERS))
    empty!(WORKERS)
    FIRST[] = nothing
    foreach(w -> close(w.queue), ws)
    deadline = time() + STOP_WAIT_S
    while any(w -> w.task !== nothing && !istaskdone(w.task), ws) && time() < deadline
        sleep(0.01)
    end
end

"""Take events while the first actor's handler runs (see the top)."""
function relieve(rt::Runtime, done::Ref{Bool})
    ev = Ref{Ptr{CAPI.monarch_event}}(C_NULL)
    hdr = Ref{CAPI.monarch_event_header}()
    while is_running(rt) && !done[]
        wait_tick(rt, 1.0)
        while FIRST_RUNNING[] && !STOPPING[] && is_running(rt)
            st = CAPI.monarch_runtime_next_event_header(rt.ptr, 0, ev, hdr)
            if st == CAPI.MONARCH_OK
                if hdr[].kind == CAPI.MONARCH_EVENT_STOP_PROC
                    CAPI.monarch_event_free(ev[])
                    STOPPING[] = true
                else
                    try
                        dispatch_event(ev[], hdr[], false)
                    catch e
                        @error "monarch: routing an event failed" exception = (e, catch_backtrace())
                    end
                end
            elseif st == CAPI.MONARCH_ERR_TIMEOUT
                WAITERS[] += 1
                try
                    wait_tick(rt, 1.0)
                finally
                    WAITERS[] -= 1
                end
            else
                st == CAPI.MONARCH_ERR_STOPPED || @error "monarch: taking events failed" error = status_error(st)
                break
            end
        end
    end
end

# The serving task waits for events inside libmonarch (`block=true`, a
# worker's loop) for at most BLOCK_MS at a time, then lets libuv and the
# other tasks of the process run: an event is picked up within
# microseconds, other tasks wait at most BLOCK_MS, and while other tasks
# are runnable it only checks. While a handler is running on another task
# (it may be waiting for a future, which must not find the thread held),
# and in a controller's loop for `this_proc()` (`block=false`), it sleeps
# on the runtime's fd instead, never holding the thread.

"""Serve this process's actors for up to `timeout` seconds (`Inf`: until
the proc is stopped). Returns false once the runtime stopped."""
function serve(; timeout::Real = Inf, block::Bool = true)
    rt = runtime()
    STOPPING[] = false
    done = Ref(false)
    relief = @async try
        relieve(rt, done)
    catch e
        @error "monarch: the relief task stopped" exception = (e, catch_backtrace())
    end
    try
        return serve_loop(rt, timeout, block)
    finally
        done[] = true
        notify(rt.tick)
    end
end

function serve_loop(rt::Runtime, timeout::Real, block::Bool)
    deadline = time() + timeout
    ev = Ref{Ptr{CAPI.monarch_event}}(C_NULL)
    hdr = Ref{CAPI.monarch_event_header}()
    while true
        is_running(rt) || return false
        if STOPPING[]
            stop_workers()
            return false
        end
        first = FIRST[]
        first === nothing || isready(first.queue) && run_first(first, take!(first.queue)...)
        remaining = deadline - time()
        holds = block && HANDLING[] == 0
        slice_ms = (!holds || other_tasks_waiting()) ? 0 : clamp(round(Int64, min(remaining, 1.0) * 1000), 0, BLOCK_MS)
        st = CAPI.monarch_runtime_next_event_header(rt.ptr, slice_ms, ev, hdr)
        if st == CAPI.MONARCH_OK
            if hdr[].kind == CAPI.MONARCH_EVENT_STOP_PROC
                CAPI.monarch_event_free(ev[])
                stop_workers()
                return false
            end
            dispatch_event(ev[], hdr[], true)
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
