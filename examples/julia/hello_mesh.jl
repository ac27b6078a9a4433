# The Julia walk-through of examples/python/hello_mesh.py: a controller
# spawns a mesh of 4 procs, puts a Counter actor in each, and drives them as
# one array: calls, slicing, broadcast, an actor in the controller's own
# proc, an endpoint error caught as ActorError, and stopping.
#
# Run: julia examples/julia/hello_mesh.jl   (libmonarch built: cargo build --release)
# The procs re-run this script: serve_if_worker() turns them into workers.

pushfirst!(LOAD_PATH, joinpath(@__DIR__, "..", "..", "bindings", "julia"))
using Monarch
using Monarch: @endpoint, current_rank

mutable struct Counter
    value::Int
end
@endpoint incr(c::Counter, by = 1) = (c.value += by; c.value)
@endpoint read(c::Counter) = c.value
@endpoint whoami(c::Counter) = (current_rank().rank, getpid())
@endpoint divide(c::Counter, by) = c.value ÷ by

Monarch.serve_if_worker()

function main()
    println("controller pid $(getpid())")

    procs = spawn_procs(this_host(); per_host = (gpus = 4,))
    println("spawned 4 procs: per_host = (gpus = 4,)")

    counters = spawn(procs, "counters", Counter, 10)
    println("spawned actor mesh 'counters' = Counter(10) on every proc")

    for (point, (rank, pid)) in fetch(call(counters.whoami))
        println("  rank $rank (gpus = $(point.gpus)) lives in pid $pid")
    end

    println("fetch(call(counters.incr, 2)) ->")
    println(fetch(call(counters.incr, 2)))

    one = slice(counters; gpus = 1)
    println("call_one(slice(counters; gpus = 1).incr) -> ", fetch(call_one(one.incr)))

    broadcast(counters.incr, 100)
    println("broadcast(counters.incr, 100)  -> (no reply)")
    println("call(counters.read)            -> ", collect(values(fetch(call(counters.read)))))

    loc = spawn(this_proc(), "c", Counter, 0)
    rank, pid = fetch(call_one(loc.whoami))
    println("spawn(this_proc(), \"c\", Counter, 0): runs in pid $pid (the controller: $(pid == getpid()))")
    println("call_one(loc.incr, 5)          -> ", fetch(call_one(loc.incr, 5)))

    try
        fetch(call_one(slice(counters; gpus = 2).divide, 0))
    catch e
        e isa ActorError || rethrow()
        println("call_one(slice(counters; gpus = 2).divide, 0) threw ActorError:")
        println("  ", first(split(e.message, '\n')))
    end
    println("the actor lives on: read -> ", fetch(call_one(slice(counters; gpus = 2).read)))

    wait(stop(procs); timeout = 60)
    println("procs stopped")
end

main()
Monarch.shutdown()
