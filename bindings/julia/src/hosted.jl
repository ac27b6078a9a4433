# Handling one event for a hosted Julia actor: its constructor, endpoints,
# cleanup and supervise hook, and the answer (see worker.jl for who runs
# which event when).
#
# Protocol (what other languages see):
# * spawn: type name "Module.Type" with part 0 the serialized argument
#   tuple (a Julia caller), or "Module:Type" with raw parts, each passed as
#   one Vector{UInt8} to the constructor (any caller). Answered with no
#   parts. A constructor that throws fails the actor (monarch_event_fail):
#   its owner hears of it once, and callers get the failure report.
# * message: the endpoint's function (see @endpoint) is called with the
#   actor and the deserialized arguments (plain) or one Vector{UInt8} per
#   part (raw); the answer is the serialized value or the raw parts.
# * error answer: message "Type.method on rank R: <error and backtrace>",
#   part 0 the serialized exception (the serialized `nothing` when it does
#   not serialize), so a Julia caller tells it from a failure report (no
#   parts). An endpoint that throws ActorFailure fails its actor instead.
# * stop-actor: `cleanup(actor)`, answered with no parts.
# * supervise: `supervise(actor, event)`; `true` = handled, else escalated.

mutable struct Hosted
    instance::Any
    rank::Int
    shape::Shape
end

const HOSTED = Dict{String, Hosted}()

"""Where the handlers running on one task find the event being handled
(each actor's task has one, see worker.jl)."""
mutable struct EventSlot
    event::Ptr{CAPI.monarch_event}
end
EventSlot() = EventSlot(C_NULL)
# Task-local key of the current task's EventSlot.
const EVENT_SLOT_KEY = :monarch_event_slot

function current_event()
    slot = get(task_local_storage(), EVENT_SLOT_KEY, nothing)
    return slot === nothing ? Ptr{CAPI.monarch_event}(C_NULL) : slot.event
end

"""The point of the actor whose message is being handled: its rank and
coordinates in the mesh the message was sent to."""
function current_rank()
    ev = current_event()
    ev == C_NULL && throw(ArgumentError("current_rank() is only known inside an endpoint"))
    rank, shape = event_point(ev)
    return Point(rank, coords_of(shape, rank))
end
current_rank_number(ev) = ev == C_NULL ? nothing : event_point(ev)[1]

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
    # Stopping an actor whose constructor failed has nothing to clean up.
    hosted === nothing && kind == CAPI.MONARCH_EVENT_STOP_ACTOR && return Vector{UInt8}[]
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

function error_text(kind, ev, hdr, e, bt)
    r = current_rank_number(ev)
    rank = r === nothing ? "" : " on rank $r"
    if kind == CAPI.MONARCH_EVENT_SPAWN
        # What the failure report says after "... and all its descendants have failed:".
        return "the constructor of $(unsafe_string(hdr.type_name))$rank raised $(nameof(typeof(e))): " *
            sprint(showerror, e, bt)
    end
    actor = get(HOSTED, unsafe_string(hdr.actor), nothing)
    T = actor === nothing ? "" : "$(nameof(typeof(actor.instance)))."
    what = kind == CAPI.MONARCH_EVENT_MESSAGE ? "$T$(unsafe_string(hdr.method))" : "event $kind"
    return "$what$rank: " * sprint(showerror, e, bt)
end

"""The parts of an error answer: the serialized exception, else the serialized `nothing`."""
function error_payload(e)
    return try
        [serialize_bytes(e)]
    catch
        [serialize_bytes(nothing)]
    end
end

"""Handle one event (not STOP_PROC) and answer it; `slot` (the running
task's EventSlot, or nothing) holds the event meanwhile."""
function handle_event(ev::Ptr{CAPI.monarch_event}, hdr::CAPI.monarch_event_header,
                      slot::Union{Nothing, EventSlot} = nothing)
    kind = hdr.kind
    local reply
    failed = nothing
    slot === nothing || (slot.event = ev)
    try
        reply = run_event(kind, ev, hdr)
    catch e
        failed = (e, catch_backtrace())
    end
    msg = failed === nothing ? "" : replace(error_text(kind, ev, hdr, failed...), '\0' => ' ')
    slot === nothing || (slot.event = C_NULL)
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
        # A constructor that threw, or an endpoint throwing ActorFailure, fails
        # the actor; any other failure answers the caller. A failed broadcast
        # is answered too: the runtime then fails the actor and reports to
        # the mesh's owner.
        kills = kind == CAPI.MONARCH_EVENT_SPAWN || (kind == CAPI.MONARCH_EVENT_MESSAGE && e isa ActorFailure)
        answer = kills ? CAPI.monarch_event_fail : CAPI.monarch_event_reply_error
        s = with_parts((a, n) -> answer(ev, cstr(msg), a, n), error_payload(e))
        CAPI.monarch_event_free(ev)
        s
    end
    st == CAPI.MONARCH_OK || @warn "monarch: cannot deliver a reply" error = status_error(st)
    return nothing
end
