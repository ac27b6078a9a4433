# A small data-parallel training loop (the Julia counterpart of
# examples/cpp/sgd_trainer): 4 worker procs each hold a shard of a linear
# regression data set; every step the controller sends the weights, each
# worker returns its shard's gradient and loss, and the controller averages
# the gradients and updates the weights. The loss goes down.
#
# Run: julia examples/julia/data_parallel.jl

pushfirst!(LOAD_PATH, joinpath(@__DIR__, "..", "..", "bindings", "julia"))
using Monarch
using Monarch: @endpoint, current_rank
using Random

const TRUE_W = [2.0, -3.0, 0.5]

"""One shard: inputs X and targets y = X * TRUE_W + noise, seeded by rank."""
struct Shard
    X::Matrix{Float64}
    y::Vector{Float64}
end
function Shard(rows::Integer)
    rng = MersenneTwister(1234 + current_rank().rank)
    X = randn(rng, rows, length(TRUE_W))
    return Shard(X, X * TRUE_W .+ 0.01 .* randn(rng, rows))
end
@endpoint function gradient(s::Shard, w::Vector{Float64})
    r = s.X * w .- s.y
    return (s.X' * r) ./ length(s.y), sum(abs2, r) / length(s.y)
end

Monarch.serve_if_worker()

function train(; steps = 30, lr = 0.3)
    procs = spawn_procs(this_host(); per_host = (gpus = 4,))
    shards = spawn(procs, "shards", Shard, 256)
    w = zeros(length(TRUE_W))
    losses = Float64[]
    for step in 1:steps
        replies = collect(values(fetch(call(shards.gradient, w); timeout = 60)))
        grad = sum(first.(replies)) ./ length(replies)
        push!(losses, sum(last.(replies)) / length(replies))
        w .-= lr .* grad
        step % 5 == 0 && println("step $step: loss $(round(losses[end]; sigdigits = 4))")
    end
    wait(stop(procs); timeout = 60)
    println("weights $(round.(w; digits = 3)) (true $(TRUE_W))")
    losses[end] < losses[1] / 100 || error("the loss did not go down: $(losses[1]) -> $(losses[end])")
    println("loss $(round(losses[1]; sigdigits = 4)) -> $(round(losses[end]; sigdigits = 4))")
end

train()
Monarch.shutdown()
