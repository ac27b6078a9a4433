# Actor types of the test suite (runtests.jl includes this file before
# serve_if_worker, so the worker procs that re-run it define them too).

using Monarch
using Monarch: @endpoint, current_rank, send, PortRef, RDMABuffer, read_into!, write_from!

mutable struct Counter
    n::Int
end
Counter() = Counter(0)
@endpoint incr(c::Counter, by::Integer = 1) = (c.n += by; c.n)
@endpoint value(c::Counter) = c.n
@endpoint whoami(c::Counter) = (p = current_rank(); (p.rank, p.coords))
@endpoint fail(c::Counter, msg) = throw(ArgumentError(msg))
@endpoint nap(c::Counter, seconds) = (sleep(seconds); :awake)
@endpoint die(c::Counter, code) = exit(code)
@endpoint pid(c::Counter) = getpid()
@endpoint function report_to(c::Counter, port::PortRef, n::Integer)
    for i in 1:n
        send(port, (current_rank().rank, i))
    end
    return n
end
# Raw endpoints: bytes in, bytes out (what other languages call).
@endpoint raw echo(c::Counter, parts::Vector{UInt8}...) = parts
@endpoint raw add(c::Counter, x::Vector{UInt8}) = (c.n += reinterpret(Int64, x)[1]; reinterpret(UInt8, [Int64(c.n)]))
@endpoint raw nothing_back(c::Counter) = nothing
@endpoint raw bad_return(c::Counter) = "text, not bytes"

"""An actor whose constructor can fail."""
struct Picky
    Picky(ok::Bool) = ok ? new() : error("Picky refused to start")
end
@endpoint hello(p::Picky) = "hi"

"""Reads and writes another proc's RDMA buffer."""
struct Rdma end
@endpoint function fetch_bytes(r::Rdma, desc::Monarch.RDMADescriptor, n::Integer)
    buf = RDMABuffer(desc)
    dst = zeros(UInt8, n)
    backend = read_into!(dst, buf)
    close(buf)
    return dst, backend
end
@endpoint function put_bytes(r::Rdma, desc::Monarch.RDMADescriptor, data::Vector{UInt8}, offset::Integer)
    buf = RDMABuffer(desc)
    write_from!(buf, data; offset = offset)
    close(buf)
    return length(data)
end

"""Owns a child mesh on its own proc and handles the child's failures."""
mutable struct Guardian
    seen::Vector{Monarch.SupervisionEvent}
    child::Any
end
Guardian() = Guardian(Monarch.SupervisionEvent[], nothing)
@endpoint function start_child(g::Guardian)
    g.child = spawn(this_proc(), "child", Counter, 0; wait = false)
    return true
end
@endpoint break_child(g::Guardian) = (broadcast(g.child.fail, "child broke"); true)
@endpoint seen(g::Guardian) = [(e.cause, e.report) for e in g.seen]
Monarch.supervise(g::Guardian, e::Monarch.SupervisionEvent) = (push!(g.seen, e); true)
@endpoint function start_bad_child(g::Guardian)
    g.child = spawn(this_proc(), "bad_child", Picky, false; wait = false)
    return true
end

# Per-actor execution: actors of one proc go on while another waits.

"""A gate shared by the actors of one proc: one waits on it, another opens it."""
const GATE = Channel{Int}(1)
@endpoint await_gate(c::Counter) = take!(GATE)
@endpoint open_gate(c::Counter, v::Integer) = (put!(GATE, v); true)

"""Appends to its log after yielding, so out-of-order handling would show."""
mutable struct Recorder
    log::Vector{Int}
end
Recorder() = Recorder(Int[])
@endpoint function record(r::Recorder, i::Integer)
    for _ in 1:(i % 3)
        yield()
    end
    i % 7 == 0 && sleep(0.001)
    push!(r.log, i)
    return i
end
@endpoint log_of(r::Recorder) = r.log

"""Spawns a Loader on its own proc and waits for it from its endpoints."""
mutable struct Trainer
    loader::Any
end
Trainer() = Trainer(nothing)
@endpoint function setup(t::Trainer)
    # The Loader's constructor runs while this endpoint waits for it.
    t.loader = spawn(this_proc(), "loader", Loader, 100)
    return fetch(call_one(t.loader.pid)) == getpid()
end
@endpoint step(t::Trainer) = fetch(call_one(t.loader.next_batch); timeout = 60)

mutable struct Loader
    next::Int
end
@endpoint next_batch(l::Loader) = (l.next += 1; l.next)
@endpoint pid(l::Loader) = getpid()

"""Fails its actor on request (ActorFailure) or only the call (any other error)."""
struct Fragile end
@endpoint break_actor(f::Fragile, msg) = throw(ActorFailure(msg))
@endpoint break_call(f::Fragile, msg) = error(msg)
@endpoint alive(f::Fragile) = true

"""Sets task-local storage in its constructor; its endpoints read it."""
struct Tagged
    Tagged(tag::String) = (task_local_storage(:tag, tag); new())
end
@endpoint tag(t::Tagged) = task_local_storage(:tag)
