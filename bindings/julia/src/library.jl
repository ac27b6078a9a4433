# Finding libmonarch and checking its ABI version; the generated ccall
# layer (generated/capi.jl, from include/monarch.h by `make header`).

"""The ccall layer: one Julia function per function of `monarch.h`."""
module CAPI
using Libdl
include(joinpath("generated", "capi.jl"))
end

"""ABI versions of libmonarch this binding knows."""
const KNOWN_ABI_VERSIONS = (UInt32(1),)

const LIBRARY_PATH = Ref{String}("")
const LIBRARY_HANDLE = Ref{Ptr{Cvoid}}(C_NULL)

"""Where libmonarch is looked for, in order: `\$MONARCH_LIB`, the
repository's build output (`target/release`), then the system's library path."""
function library_candidates()
    env = get(ENV, "MONARCH_LIB", "")
    isempty(env) || return [env]
    repo = normpath(joinpath(@__DIR__, "..", "..", ".."))
    out = String[]
    for name in ("libmonarch.so", "libmonarch.so.0")
        p = joinpath(repo, "target", "release", name)
        isfile(p) && push!(out, p)
    end
    push!(out, "libmonarch.so.0", "libmonarch.so")
    return out
end

function load_library!()
    LIBRARY_HANDLE[] == C_NULL || return
    errors = String[]
    for path in library_candidates()
        h = Libdl.dlopen_e(path)
        if h == C_NULL
            push!(errors, path)
            continue
        end
        version = ccall(Libdl.dlsym(h, :monarch_abi_version), UInt32, ())
        if !(version in KNOWN_ABI_VERSIONS)
            error("libmonarch at $path has ABI version $version; this binding knows $(join(KNOWN_ABI_VERSIONS, ", "))")
        end
        CAPI.bind!(h)
        LIBRARY_HANDLE[] = h
        LIBRARY_PATH[] = Libdl.dlpath(h)
        return
    end
    error("libmonarch not found (tried $(join(errors, ", "))): set MONARCH_LIB or run `cargo build --release`")
end

"""The path of the loaded libmonarch."""
library_path() = LIBRARY_PATH[]

"""The repository's `monarch` binary (for `monarch worker --plugin`):
`\$MONARCH_BIN`, else next to the loaded library, else `monarch` on PATH."""
function monarch_binary()
    env = get(ENV, "MONARCH_BIN", "")
    isempty(env) || return env
    p = joinpath(dirname(LIBRARY_PATH[]), "monarch")
    isfile(p) && return p
    found = Sys.which("monarch")
    found === nothing && error("the monarch binary was not found: set MONARCH_BIN or run `cargo build --release`")
    return found
end
