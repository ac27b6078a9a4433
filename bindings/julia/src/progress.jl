# Progress of this process's long operations (procs starting, a SLURM
# allocation in the queue, large RDMA transfers) as events, and operations
# the program reports itself (docs/tracing.md, "Progress").

const PROGRESS_KINDS = Dict(1 => :procs_ready, 2 => :slurm_allocation, 3 => :rdma_transfer, 4 => :tensor_fetch)
const PROGRESS_NUMBERS = Dict(v => k for (k, v) in PROGRESS_KINDS)

"""One update of a long operation (the `ProgressEvent` flatbuffer); its last
one has `finished` set. `elapsed` is in seconds."""
struct ProgressEvent
    id::UInt64
    kind::Symbol
    label::String
    done::UInt64
    total::UInt64
    failed::UInt64
    state::String
    elapsed::Float64
    finished::Bool
    text::String
end

function parse_progress(b::Vector{UInt8})
    t = fb_root(b)
    u64(id) = fb_scalar(UInt64, b, t, id, UInt64(0))
    kind = get(PROGRESS_KINDS, Int(fb_scalar(UInt32, b, t, 1, UInt32(0))), :unknown)
    return ProgressEvent(u64(0), kind, fb_string(b, t, 2), u64(3), u64(4), u64(5), fb_string(b, t, 6),
        u64(7) / 1e6, fb_scalar(UInt8, b, t, 8, 0x00) != 0, fb_string(b, t, 9))
end

"""Start (or stop) keeping progress events for `next_progress_event`;
stopping drops those not taken."""
watch_progress(enable::Bool = true) = check(CAPI.monarch_progress_watch(enable))

"""The next progress event, waiting up to `timeout` seconds (other tasks run
meanwhile); `nothing` if none came."""
function next_progress_event(; timeout::Real = 0)
    deadline = time() + timeout
    while true
        out = Ref{Ptr{UInt8}}(C_NULL)
        n = Ref{Csize_t}(0)
        st = CAPI.monarch_progress_next(0, out, n)
        st == CAPI.MONARCH_OK && return parse_progress(take_buffer(out[], n[]))
        st == CAPI.MONARCH_ERR_TIMEOUT || check(st)
        time() >= deadline && return nothing
        sleep(0.01)
    end
end

"""An operation of the program's own (`kind`: a value of `PROGRESS_KINDS`),
shown and sent like the runtime's; `set_progress!` reports it, `finish!`
sends its last event."""
mutable struct Progress
    ptr::Ptr{CAPI.monarch_progress}
end

function Progress(kind::Symbol, label::AbstractString, total::Integer = 0)
    haskey(PROGRESS_NUMBERS, kind) ||
        throw(ArgumentError("unknown progress kind $kind: one of $(join(sort(collect(keys(PROGRESS_NUMBERS))), ", "))"))
    out = Ref{Ptr{CAPI.monarch_progress}}(C_NULL)
    check(CAPI.monarch_progress_begin(UInt32(PROGRESS_NUMBERS[kind]), String(label), UInt64(total), out))
    p = Progress(out[])
    finalizer(p -> p.ptr == C_NULL || CAPI.monarch_progress_free(p.ptr), p)
    return p
end

"""How much of `p` is done (and, when not 0, how much there is in all)."""
function set_progress!(p::Progress, done::Integer; total::Integer = 0)
    p.ptr == C_NULL && throw(ArgumentError("this progress is finished"))
    check(CAPI.monarch_progress_set(p.ptr, UInt64(done), UInt64(total)))
end

"""`p` is over: send its last event (a no-op the second time)."""
function finish!(p::Progress)
    ptr, p.ptr = p.ptr, C_NULL
    ptr == C_NULL || check(CAPI.monarch_progress_free(ptr))
    return nothing
end
