# Declaring the endpoints of a Julia actor type, and the hooks an actor
# type may define (supervise, cleanup).

"""actor type => endpoint name => (function, raw). Types are looked up by
identity (IdDict): hashing a type is slow, and this is on every call."""
const ENDPOINTS = IdDict{Any, Dict{Symbol, Tuple{Any, Bool}}}()

function register_endpoint!(T, name::Symbol, f, raw::Bool)
    get!(() -> Dict{Symbol, Tuple{Any, Bool}}(), ENDPOINTS, T)[name] = (f, raw)
    return nothing
end

function find_endpoint(T, name::Symbol)
    eps = get(ENDPOINTS, T, nothing)
    ep = eps === nothing ? nothing : get(eps, name, nothing)
    ep === nothing || return ep
    known = eps === nothing ? String[] : sort([String(k) for k in keys(eps)])
    throw(ArgumentError("$T has no endpoint $name (endpoints: $(join(known, ", ")))"))
end

"""
    @endpoint function name(self::ActorType, args...) ... end
    @endpoint raw function name(self::ActorType, parts::Vector{UInt8}...) ... end

Define a function and make it endpoint `name` of `ActorType`. A plain
endpoint takes and returns Julia values (Serialization, Julia callers
only). A `raw` endpoint gets one `Vector{UInt8}` per part and returns
bytes (one part), `nothing` (no parts) or a tuple/vector of bytes (one part
each): callable from any language.
"""
macro endpoint(args...)
    raw = false
    if length(args) == 2 && args[1] === :raw
        raw = true
        fdef = args[2]
    elseif length(args) == 1
        fdef = args[1]
    else
        throw(ArgumentError("@endpoint [raw] function name(self::T, ...) ... end"))
    end
    (fdef isa Expr && fdef.head in (:function, :(=))) || throw(ArgumentError("@endpoint needs a function definition"))
    sig = fdef.args[1]
    while sig isa Expr && sig.head === :where
        sig = sig.args[1]
    end
    (sig isa Expr && sig.head === :call) || throw(ArgumentError("@endpoint: cannot read the signature"))
    name = sig.args[1]
    pos = [a for a in sig.args[2:end] if !(a isa Expr && a.head === :parameters)]
    (!isempty(pos) && pos[1] isa Expr && pos[1].head === :(::)) ||
        throw(ArgumentError("@endpoint $name: the first argument must be typed with the actor type (self::T)"))
    T = pos[1].args[end]
    return quote
        $(esc(fdef))
        $(register_endpoint!)($(esc(T)), $(QuoteNode(name isa Symbol ? name : Symbol(name))), $(esc(name)), $raw)
    end
end

"""An actor's supervision hook: a mesh it spawned failed. Return `true`
when handled; `false` (the default) escalates to its own owner."""
supervise(actor, event::SupervisionEvent) = false

"""Called when an actor is stopped (default: nothing)."""
cleanup(actor) = nothing
