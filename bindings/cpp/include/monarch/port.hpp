// monarch/port.hpp: ports and streams: monarch::Port (where values can be
// sent, from any proc of the job), monarch::PortReceiver (the receiving end,
// in this process) and monarch::defer_reply (an endpoint answering later).
#ifndef MONARCH_PORT_HPP
#define MONARCH_PORT_HPP

#include <monarch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <monarch/call.hpp>
#include <monarch/codec.hpp>
#include <monarch/detail/marshal.hpp>
#include <monarch/error.hpp>
#include <monarch/handle.hpp>
#include <monarch/process.hpp>
#include <monarch/value.hpp>

namespace monarch {

/// A reference to a port (opaque bytes, valid in any proc of the job):
/// where values can be sent. Comes from PortReceiver::port(), from a
/// deferred reply (defer_reply, Event::take_port), or from bytes received
/// in a message. Passed as a call argument it is one part (its bytes).
class Port {
 public:
  /// An empty reference (nobody to send to); sending to it throws.
  Port() = default;
  /// Adopt reference bytes (as made by PortReceiver::port().bytes()).
  explicit Port(Bytes ref) : ref_(std::move(ref)) {}
  const Bytes& bytes() const { return ref_; }
  bool empty() const { return ref_.empty(); }

  /// Send one value, each argument one part (through the process's runtime).
  template <class... A>
  void send(const A&... args) const {
    Parts p;
    p.reserve(sizeof...(A));
    (p.push_back(encode(args)), ...);
    send_parts(std::vector<BytesView>(p.begin(), p.end()));
  }
  /// Send one value made of raw parts (borrowed for the call).
  void send_parts(const std::vector<BytesView>& parts) const {
    auto c = detail::to_c(parts);
    detail::check(monarch_port_send(current_runtime(), ref_.data(), ref_.size(), c.data(), c.size()));
  }
  /// Send an error: the receiver's point is an error with `message`.
  void send_error(const std::string& message, const std::vector<BytesView>& parts = {}) const {
    auto c = detail::to_c(parts);
    detail::check(monarch_port_send_error(current_runtime(), ref_.data(), ref_.size(),
                                          message.c_str(), c.data(), c.size()));
  }

 private:
  Bytes ref_;
};

template <>
struct Codec<Port> {
  static Bytes encode(const Port& p) { return p.bytes(); }
  static Port decode(BytesView b) { return Port(b.to_bytes()); }
};

/// Take over answering the message an endpoint is handling (C++ actors
/// hosted by serve_if_worker / Runtime::serve_events): returns its reply
/// port; the endpoint's return value is then ignored and the caller's
/// future completes when something is sent to the port (from any thread,
/// or any proc the port's bytes are handed to). Empty Port when nobody
/// waits (broadcast). If the endpoint throws after deferring, the error
/// is sent to the port. Throws std::logic_error in plugin actors.
inline Port defer_reply(const Call& call) { return Port(call.take_reply_port()); }

/// The receiving end of a port of this process (a channel opened with
/// PortReceiver::open / Runtime::open_port, or the replies of
/// ActorMesh::stream). Destroying it closes the port; values sent later
/// are dropped.
class PortReceiver {
 public:
  PortReceiver() = default;
  explicit PortReceiver(monarch_port_receiver* rx) : h_(rx) {}

  /// Open a port of this process (`once`: it takes one value, then closes).
  static PortReceiver open(bool once = false) {
    monarch_port_receiver* rx = nullptr;
    detail::check(monarch_port_open(current_runtime(), once, &rx));
    return PortReceiver(rx);
  }
  /// The reference senders use (send it to other procs in a message).
  Port port() const {
    auto* h = h_.get();
    return Port(detail::owned_bytes(
        [h](std::uint8_t** b, std::size_t* n) { return monarch_port_receiver_ref(h, b, n); }));
  }
  /// A future of the next value: a ValueMesh of one point (the value, or
  /// the error that was sent). Futures complete in the order they were
  /// asked for. Once the port is closed (a once port that delivered, a
  /// stream whose every actor answered), taking the future throws
  /// Error(MONARCH_ERR_INVALID_ARGUMENT).
  Future recv() const {
    monarch_future* f = nullptr;
    detail::check(monarch_port_receiver_recv(h_.get(), &f));
    return Future(f);
  }

  monarch_port_receiver* handle() const { return h_.get(); }
  monarch_port_receiver* release() { return h_.release(); }

 private:
  detail::Handle<monarch_port_receiver, monarch_port_receiver_free> h_;
};

}  // namespace monarch

#endif  // MONARCH_PORT_HPP
