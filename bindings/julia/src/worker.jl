# Hosting Julia actors: the event loop of a worker proc (the controller's
# script re-run, see serve_if_worker) and of `this_proc()` in any process.
#
# Protocol (what other languages see):
# * spawn: type name "Module.Type" with part 0 the serialized argument
#   tuple (a Julia caller), or "Module:Type" with raw parts, each passed as
#   one Vector{UInt8} to the constructor (any caller). Answered with no parts.
# * message: the endpoint's function (see @endpoint) is called with the
#   actor and the deserialized arguments (plain) or one Vector{UInt8} per
#   part (raw); the answer is the serialized value or the raw parts.
# * error answer: message "Type.method on rank R: <error and backtrace>",
#   part 0 the serialized exception (when it serializes).
# * stop-actor: `cleanup(actor)`, answered with no parts. stop-proc: the
#   loop ends.
# * supervise: `supervise(actor, event)`; `true` = handled, else escalated.

mutable struct Hosted
    instance::Any
    rank::Int
    shape::Shape
end

const HOSTED = Dict{String, Hosted}()
# The event being handled (its point is read only when asked for).
const CURRENT_EVENT = Ref{Ptr{CAPI.monarch_event}}(C_NULL)

"""The point of the actor whose message is being handled: its rank and
coordinates in the mesh the message was sent to."""
function current_rank()
    ev = CURRENT_EVENT[]
    ev == C_NULL && throw(ArgumentError("current_rank() is only known inside an endpoint"))
    rank, shape = event_point(ev)
    return Point(rank, coords_of(shape, rank))
end
current_rank_number() = (ev = CURRENT_EVENT[]; ev == C_NULL ? nothing : event_point(ev)[1])

"""Resolve "Module.Type" or "Module:Type" to a type, from Main."""
function resolve_type(name::AbstractString)
    path = split(replace(name, ':' => '.'), '.')
    obj = Main
    for p in path
        (obj isa Module && isdefined(obj, Symbol(p))) || throw(ArgumentError("no actor type $name in this worker"))
        obj = getfield(obj, Symbol(p))
    end
    obj isa Type || throw(ArgumentError("$name is not a type"))
    return obj
end

function event_parts(ev, hdr)
    n = Int(hdr.nparts)
    parts = Vector{Vector{UInt8}}(undef, n)
    d = Ref{Ptr{UInt8}}(C_NULL)
    l = Ref{Csize_t}(0)
    for i in 0:n - 1
        if i == 0
            ptr, len = hdr.part0, hdr.part0_len
        else
            check(CAPI.monarch_event_part(ev, i, d, l))
            ptr, len = d[], l[]
        end
        parts[i + 1] = len == 0 ? UInt8[] : copy(unsafe_wrap(Array, ptr, Int(len)))
    end
    return parts
end

function event_point(ev)
    r = Ref{UInt64}(0)
    s = Ref{Ptr{UInt8}}(C_NULL)
    n = Ref{Csize_t}(0)
    check(CAPI.monarch_event_rank(ev, r, s, n))
    shape = s[] == C_NULL ? Shape(String[], Int[]) : parse_shape(copy(unsafe_wrap(Array, s[], Int(n[]))))
    return Int(r[]), shape
end

"""The reply parts of a raw endpoint's return value."""
raw_reply(x::Nothing) = Vector{UInt8}[]
raw_reply(x::AbstractVector{UInt8}) = [Vector{UInt8}(x)]
raw_reply(x::Union{Tuple, AbstractVector}) = [as_part(p) for p in x]
raw_reply(x) = throw(ArgumentError("a raw endpoint returns bytes, nothing or a tuple of bytes; got $(typeof(x))"))

function run_event(kind, ev, hdr)
    actor = unsafe_string(hdr.actor)
    if kind == CAPI.MONARCH_EVENT_SPAWN
        tname = unsafe_string(hdr.type_name)
        parts = event_parts(ev, hdr)
        T = resolve_type(tname)
        rank, shape = event_point(ev)
        instance = occursin(':', tname) ? T(parts...) : T(julia_value(parts)...)
        HOSTED[actor] = Hosted(instance, rank, shape)
        return Vector{UInt8}[]
    end
    hosted = get(HOSTED, actor, nothing)
    hosted === nothing && throw(ArgumentError("no actor $actor in this proc"))
    if kind == CAPI.MONARCH_EVENT_MESSAGE
        method = Symbol(unsafe_string(hdr.method))
        f, raw = find_endpoint(typeof(hosted.instance), method)
        parts = event_parts(ev, hdr)
        return raw ? raw_reply(f(hosted.instance, parts...)) : [serialize_bytes(f(hosted.instance, julia_value(parts)...))]
    elseif kind == CAPI.MONARCH_EVENT_STOP_ACTOR
        delete!(HOSTED, actor)
        cleanup(hosted.instance)
        return Vector{UInt8}[]
    elseif kind == CAPI.MONARCH_EVENT_SUPERVISE
        se = parse_supervision(event_parts(ev, hdr)[1])
        supervise(hosted.instance, se) === true ||
            throw(ErrorException("actor $(typeof(hosted.instance)) did not handle the failure: $(se.report)"))
        return Vector{UInt8}[]
    end
    throw(ArgumentError("unknown event kind $kind"))
end

function error_text(kind, hdr, e, bt)
    actor = get(HOSTED, unsafe_string(hdr.actor), nothing)
    T = actor === nothing ? "" : "$(nameof(typeof(actor.instance)))."
    what = kind == CAPI.MONARCH_EVENT_MESSAGE ? "$T$(unsafe_string(hdr.method))" :
        kind == CAPI.MONARCH_EVENT_SPAWN ? "$(unsafe_string(hdr.type_name)) constructor" : "event $kind"
    r = current_rank_number()
    rank = r === nothing ? "" : " on rank $r"
    return "$what$rank: " * sprint(showerror, e, bt)
end

"""Handle one event; false once the proc should stop."""
function handle_event(ev::Ptr{CAPI.monarch_event}, hdr::CAPI.monarch_event_header)
    kind = hdr.kind
    if kind == CAPI.MONARCH_EVENT_STOP_PROC
        CAPI.monarch_event_free(ev)
        return false
    end
    local reply
    failed = nothing
    CURRENT_EVENT[] = ev
    try
        reply = run_event(kind, ev, hdr)
    catch e
        failed = (e, catch_backtrace())
    end
    msg = failed === nothing ? "" : error_text(kind, hdr, failed...)
    CURRENT_EVENT[] = C_NULL
    # An answer that cannot be delivered (its caller is gone) is logged; the proc serves on.
    st = if failed === nothing
        if !hdr.wants_reply
            CAPI.monarch_event_free(ev)
        elseif length(reply) == 1
            p = reply[1]
            GC.@preserve p CAPI.monarch_event_reply_one_and_free(ev, pointer(p), length(p))
        else
            s = with_parts((a, n) -> CAPI.monarch_event_reply(ev, a, n), reply)
            CAPI.monarch_event_free(ev)
            s
        end
    else
        e = failed[1]
        payload = try
            [serialize_bytes(e)]
        catch
            Vector{UInt8}[]
        end
        # A failed broadcast is answered too: the runtime then fails the actor
        # and reports to the mesh's owner.
        s = with_parts((a, n) -> CAPI.monarch_event_reply_error(ev, cstr(replace(msg, '\0' => ' ')), a, n), payload)
        CAPI.monarch_event_free(ev)
        s
    end
    st == CAPI.MONARCH_OK || @warn "monarch: cannot deliver a reply" error = status_error(st)
    return true
end

# A worker's loop (`block=true`) waits for events inside libmonarch for at
# most BLOCK_MS at a time, then lets libuv and the other tasks of the
# process run: an event is picked up within microseconds, other tasks wait
# at most BLOCK_MS, and while other tasks are runnable it only checks.
# The loop of `this_proc()` in a controller (`block=false`) sleeps on the
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
        slice_ms = (!block || other_tasks_waiting()) ? 0 : clamp(round(Int64, min(remaining, 1.0) * 1000), 0, BLOCK_MS)
        st = CAPI.monarch_runtime_next_event_header(rt.ptr, slice_ms, ev, hdr)
        if st == CAPI.MONARCH_OK
            handle_event(ev[], hdr[]) || return false
        elseif st == CAPI.MONARCH_ERR_TIMEOUT
            remaining <= 0 && return true
            if block
                run_other_tasks()
            else
                # Counted as a waiter, so a future's wait does not hold the thread meanwhile.
                WAITERS[] += 1
                try
                    wait_tick(rt, min(remaining, 3600.0))
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
