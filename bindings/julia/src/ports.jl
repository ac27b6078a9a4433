# Ports: channels any proc of the job can send to.

"""A reference to a port: plain bytes, so it travels inside messages."""
struct PortRef
    bytes::Vector{UInt8}
end

"""The receiving end of a port of this process."""
mutable struct PortReceiver
    ptr::Ptr{CAPI.monarch_port_receiver}
    decode::Any
    what::String
end

function managed_receiver(p, decode, what)
    rx = PortReceiver(p, decode, what)
    finalizer(close, rx)
    return rx
end

"""Open a port (`once`: it takes one value). `raw`: values are bytes
(one `Vector{UInt8}` per part) rather than Julia values."""
function open_port(; once::Bool = false, raw::Bool = false)
    out = Ref{Ptr{CAPI.monarch_port_receiver}}(C_NULL)
    check(CAPI.monarch_port_open(runtime().ptr, once, out))
    return managed_receiver(out[], raw ? raw_value : julia_value, "port")
end

function Base.close(rx::PortReceiver)
    p = rx.ptr
    rx.ptr = C_NULL
    p == C_NULL || CAPI.monarch_port_receiver_free(p)
    return
end

"""The reference others send to."""
function PortRef(rx::PortReceiver)
    rx.ptr == C_NULL && throw(ArgumentError("the port was closed"))
    return PortRef(owned_bytes((o, n) -> CAPI.monarch_port_receiver_ref(rx.ptr, o, n)))
end

"""A Future of the next value sent to the port."""
function recv(rx::PortReceiver)
    rx.ptr == C_NULL && throw(ArgumentError("the port was closed"))
    out = Ref{Ptr{CAPI.monarch_future}}(C_NULL)
    check(CAPI.monarch_port_receiver_recv(rx.ptr, out))
    return Future(out[], one_point(rx.decode, rx.what), "receive on $(rx.what)")
end

"""Send a Julia value to a port (a Julia receiver)."""
send(p::PortRef, value) = send_parts(p, [serialize_bytes(value)])

"""Send raw parts to a port (a receiver of any language)."""
function send_parts(p::PortRef, parts)
    ps = [as_part(x) for x in parts]
    with_parts(ps) do arr, n
        GC.@preserve p check(CAPI.monarch_port_send(runtime().ptr, pointer(p.bytes), length(p.bytes), arr, n))
    end
end

"""Send an error to a port; its receiver's fetch throws ActorError(message)."""
function send_error(p::PortRef, message::AbstractString)
    GC.@preserve p check(CAPI.monarch_port_send_error(runtime().ptr, pointer(p.bytes), length(p.bytes), cstr(message),
        Ptr{CAPI.monarch_bytes}(C_NULL), 0))
end
