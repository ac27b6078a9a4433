// monarch/call.hpp: what an endpoint or a constructor receives
// (monarch::Call). Does not use libmonarch.
#ifndef MONARCH_CALL_HPP
#define MONARCH_CALL_HPP

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <monarch/codec.hpp>
#include <monarch/shape.hpp>

namespace monarch {

/// What an endpoint (or a constructor) receives: the payload parts, and
/// the actor's rank in the mesh the message was sent to, with its shape.
class Call {
 public:
  Call() = default;
  Call(std::vector<BytesView> parts, std::uint64_t rank, const std::uint8_t* shape,
       std::size_t shape_len, std::string method = {}, std::string actor = {})
      : parts_(std::move(parts)),
        rank_(rank),
        shape_buf_(shape),
        shape_len_(shape_len),
        method_(std::move(method)),
        actor_(std::move(actor)) {}

  std::size_t size() const { return parts_.size(); }
  BytesView part(std::size_t i) const {
    if (i >= parts_.size())
      throw std::out_of_range("call has " + std::to_string(parts_.size()) +
                              " parts, asked for part " + std::to_string(i));
    return parts_[i];
  }
  const std::vector<BytesView>& parts() const { return parts_; }
  template <class T>
  T get(std::size_t i) const {
    return decode<T>(part(i));
  }
  std::uint64_t rank() const { return rank_; }
  /// The shape of the mesh the message was sent to (decoded on demand).
  Shape shape() const { return Shape::parse(shape_buf_, shape_len_); }
  const std::string& method() const { return method_; }
  /// The actor's key inside its proc.
  const std::string& actor() const { return actor_; }

  /// Take over answering this message: returns the reference bytes of the
  /// port its sender waits on (empty when nobody waits, e.g. a broadcast).
  /// The endpoint's return value is then ignored; answer later, from any
  /// thread or proc, by sending to that port (monarch::defer_reply and
  /// monarch::Port in monarch/port.hpp). Only endpoints run by the worker
  /// loop of monarch/server.hpp can defer; elsewhere (constructors, plugin
  /// actors) this throws std::logic_error. Call it while the endpoint runs,
  /// not on a copy of the Call kept for later (it refers to the event in
  /// hand).
  Bytes take_reply_port() const {
    if (!take_port_)
      throw std::logic_error(
          "this reply cannot be deferred (only endpoints hosted by monarch.hpp's worker loop "
          "can; constructors and plugin actors answer when they return)");
    return take_port_();
  }
  /// Set by the host that can defer replies (monarch::ActorServer).
  void set_reply_port_taker(std::function<Bytes()> f) { take_port_ = std::move(f); }

 private:
  std::function<Bytes()> take_port_;
  std::vector<BytesView> parts_;
  std::uint64_t rank_ = 0;
  const std::uint8_t* shape_buf_ = nullptr;
  std::size_t shape_len_ = 0;
  std::string method_;
  std::string actor_;
};

}  // namespace monarch

#endif  // MONARCH_CALL_HPP
