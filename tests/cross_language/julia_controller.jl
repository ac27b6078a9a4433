# A Julia controller calling raw-bytes endpoints of actors in other
# languages: Python actors (bindings/python/tests/actors.py RawActor,
# hosted by `python -m monarch._bootstrap`), C plugin actors (cplugin.c's
# CCounter) and C++ plugin actors (examples/cpp's Trainer), hosted by
# `monarch worker --plugin`. Run by test_julia.py as
#   julia julia_controller.jl PYTHON CPLUGIN.so CPPPLUGIN.so
# (exit status 1 on any failure: the top-level @testset throws).

pushfirst!(LOAD_PATH, joinpath(@__DIR__, "..", "..", "bindings", "julia"))
using Monarch
using Monarch: ActorError
using Test

const REPO = normpath(joinpath(@__DIR__, "..", ".."))
python, plugin, cppplugin = ARGS[1], ARGS[2], ARGS[3]
i64(v) = reinterpret(UInt8, [Int64(v)])
from_i64(b) = reinterpret(Int64, b)[1]

@testset "Julia controller, other languages' actors" begin
    @testset "Python actors" begin
        pypath = join([joinpath(REPO, "bindings", "python", "tests"), get(ENV, "PYTHONPATH", "")], ":")
        procs = spawn_procs(this_host(); per_host = (gpus = 2,), bootstrap = [python, "-m", "monarch._bootstrap"],
            env = Dict("PYTHONPATH" => pypath))
        m = spawn_native(procs, "raw", "actors:RawActor", UInt8[0x78])
        vm = fetch(call(m.add, i64(5)); timeout = 60)
        @test [from_i64(v) for v in values(vm)] == [5, 5]
        @test fetch(call_one(slice(m; gpus = 1).echo, UInt8[1], UInt8[], UInt8[2, 3])) == (UInt8[1], UInt8[], UInt8[2, 3])
        @test fetch(call_one(slice(m; gpus = 0).upper, Vector{UInt8}("xy"))) == Vector{UInt8}("XY")
        @test fetch(call_one(slice(m; gpus = 0).init_args)) == UInt8[0x78]
        e = try
            fetch(call(m.fail, UInt8[1], UInt8[2])); nothing
        catch err
            err
        end
        @test e isa ActorError && occursin("raw fail with 2 parts", e.message) && length(e.failures) == 2
        @test from_i64(fetch(call_one(slice(m; gpus = 0).add, i64(1)))) == 6   # the actor lived on
        wait(stop(procs); timeout = 60)
    end
    @testset "C plugin actors" begin
        procs = spawn_procs(this_host(); per_host = (gpus = 2,), plugins = [plugin])
        c = spawn_native(procs, "cc", "CCounter", i64(10))
        @test [from_i64(v) for v in values(fetch(call(c.incr, i64(2))))] == [12, 12]
        @test from_i64(fetch(call_one(slice(c; gpus = 1).incr, i64(5)))) == 17
        @test [from_i64(v) for (_, v) in fetch(call(c.rank))] == [0, 1]
        @test fetch(call_one(slice(c; gpus = 0).concat, Vector{UInt8}("ab"), Vector{UInt8}("cd"))) == Vector{UInt8}("abcd")
        e = try
            fetch(call(c.fail)); nothing
        catch err
            err
        end
        @test e isa ActorError && occursin("CCounter.fail on rank 0", e.message)
        ce = try
            spawn_native(procs, "bad", "CCounter", UInt8[1, 2, 3]); nothing
        catch err
            err
        end
        @test ce isa ActorError && occursin("start must be 8 bytes", ce.message)
        wait(stop(procs); timeout = 60)
    end
    @testset "C++ plugin actors: SGD with examples/cpp's Trainer" begin
        procs = spawn_procs(this_host(); per_host = (gpus = 2,), plugins = [cppplugin])
        dim = 3
        t = spawn_native(procs, "trainers", "Trainer", i64(64), reinterpret(UInt8, Int32[dim]), reinterpret(UInt8, UInt64[7]))
        w = zeros(dim)
        losses = Float64[]
        for step in 1:20
            @test all(v === nothing for v in values(fetch(call(t.set_weights, reinterpret(UInt8, w)))))
            outs = [reinterpret(Float64, copy(v)) for v in values(fetch(call(t.grad)))]
            total = sum(outs)
            push!(losses, total[dim + 1] / total[dim + 2])
            w .-= 1.0 .* total[1:dim] ./ total[dim + 2]
        end
        @test losses[end] < losses[1] / 10
        e = try
            fetch(call(t.set_weights, reinterpret(UInt8, zeros(dim + 1)))); nothing
        catch err
            err
        end
        @test e isa ActorError && occursin("wrong weight dimension", e.message)
        wait(stop(procs); timeout = 60)
    end
end
Monarch.shutdown()
println("julia_controller.jl: all passed")
