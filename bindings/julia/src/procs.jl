# Host meshes (this host, attached host agents, SLURM jobs) and proc meshes.

"""Hosts to start procs on: this machine (`this_host()`), running host
agents (`attach_hosts(addrs)`) or a SLURM job (`slurm_hosts(nodes)`)."""
mutable struct HostMesh <: AbstractMesh
    ptr::Ptr{CAPI.monarch_host_mesh}   # C_NULL for this host
    job::Ptr{CAPI.monarch_slurm_job}
end
ops(::Type{HostMesh}) = (shape = CAPI.monarch_host_mesh_shape, slice_index = CAPI.monarch_host_mesh_slice_index,
    slice_range = CAPI.monarch_host_mesh_slice_range, free = CAPI.monarch_host_mesh_free)
derive(m::HostMesh, p) = managed(HostMesh(p, C_NULL))

"""This machine: procs are started here as child processes."""
this_host() = HostMesh(C_NULL, C_NULL)
is_local(h::HostMesh) = getfield(h, :ptr) == C_NULL && getfield(h, :job) == C_NULL

"""Attach running `monarch host` agents at `addrs` ("IP:PORT")."""
function attach_hosts(addrs::AbstractVector{<:AbstractString})
    out = Ref{Ptr{CAPI.monarch_host_mesh}}(C_NULL)
    with_cstrings(a -> check(CAPI.monarch_host_mesh_attach(runtime().ptr, a, Csize_t(length(addrs)), out)), addrs)
    return managed(HostMesh(out[], C_NULL))
end

"""Start one host agent per node of a SLURM job (srun) and attach them;
closing the mesh stops the job."""
function slurm_hosts(nodes::Integer = 0; srun_args = String[], timeout::Real = 300)
    agent = [monarch_binary(), "host", "--listen", "0.0.0.0:0"]
    job = Ref{Ptr{CAPI.monarch_slurm_job}}(C_NULL)
    with_cstrings(agent) do a
        with_cstrings(srun_args) do s
            check(CAPI.monarch_slurm_job_start(runtime().ptr, Csize_t(nodes), a, Csize_t(length(agent)), s,
                Csize_t(length(srun_args)), Int64(round(timeout * 1000)), job))
        end
    end
    out = Ref{Ptr{CAPI.monarch_host_mesh}}(C_NULL)
    st = CAPI.monarch_slurm_job_host_mesh(job[], out)
    st == CAPI.MONARCH_OK || (CAPI.monarch_slurm_job_free(job[]); check(st))
    hm = HostMesh(out[], job[])
    finalizer(hm) do h
        close(h)
        j = getfield(h, :job)
        setfield!(h, :job, Ptr{CAPI.monarch_slurm_job}(C_NULL))
        j == C_NULL || CAPI.monarch_slurm_job_free(j)
    end
    return hm
end

"""An n-d array of procs."""
mutable struct ProcMesh <: AbstractMesh
    ptr::Ptr{CAPI.monarch_proc_mesh}
end
ops(::Type{ProcMesh}) = (shape = CAPI.monarch_proc_mesh_shape, slice_index = CAPI.monarch_proc_mesh_slice_index,
    slice_range = CAPI.monarch_proc_mesh_slice_range, flatten = CAPI.monarch_proc_mesh_flatten,
    rename = CAPI.monarch_proc_mesh_rename, split = CAPI.monarch_proc_mesh_split, free = CAPI.monarch_proc_mesh_free)
derive(::ProcMesh, p) = managed(ProcMesh(p))
Base.show(io::IO, m::ProcMesh) = print(io, "ProcMesh(", getfield(m, :ptr) == C_NULL ? "closed" : sizes(m), ")")

"""The command a worker proc runs: this Julia with this script (which calls
`serve_if_worker()` after defining its actors), or `script` when given."""
function julia_worker_argv(script::AbstractString = abspath(PROGRAM_FILE))
    isempty(script) && throw(ArgumentError("no script to re-run as a worker (PROGRAM_FILE is empty): pass bootstrap="))
    exe = joinpath(Sys.BINDIR, Base.julia_exename())
    project = Base.active_project()
    argv = [exe, "--startup-file=no", "--history-file=no"]
    project === nothing || push!(argv, "--project=$(dirname(project))")
    return vcat(argv, [String(script)], ARGS)
end

"""
    spawn_procs(host; per_host=(gpus=4,), bootstrap=nothing, plugins=nothing, env=Dict())

Start procs: per host, one per point of `per_host`. Each runs `bootstrap`
(an argv; default: this script re-run as a Julia worker), or with
`plugins` (paths of plugin libraries) the `monarch worker --plugin` binary.
"""
function spawn_procs(host::HostMesh = this_host(); per_host::NamedTuple = (gpus = 1,), bootstrap = nothing,
                     plugins = nothing, env = Dict{String, String}())
    rt = runtime()
    labels = [String(k) for k in keys(per_host)]
    szs = Csize_t[v for v in values(per_host)]
    if plugins !== nothing
        bootstrap === nothing || throw(ArgumentError("give bootstrap or plugins, not both"))
        for p in plugins
            isfile(p) || throw(ArgumentError("plugin library $p does not exist"))
        end
        argv = vcat([monarch_binary(), "worker"], vcat([["--plugin", abspath(p)] for p in plugins]...))
    else
        argv = bootstrap === nothing ? julia_worker_argv() : collect(String, bootstrap)
    end
    envs = ["$k=$v" for (k, v) in env]
    out = Ref{Ptr{CAPI.monarch_proc_mesh}}(C_NULL)
    claim_spawns(rt)
    with_cstrings(labels) do l
        with_cstrings(argv) do a
            with_cstrings(envs) do e
                nl, na, ne = Csize_t(length(labels)), Csize_t(length(argv)), Csize_t(length(envs))
                if is_local(host)
                    check(CAPI.monarch_proc_mesh_spawn(rt.ptr, l, szs, nl, a, na, e, ne, out))
                else
                    check(CAPI.monarch_host_mesh_spawn_procs(handle(host), l, szs, nl, a, na, e, ne, out))
                end
            end
        end
    end
    return managed(ProcMesh(out[]))
end

"""A mesh with no dimensions holding this process's own proc. In a
controller its actors are served by a task of this process (started here);
in a worker, by the worker's own loop."""
function this_proc()
    out = Ref{Ptr{CAPI.monarch_proc_mesh}}(C_NULL)
    check(CAPI.monarch_runtime_this_proc(runtime().ptr, out))
    start_local_server!()
    return managed(ProcMesh(out[]))
end

"""
    to_ref(m::ProcMesh) -> Vector{UInt8}

Bytes naming the procs of `m` (or of a slice of it), for another process of
the job: `proc_mesh_from_ref` there gives a mesh to spawn actors on.
"""
to_ref(m::ProcMesh) = owned_bytes((out, n) -> CAPI.monarch_proc_mesh_to_ref(handle(m), out, n))

"""
    proc_mesh_from_ref(bytes) -> ProcMesh

The proc mesh named by the bytes of `to_ref`. Actors may be spawned on it;
only the process that spawned the procs may `stop` them.
"""
function proc_mesh_from_ref(bytes::AbstractVector{UInt8})
    b = Vector{UInt8}(bytes)
    out = Ref{Ptr{CAPI.monarch_proc_mesh}}(C_NULL)
    GC.@preserve b check(CAPI.monarch_proc_mesh_from_ref(runtime().ptr, pointer(b), Csize_t(length(b)), out))
    return managed(ProcMesh(out[]))
end

"""Stop the procs of the mesh; a Future completing when all have exited."""
function stop(m::ProcMesh)
    out = Ref{Ptr{CAPI.monarch_future}}(C_NULL)
    check(CAPI.monarch_proc_mesh_stop(handle(m), out))
    return Future(out[], raw -> (read_points(raw, raw_value); nothing), "stopping procs")
end

"""
    warm_zygote(argv; env=Dict())

Start, ahead of the first spawn, the zygote that procs spawned with the
bootstrap command `argv` and `env` (holding `MONARCH_ZYGOTE => "1"`) will be
forked from (docs/architecture.md, "Procs forked from a zygote"). Returns at
once; a command that cannot serve as one leaves spawns on exec.
"""
function warm_zygote(argv::AbstractVector{<:AbstractString}; env = Dict{String, String}())
    rt = runtime()
    envs = ["$k=$v" for (k, v) in env]
    with_cstrings(collect(String, argv)) do a
        with_cstrings(envs) do e
            check(CAPI.monarch_runtime_warm_zygote(rt.ptr, a, Csize_t(length(argv)), e, Csize_t(length(envs))))
        end
    end
    return nothing
end

"""
    serve_as_zygote(fd) -> Bool

Serve as a zygote on `fd` (the process's `MONARCH_ZYGOTE_FD`), in a process
with one thread and no runtime: `true` in each forked child, which goes on
as a proc; `false` in the zygote once the controller is done with it.
"""
function serve_as_zygote(fd::Integer)
    is_proc = Ref{Cint}(0)
    check(CAPI.monarch_zygote_serve(Cint(fd), is_proc))
    return is_proc[] != 0
end
