# The Julia binding against real procs: this file is the controller, and
# the worker procs it spawns re-run it (serve_if_worker below) to host the
# actors of actors.jl. Run: julia bindings/julia/test/runtests.jl
# (make test-julia), with libmonarch built (cargo build --release).

pushfirst!(LOAD_PATH, joinpath(@__DIR__, ".."))
include(joinpath(@__DIR__, "actors.jl"))
Monarch.serve_if_worker()

using Test
using Monarch: ActorError, SupervisionError, TimeoutError, MonarchError, remote_exception, sizes, labels

const REPO = normpath(joinpath(@__DIR__, "..", "..", ".."))
i64(v) = reinterpret(UInt8, [Int64(v)])
from_i64(b) = reinterpret(Int64, b)[1]

"""The supervision events of mesh `mesh` among the next ones (at least `n`
of them, waiting up to 60 s), checking that no more come for it."""
function events_of(mesh, n)
    got = Monarch.SupervisionEvent[]
    deadline = time() + 60
    while count(e -> e.mesh == mesh, got) < n && time() < deadline
        ev = next_supervision_event(; timeout = max(deadline - time(), 0))
        ev === nothing || push!(got, ev)
    end
    ev = next_supervision_event(; timeout = 0.5)
    ev === nothing || push!(got, ev)
    return filter(e -> e.mesh == mesh, got)
end

@testset "Monarch.jl" begin
    @testset "library" begin
        @test Monarch.CAPI.monarch_abi_version() in Monarch.KNOWN_ABI_VERSIONS
        @test isfile(Monarch.library_path())
        for name in Monarch.CAPI.FUNCTION_NAMES
            @test getfield(Monarch.CAPI, Symbol("_fp_", name))[] != C_NULL
        end
        # The generated layer is fresh and wraps every function of monarch.h.
        header = read(joinpath(REPO, "include", "monarch.h"), String)
        declared = Set(m.captures[1] for m in eachmatch(r"\b(monarch_\w+)\(", replace(header, r"//[^\n]*" => "")))
        @test declared == Set(String.(Monarch.CAPI.FUNCTION_NAMES))
        python = Sys.which("python3")
        if python !== nothing
            @test success(`$python $(joinpath(REPO, "scripts", "gen-julia-ccall.py")) --check`)
        end
        @test_throws MonarchError Monarch.check(Monarch.CAPI.monarch_future_free(Ptr{Monarch.CAPI.monarch_future}(1)))
        # Zygotes: none in a process with a runtime; a command that cannot
        # serve as one (it exits at once) is accepted; an empty one is not.
        Monarch.runtime()
        @test_throws MonarchError Monarch.serve_as_zygote(0)
        @test_throws MonarchError Monarch.warm_zygote(String[])
        @test Monarch.warm_zygote(["/bin/true"]; env = Dict("MONARCH_ZYGOTE" => "1")) === nothing
        # MONARCH_LIB is honoured, and a library of an unknown ABI version refused.
        cc = Sys.which("cc")
        if cc !== nothing
            dir = mktempdir()
            write(joinpath(dir, "fake.c"), "unsigned monarch_abi_version(void) { return 99; }\n")
            run(`$cc -shared -fPIC -o $(joinpath(dir, "libfake.so")) $(joinpath(dir, "fake.c"))`)
            code = "pushfirst!(LOAD_PATH, $(repr(normpath(joinpath(@__DIR__, ".."))))); using Monarch; print(Monarch.library_path())"
            load = `$(Base.julia_cmd()) --startup-file=no -e $code`
            err = IOBuffer()
            ok = withenv("MONARCH_LIB" => joinpath(dir, "libfake.so")) do
                success(pipeline(load; stderr = err))
            end
            @test !ok && occursin("ABI version 99", String(take!(err)))
            @test withenv(() -> read(load, String), "MONARCH_LIB" => Monarch.library_path()) == Monarch.library_path()
            rm(dir; recursive = true)
        end
    end

    procs = spawn_procs(this_host(); per_host = (gpus = 4,))
    @test sizes(procs) == (gpus = 4,)

    @testset "calls and value meshes" begin
        c = spawn(procs, "counter", Counter, 10)
        vm = fetch(call(c.incr, 2); timeout = 120)
        @test vm isa ValueMesh
        @test collect(values(vm)) == [12, 12, 12, 12]
        @test sizes(vm) == (gpus = 4,)
        @test [(p.rank, p.gpus, v) for (p, v) in vm] == [(r, r, 12) for r in 0:3]
        @test vm[gpus = 3] == 12
        @test fetch(call(c.whoami))[gpus = 2] == (2, (gpus = 2,))
        @test fetch(call_one(slice(c; gpus = 1).incr, 5)) == 17
        @test fetch(choose(c.value)) in (12, 17)
        broadcast(c.incr, 100)
        @test collect(values(fetch(call(c.value)))) == [112, 117, 112, 112]
        got = collect(stream(c.value))
        @test sort(got) == [112, 112, 112, 117]
        @test_throws MonarchError call_one(c.value)        # four actors, not one
        @test_throws ArgumentError call(c.no_such_endpoint)
        # Raw endpoints of a Julia actor.
        @test fetch(call_one(slice(c; gpus = 0).echo, UInt8[1, 2], UInt8[])) == (UInt8[1, 2], UInt8[])
        @test fetch(call_one(slice(c; gpus = 0).echo, UInt8[7])) == UInt8[7]
        @test fetch(call_one(slice(c; gpus = 0).nothing_back)) === nothing
        @test_throws ArgumentError call(c.echo, "text")
        err = try
            fetch(call_one(slice(c; gpus = 0).bad_return)); nothing
        catch e
            e
        end
        @test err isa ActorError && occursin("raw endpoint returns bytes", err.message)
        wait(stop(c); timeout = 60)
        @test_throws SupervisionError fetch(call(c.value); timeout = 60)   # refused by the runtime
    end

    @testset "views" begin
        c = spawn(procs, "viewed", Counter)
        @test sizes(slice(c; gpus = 1:2)) == (gpus = 2,)
        @test sizes(slice(c; gpus = 0:2:3)) == (gpus = 2,)
        @test sizes(slice(c; gpus = 3)) == NamedTuple()
        sp = split(c, :gpus; nodes = 2, local_rank = 0)
        @test sizes(sp) == (nodes = 2, local_rank = 2)
        @test fetch(call(sp.whoami))[nodes = 1, local_rank = 0] == (2, (nodes = 1, local_rank = 0))
        @test sizes(flatten(sp, "all")) == (all = 4,)
        @test sizes(rename(sp, :nodes => :hosts)) == (hosts = 2, local_rank = 2)
        @test labels(split(procs, :gpus; a = 0, b = 2)) == ["a", "b"]
        @test sizes(slice(procs; gpus = 1:3)) == (gpus = 3,)
        @test_throws MonarchError slice(c; nope = 1)
        @test_throws ArgumentError slice(c; gpus = -1)
        @test_throws MonarchError split(c, :gpus; a = 3, b = 0)
        v = slice(c; gpus = 1)
        close(v); close(v)             # closing twice is fine
        @test_throws ArgumentError call(v.value)
    end

    @testset "proc mesh references" begin
        part = slice(procs; gpus = 1:2)
        again = proc_mesh_from_ref(to_ref(part))
        @test sizes(again) == (gpus = 2,)
        c = spawn(again, "from_ref", Counter, 5)
        @test collect(values(fetch(call(c.incr, 1); timeout = 120))) == [6, 6]
        # Only the spawner stops procs; malformed bytes are an error.
        @test_throws MonarchError fetch(stop(again); timeout = 60)
        @test_throws MonarchError proc_mesh_from_ref(UInt8[1, 2, 3])
        @test fetch(call_one(slice(c; gpus = 0).value); timeout = 60) == 6
    end

    @testset "errors" begin
        c = spawn(procs, "errs", Counter)
        e = try
            fetch(call(c.fail, "bad input")); nothing
        catch err
            err
        end
        @test e isa ActorError
        @test occursin("bad input", e.message) && startswith(e.message, "Counter.fail on rank 0:")
        @test length(e.failures) == 4
        @test remote_exception(e) isa ArgumentError
        @test occursin("3 more of 4", sprint(showerror, e))
        @test fetch(call_one(slice(c; gpus = 2).incr, 1)) == 1      # the actor lived on
        # A constructor that throws fails its actor: a SupervisionError with
        # the failure report, and one event per actor for the owner.
        ce = try
            spawn(procs, "picky", Picky, false); nothing
        catch err
            err
        end
        @test ce isa SupervisionError && occursin("Picky refused to start", ce.message)
        @test occursin("and all its descendants have failed", ce.message)
        @test occursin("the constructor of Main.Picky on rank", ce.message)
        evs = events_of("picky", 4)
        @test length(evs) == 4 && all(e -> e.cause == :spawn_failed, evs)
        @test sort([e.ranks[1] for e in evs]) == [0, 1, 2, 3]
        @test fetch(call(spawn(procs, "fine", Picky, true).hello))[gpus = 0] == "hi"
        ne = try
            spawn_native(procs, "nosuch", "Main:NoSuchType"); nothing
        catch err
            err
        end
        @test ne isa ActorError && occursin("no actor type", ne.message)     # native: what the actor said
        @test length(events_of("nosuch", 4)) == 4
        @test next_supervision_event(; timeout = 0.5) === nothing             # each heard once
    end

    @testset "futures and tasks" begin
        c = spawn(procs, "futs", Counter)
        one = slice(c; gpus = 0)
        f = call_one(one.nap, 2.0)
        @test_throws TimeoutError fetch(f; timeout = 0.2)
        @test fetch(f; timeout = 60) == :awake             # the wait may be repeated
        @test fetch(f) == :awake                           # and the result kept
        # Many callers at once, each on its own task, none blocking the others.
        tasks = [@async fetch(call_one(slice(c; gpus = i % 4).incr, 1)) for i in 1:40]
        @test sort(fetch.(tasks))[end] >= 1
        @test sum(values(fetch(call(c.value)))) == 40
        # While a task waits for a slow reply, the other tasks keep running.
        waiter = @async fetch(call_one(one.nap, 2.0); timeout = 60)
        ch = Channel{Int}(0)
        producer = @async foreach(i -> put!(ch, i), 1:100)
        @test sum(take!(ch) for _ in 1:100) == 5050
        wait(producer)
        @test !istaskdone(waiter)
        @test fetch(waiter) == :awake
    end

    @testset "per-actor execution" begin
        solo = spawn_procs(this_host(); per_host = (gpus = 1,))
        # The first actor of a proc runs on its serving task, the others on
        # tasks of their own: both kinds are exercised below.
        r = spawn(solo, "recorder", Recorder)
        x = spawn(solo, "x", Counter)
        y = spawn(solo, "y", Counter)
        # One actor waits on a gate another actor of the same proc opens.
        f = call_one(x.await_gate)
        @test fetch(call_one(y.open_gate, 7); timeout = 60)
        @test fetch(f; timeout = 60) == 7
        # An endpoint spawns an actor on its own proc and calls it.
        t = spawn(solo, "trainer", Trainer)
        @test fetch(call_one(t.setup); timeout = 60)
        @test [fetch(call_one(t.step); timeout = 60) for _ in 1:3] == [101, 102, 103]
        # Messages to one actor are handled one at a time, in order (its
        # handler yields meanwhile), while another actor is called.
        fs = Monarch.Future[]
        for i in 1:60
            push!(fs, call_one(r.record, i))
            i % 10 == 0 && push!(fs, call_one(y.incr, 1))
        end
        broadcast(r.record, 61)
        @test fetch(call_one(r.record, 62); timeout = 60) == 62
        @test [fetch(f; timeout = 60) for f in fs] == vcat([vcat(collect(i - 9:i), [i ÷ 10]) for i in 10:10:60]...)
        @test fetch(call_one(r.log_of); timeout = 60) == collect(1:62)
        # The same in this process's own proc (its first actor: the trainer).
        lt = spawn(this_proc(), "ltrainer", Trainer)
        @test fetch(call_one(lt.setup); timeout = 60)
        @test fetch(call_one(lt.step); timeout = 60) == 101
        lx = spawn(this_proc(), "lx", Counter)
        ly = spawn(this_proc(), "ly", Counter)
        lf = call_one(lx.await_gate)
        @test fetch(call_one(ly.open_gate, 9); timeout = 60)
        @test fetch(lf; timeout = 60) == 9
        wait(stop(lx); timeout = 30); wait(stop(ly); timeout = 30); wait(stop(lt); timeout = 30)
        wait(stop(solo); timeout = 60)
    end

    @testset "failure semantics" begin
        solo = spawn_procs(this_host(); per_host = (gpus = 1,))
        # An actor's constructor and endpoints run on one task (the first
        # actor's: the serving task; the second's: its own).
        ta = spawn(solo, "tag_a", Tagged, "a")
        tb = spawn(solo, "tag_b", Tagged, "b")
        @test fetch(call_one(tb.tag); timeout = 60) == "b"
        @test fetch(call_one(ta.tag); timeout = 60) == "a"
        fr = spawn(solo, "fragile", Fragile)
        # A plain error fails the call only.
        e = try
            fetch(call_one(fr.break_call, "only this call")); nothing
        catch err
            err
        end
        @test e isa ActorError && occursin("only this call", e.message)
        @test fetch(call_one(fr.alive); timeout = 60)
        # ActorFailure fails the actor: the caller gets the report, later
        # calls fail, the owner hears once.
        e = try
            fetch(call_one(fr.break_actor, "the actor broke"); timeout = 60); nothing
        catch err
            err
        end
        @test e isa SupervisionError && occursin("the actor broke", e.message)
        @test occursin("The actor fragile", e.message) && occursin("and all its descendants have failed", e.message)
        @test_throws SupervisionError fetch(call_one(fr.alive); timeout = 60)
        evs = events_of("fragile", 1)
        @test length(evs) == 1 && evs[1].cause == :endpoint_error && occursin("the actor broke", evs[1].report)
        # spawn without waiting: calls to an actor whose constructor threw fail.
        p = spawn(solo, "picky_later", Picky, false; wait = false)
        e = try
            fetch(call_one(p.hello); timeout = 60); nothing
        catch err
            err
        end
        @test e isa SupervisionError && occursin("Picky refused to start", e.message)
        @test length(events_of("picky_later", 1)) == 1
        @test next_supervision_event(; timeout = 0.5) === nothing
        wait(stop(solo); timeout = 60)
    end

    @testset "this_proc" begin
        loc = spawn(this_proc(), "local", Counter, 1)
        @test fetch(call_one(loc.pid)) == getpid()
        @test fetch(call_one(loc.incr, 2)) == 3
        @test sizes(loc) == NamedTuple()
        wait(stop(loc); timeout = 30)
    end

    @testset "ports" begin
        c = spawn(procs, "porters", Counter)
        rx = open_port()
        @test fetch(call(c.report_to, PortRef(rx), 2))[gpus = 0] == 2
        got = [fetch(recv(rx)) for _ in 1:8]
        @test sort(got) == sort([(r, i) for r in 0:3 for i in 1:2])
        raw = open_port(; raw = true)
        Monarch.send_parts(PortRef(raw), [UInt8[1], UInt8[2, 3]])
        @test fetch(recv(raw)) == (UInt8[1], UInt8[2, 3])
        Monarch.send_error(PortRef(raw), "went wrong")
        @test_throws ActorError fetch(recv(raw))
        once = open_port(; once = true)
        send(PortRef(once), :only)
        @test fetch(recv(once)) == :only
        @test_throws Exception fetch(recv(once))          # a once port closes
        close(rx); close(rx)
        @test_throws ArgumentError recv(rx)
    end

    @testset "rdma" begin
        r = spawn(procs, "rdma", Rdma)
        data = UInt8[(i * 7 + 3) % 256 for i in 1:100_000]
        buf = RDMABuffer(data)
        @test sizeof(buf) == length(data)
        desc = Monarch.descriptor(buf)
        got, backend = fetch(call_one(slice(r; gpus = 1).fetch_bytes, desc, length(data)))
        @test got == data
        @test backend in ("same_host", "tcp", "ibverbs")
        patch = UInt8[0xde, 0xad, 0xbe, 0xef]
        @test fetch(call_one(slice(r; gpus = 2).put_bytes, desc, patch, 10)) == 4
        @test data[11:14] == patch
        @test data[10] == UInt8((10 * 7 + 3) % 256) && data[15] == UInt8((15 * 7 + 3) % 256)
        close(buf)
        ro = RDMABuffer(copy(data); read_only = true)
        e = try
            fetch(call_one(slice(r; gpus = 0).put_bytes, Monarch.descriptor(ro), patch, 0)); nothing
        catch err
            err
        end
        @test e isa ActorError
        close(ro)
        @test_throws ArgumentError RDMABuffer(UInt8[])
    end

    @testset "tensor plane" begin
        # Two Vector{Float32} combined in place through the generated
        # ccall layer (monarch_tensor_combine), then an average finished.
        C = Monarch.CAPI
        a = Float32[1, 2, NaN, -4]
        b = Float32[3, -2, 1, 5]
        GC.@preserve a b begin
            Monarch.check(C.monarch_tensor_combine(C.MONARCH_DTYPE_F32, C.MONARCH_OP_SUM, pointer(a), pointer(b), length(a)))
            @test a[[1, 2, 4]] == Float32[4, 0, 1] && isnan(a[3])
            Monarch.check(C.monarch_tensor_combine(C.MONARCH_DTYPE_F32, C.MONARCH_OP_MAX, pointer(a), pointer(b), length(a)))
            @test a[[1, 2, 4]] == Float32[4, 0, 5] && isnan(a[3])
            Monarch.check(C.monarch_tensor_finish(C.MONARCH_DTYPE_F32, C.MONARCH_OP_AVG, pointer(a), length(a), 2))
            @test a[[1, 2, 4]] == Float32[2, 0, 2.5]
            @test C.monarch_tensor_combine(C.MONARCH_DTYPE_F32, 99, pointer(a), pointer(b), length(a)) == C.MONARCH_ERR_INVALID_ARGUMENT
            @test C.monarch_tensor_combine(C.MONARCH_DTYPE_F32, C.MONARCH_OP_BAND, pointer(a), pointer(b), length(a)) == C.MONARCH_ERR_INVALID_ARGUMENT
            @test C.monarch_tensor_combine(C.MONARCH_DTYPE_F32, C.MONARCH_OP_SUM, C_NULL, pointer(b), length(a)) == C.MONARCH_ERR_INVALID_ARGUMENT
            # A chunk reduce writing into peers' results needs members.
            @test C.monarch_tensor_reduce_chunk_push(C.MONARCH_DTYPE_F32, C.MONARCH_OP_SUM, C_NULL, C_NULL, 0, 0,
                                                     pointer(a), length(a), C_NULL, C_NULL) == C.MONARCH_ERR_INVALID_ARGUMENT
        end
        x = Int64[0b1100, -1]
        y = Int64[0b1010, 1]
        GC.@preserve x y begin
            Monarch.check(C.monarch_tensor_combine(C.MONARCH_DTYPE_I64, C.MONARCH_OP_BXOR, pointer(x), pointer(y), length(x)))
        end
        @test x == Int64[0b0110, -2]
    end

    @testset "introspection" begin
        c = spawn(procs, "introspected", Counter)
        for _ in 1:3
            fetch(call(c.incr); timeout = 120)
        end
        @test_throws ActorError fetch(call_one(slice(c; gpus = 1).fail, "counted failure"); timeout = 120)
        snap = Monarch.introspect(; timeout = 30)
        @test snap isa Monarch.JobSnapshot
        @test snap.procs[1].addr == snap.controller && snap.procs[1].pid == getpid()
        mine = [(p, a) for p in snap.procs for a in p.actors if a.mesh == "introspected"]
        @test sort([a.rank for (_, a) in mine]) == [0, 1, 2, 3]
        for (p, a) in mine
            @test p.state == :ready && p.answered && p.pid > 0
            @test a.state == :ready && a.queue_depth == 0
            @test length(a.handler_hist) == 24 && sum(a.handler_hist) == a.messages
            if a.rank == 1
                @test a.messages == 4 && a.errors == 1 && occursin("counted failure", a.last_error)
            else
                @test a.messages == 3 && a.errors == 0 && a.last_error == ""
            end
        end
        @test any(m -> m.name == "introspected" && m.state == :ready, snap.meshes)
        @test_throws MonarchError Monarch.stop_mesh("no-such-mesh")
        @test_throws ArgumentError Monarch.introspect(; timeout = -1)
        wait(stop(c); timeout = 60)
    end

    @testset "progress" begin
        # The events of real procs starting, then of an operation of ours.
        function events_of(kind, total)
            mine, op = ProgressEvent[], nothing
            deadline = time() + 60
            while time() < deadline
                ev = next_progress_event(timeout = 1)
                (ev === nothing || ev.kind != kind) && continue
                if op === nothing
                    (ev.done != 0 || ev.finished || ev.total != total) && continue
                    op = ev.id
                end
                ev.id == op || continue
                push!(mine, ev)
                ev.finished && return mine
            end
            error("no finished $kind operation within 60 s")
        end
        watch_progress(true)
        two = spawn_procs(this_host(); per_host = (gpus = 2,))
        evs = events_of(:procs_ready, 2)
        @test evs[1].done == 0 && !evs[1].finished
        @test evs[end].finished && evs[end].done == 2 && evs[end].failed == 0
        @test startswith(evs[end].text, "procs ready 2/2 (")
        stop(two)
        p = Progress(:tensor_fetch, "fetch weights", 10)
        set_progress!(p, 4)
        finish!(p)
        finish!(p)
        own = events_of(:tensor_fetch, 10)
        @test [(e.done, e.finished) for e in own] == [(0, false), (4, false), (4, true)]
        @test own[end].label == "fetch weights"
        @test_throws ArgumentError set_progress!(p, 5)
        @test_throws ArgumentError Progress(:nonsense, "x")
        watch_progress(false)
    end

    @testset "supervision" begin
        # An actor that throws under broadcast fails; its owner (this
        # program's top level) gets the event; later calls fail.
        c = spawn(procs, "doomed", Counter)
        broadcast(slice(c; gpus = 1).fail, "broadcast broke")
        ev = next_supervision_event(; timeout = 60)
        @test ev isa Monarch.SupervisionEvent
        @test ev.cause == :endpoint_error && occursin("broadcast broke", ev.report)
        @test ev.mesh == "doomed"
        @test_throws SupervisionError fetch(call_one(slice(c; gpus = 1).value); timeout = 60)
        # A Julia owner's supervise hook handles its child mesh's failure.
        g = spawn(slice(procs; gpus = 3), "guardian", Guardian)
        @test fetch(call_one(g.start_child))
        @test fetch(call_one(g.break_child))
        seen = []
        deadline = time() + 60
        while isempty(seen) && time() < deadline
            seen = fetch(call_one(g.seen))
            isempty(seen) && sleep(0.05)
        end
        @test length(seen) == 1 && seen[1][1] == :endpoint_error && occursin("child broke", seen[1][2])
        @test next_supervision_event(; timeout = 0.5) === nothing   # handled, not escalated
        # A child whose constructor throws: the owner's hook hears of it once.
        @test fetch(call_one(g.start_bad_child))
        deadline = time() + 60
        while length(seen) < 2 && time() < deadline
            seen = fetch(call_one(g.seen))
            length(seen) < 2 && sleep(0.05)
        end
        @test length(seen) == 2 && seen[2][1] == :spawn_failed && occursin("Picky refused to start", seen[2][2])
        sleep(0.5)
        @test length(fetch(call_one(g.seen))) == 2
        @test next_supervision_event(; timeout = 0.5) === nothing
        # A worker that dies: its caller fails promptly, the owner hears of it.
        lone = spawn_procs(this_host(); per_host = (gpus = 1,))
        d = spawn(lone, "dying", Counter)
        pid = fetch(call_one(d.pid))
        f = call_one(d.die, 3)
        @test_throws SupervisionError fetch(f; timeout = 60)
        @test_throws SupervisionError fetch(call_one(d.value); timeout = 60)
        ev = next_supervision_event(; timeout = 60)
        @test ev !== nothing && ev.cause == :exit_code && ev.code == 3
        @test !isdir("/proc/$pid") || read("/proc/$pid/stat", String) |> s -> split(s)[3] == "Z"
        wait(stop(lone); timeout = 60)
    end

    @testset "host agents" begin
        secret = Monarch.job_secret()
        agent = withenv("MONARCH_JOB_TOKEN" => secret) do
            open(`$(Monarch.monarch_binary()) host --listen 127.0.0.1:0`, "r")
        end
        try
            line = readline(agent)
            @test startswith(line, "MONARCH_HOST_READY ")
            hosts = attach_hosts([split(line)[2]])
            @test sizes(hosts) == (hosts = 1,)
            remote = spawn_procs(hosts; per_host = (gpus = 2,))
            @test sizes(remote) == (hosts = 1, gpus = 2)
            c = spawn(remote, "remote", Counter, 5)
            @test fetch(call(c.incr, 1))[hosts = 0, gpus = 1] == 6
            wait(stop(remote); timeout = 60)
            close(hosts)
            @test_throws MonarchError attach_hosts(["127.0.0.1:1"])
        finally
            kill(agent)
            wait(agent)
        end
    end

    wait(stop(procs); timeout = 60)

    @testset "handles after shutdown" begin
        c = spawn(this_proc(), "last", Counter, 0)
        f = call_one(c.value)
        rx = open_port()
        Monarch.shutdown()
        @test_throws Exception fetch(f; timeout = 5)
        close(c); close(procs); close(rx); close(f)       # safe after the runtime is gone
        close(c)
        GC.gc()                                           # and finalizers too
        @test true
    end
end
