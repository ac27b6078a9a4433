# Julia ping benchmark: round trip and pipelined throughput between a Julia
# controller and a Julia actor in a worker proc (a raw endpoint, one 8-byte
# part each way). Prints two lines that benches/run.py turns into rows.
#
# Run: julia benches/julia_ping.jl [round_trips] [pipelined] [window]

pushfirst!(LOAD_PATH, joinpath(@__DIR__, "..", "bindings", "julia"))
using Monarch
using Monarch: @endpoint

struct Pinger end
Pinger() = Pinger.instance
@endpoint raw ping(p::Pinger, x::Vector{UInt8}) = x

Monarch.serve_if_worker()

function main()
    round_trips = length(ARGS) > 0 ? parse(Int, ARGS[1]) : 5000
    pipelined = length(ARGS) > 1 ? parse(Int, ARGS[2]) : 20000
    window = length(ARGS) > 2 ? parse(Int, ARGS[3]) : 256
    procs = spawn_procs(this_host(); per_host = (gpus = 1,))
    one = slice(spawn(procs, "ping", Pinger); gpus = 0)
    payload = zeros(UInt8, 8)
    for _ in 1:500
        fetch(call_one(one.ping, payload))
    end
    us = Vector{Float64}(undef, round_trips)
    for i in 1:round_trips
        t = time_ns()
        fetch(call_one(one.ping, payload))
        us[i] = (time_ns() - t) / 1e3
    end
    sort!(us)
    median = us[(round_trips + 1) ÷ 2]
    p99 = us[clamp(round(Int, 0.99 * round_trips), 1, round_trips)]
    inflight = Monarch.Future[]
    t = time_ns()
    for _ in 1:pipelined
        if length(inflight) >= window
            fetch(popfirst!(inflight))
        end
        push!(inflight, call_one(one.ping, payload))
    end
    foreach(fetch, inflight)
    rate = pipelined / ((time_ns() - t) / 1e9)
    wait(stop(procs); timeout = 60)
    println("julia ping round trip: median $(round(median; digits = 1)) us, p99 $(round(p99; digits = 1)) us ($round_trips calls; target <= 40 us)")
    println("julia pipelined calls: $(round(Int, rate)) msgs/s ($pipelined calls, window $window; target >= 50000)")
end

main()
Monarch.shutdown()
