// monarch/monarch.hpp: header-only C++17 binding of libmonarch.
//
// A thin layer over the C ABI (monarch.h, docs/c-abi.md): RAII owners for
// every handle, errors as exceptions, futures you wait on, and the worker
// loop that hosts C++ actors (monarch/actor.hpp) over the pull API. All
// runtime logic is in libmonarch; nothing here talks to the network.
//
//   int main(int argc, char** argv) {
//     monarch::serve_if_worker(argc, argv);   // procs re-run this binary
//     monarch::Runtime rt;
//     auto procs = rt.spawn_procs({{"hosts", 2}, {"gpus", 2}});
//     auto counters = procs.spawn("c", "Counter", int64_t{5});
//     for (auto& p : counters.call("incr", int64_t{1}).get())
//       std::cout << p.point().rank << " -> " << p.as<int64_t>() << "\n";
//   }
//
// Supervision: a proc that dies fails the calls in flight to it (error
// points), later calls to views holding it throw Error(MONARCH_ERR_PROC_FAILED),
// and the failure is pulled as a SupervisionEvent with
// Runtime::next_supervision_event (docs/supervision.md).
//
// Also here: ports and streams (PortReceiver, Port, ActorMesh::send /
// stream, deferred replies), the data plane (RdmaBuffer, Transfer), SLURM
// (SlurmJob), mesh views (flatten / rename / split). docs/c-abi.md lists
// which class wraps each C function ("The C++ binding").
//
// Not covered, because the C ABI lacks it: zero-copy sends with a deleter.
#ifndef MONARCH_HPP
#define MONARCH_HPP

#include <monarch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actor.hpp"

namespace monarch {

// ------------------------------------------------------------------ errors

/// A libmonarch call failed: `status()` is its monarch_status, `what()`
/// the library's message (monarch_last_error at the time).
class Error : public std::runtime_error {
 public:
  Error(monarch_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  monarch_status status() const { return status_; }
  bool is_timeout() const { return status_ == MONARCH_ERR_TIMEOUT; }

 private:
  monarch_status status_;
};

/// Status of an ActorError: not a libmonarch status; an endpoint or
/// constructor failed (or its proc died) at the point `rank()`.
constexpr monarch_status kEndpointFailed = -1;

/// An endpoint (or constructor) failed at one point of a call.
class ActorError : public Error {
 public:
  ActorError(std::size_t rank, const std::string& message)
      : Error(kEndpointFailed, "rank " + std::to_string(rank) + ": " + message),
        rank_(rank),
        remote_(message) {}
  std::size_t rank() const { return rank_; }
  /// The remote error message alone.
  const std::string& remote_message() const { return remote_; }

 private:
  std::size_t rank_;
  std::string remote_;
};

namespace detail {
inline void check(monarch_status s) {
  if (s != MONARCH_OK) throw Error(s, monarch_last_error());
}
inline const char* status_name(monarch_status s) {
  switch (s) {
    case MONARCH_OK: return "OK";
    case MONARCH_ERR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case MONARCH_ERR_INVALID_HANDLE: return "INVALID_HANDLE";
    case MONARCH_ERR_TIMEOUT: return "TIMEOUT";
    case MONARCH_ERR_PROC_FAILED: return "PROC_FAILED";
    case MONARCH_ERR_STOPPED: return "STOPPED";
    case MONARCH_ERR_IO: return "IO";
    case MONARCH_ERR_PANIC: return "PANIC";
    case MONARCH_ERR_INTERNAL: return "INTERNAL";
    default: return "UNKNOWN";
  }
}

/// Unique ownership of one handle, freed with `Free`.
template <class H, monarch_status (*Free)(H*)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(H* h) : h_(h) {}
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  /// The raw handle (still owned). NULL after a move: the library then
  /// rejects it with MONARCH_ERR_INVALID_HANDLE.
  H* get() const { return h_; }
  /// Give up ownership.
  H* release() { return std::exchange(h_, nullptr); }
  void reset() {
    if (h_) Free(std::exchange(h_, nullptr));
  }
  explicit operator bool() const { return h_ != nullptr; }

 private:
  H* h_ = nullptr;
};

// Call `f(&buf, &len)` (a *_shape function) and decode the owned buffer.
template <class F>
Shape owned_shape(F&& f) {
  std::uint8_t* buf = nullptr;
  std::size_t len = 0;
  check(f(&buf, &len));
  struct Guard {
    std::uint8_t* b;
    std::size_t n;
    ~Guard() { monarch_buffer_free(b, n); }
  } g{buf, len};
  return Shape::parse(buf, len);
}

inline std::vector<monarch_bytes> to_c(const std::vector<BytesView>& v) {
  std::vector<monarch_bytes> out;
  out.reserve(v.size());
  for (auto& b : v) out.push_back(monarch_bytes{b.data, b.size});
  return out;
}

inline std::int64_t to_ms(std::chrono::nanoseconds d) {
  if (d.count() < 0) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
  return static_cast<std::int64_t>(ms);
}

inline monarch_runtime*& adopted_runtime() {
  static monarch_runtime* rt = nullptr;
  return rt;
}

/// The runtime of this process (the C ABI allows one at a time), not owned:
/// set while a monarch::Runtime lives or serve_if_worker serves. Atomic:
/// actors' own threads read it.
inline std::atomic<monarch_runtime*>& process_runtime() {
  static std::atomic<monarch_runtime*> rt{nullptr};
  return rt;
}

/// Take an owned `out`/`out_len` buffer as Bytes (and free it).
template <class F>
Bytes owned_bytes(F&& f) {
  std::uint8_t* buf = nullptr;
  std::size_t len = 0;
  check(f(&buf, &len));
  Bytes out(buf, buf + len);
  monarch_buffer_free(buf, len);
  return out;
}

inline std::vector<const char*> c_strs(const std::vector<std::string>& v) {
  std::vector<const char*> out;
  out.reserve(v.size());
  for (auto& s : v) out.push_back(s.c_str());
  return out;
}
}  // namespace detail

/// The runtime of this process, not owned: the one a monarch::Runtime
/// created (or, in a worker, the one serve_if_worker serves). Throws
/// Error(MONARCH_ERR_STOPPED) when there is none. Ports, RDMA buffers and
/// references rebuilt from bytes use it, so actor code can call them.
inline monarch_runtime* current_runtime() {
  monarch_runtime* rt = detail::process_runtime();
  if (!rt)
    throw Error(MONARCH_ERR_STOPPED,
                "no monarch runtime in this process (create a monarch::Runtime first)");
  return rt;
}

/// Status name ("TIMEOUT", ...) for messages.
inline const char* status_name(monarch_status s) { return detail::status_name(s); }

// ------------------------------------------------------------------ values

/// A point of a mesh: its row-major rank and coordinates.
struct Point {
  std::size_t rank = 0;
  std::vector<std::size_t> coords;
  const Shape* shape = nullptr;
  /// Coordinate along dimension `label`.
  std::size_t operator[](std::string_view label) const { return coords.at(shape->index_of(label)); }
};

class ValueMesh;

/// One point of a ValueMesh: a value (payload parts) or an error.
class PointValue {
 public:
  const Point& point() const { return point_; }
  std::size_t rank() const { return point_.rank; }
  bool ok() const { return !is_error_; }
  /// The error message ("" for a value).
  const std::string& error() const { return error_; }
  std::size_t size() const { return nparts_; }
  /// Borrow part `i` (valid while the ValueMesh lives). Throws the point's
  /// ActorError if it is an error.
  BytesView part(std::size_t i = 0) const;
  /// Decode part `i` as T. Throws ActorError for an error point.
  template <class T>
  T as(std::size_t i = 0) const {
    return decode<T>(part(i));
  }
  /// Throw the point's ActorError if it is an error.
  void check() const {
    if (is_error_) throw ActorError(point_.rank, error_);
  }

 private:
  friend class ValueMesh;
  monarch_value_mesh* vm_ = nullptr;
  Point point_;
  bool is_error_ = false;
  std::string error_;
  std::size_t nparts_ = 0;
  // Part 0 as monarch_value_mesh_points described it (borrowed).
  bool has_part0_ = false;
  const std::uint8_t* part0_ = nullptr;
  std::size_t part0_len_ = 0;
};

/// The gathered replies of a call: one PointValue per rank (row-major over
/// `shape()`). Iterable.
class ValueMesh {
 public:
  explicit ValueMesh(monarch_value_mesh* vm) : h_(vm) {
    detail::check(monarch_value_mesh_len(h_.get(), &len_));
  }
  ValueMesh(ValueMesh&&) = default;
  ValueMesh& operator=(ValueMesh&&) = default;

  /// The shape of the mesh that was called (decoded on first use).
  const Shape& shape() const {
    if (!shape_) {
      auto* h = h_.get();
      shape_ = std::make_unique<Shape>(detail::owned_shape(
          [h](std::uint8_t** b, std::size_t* n) { return monarch_value_mesh_shape(h, b, n); }));
    }
    return *shape_;
  }
  std::size_t size() const { return len_; }
  PointValue operator[](std::size_t rank) const { return at(rank); }
  PointValue at(std::size_t rank) const {
    PointValue p;
    bool err = false;
    const char* msg = nullptr;
    if (rank < len_) {
      // Every point described at once, on first use (monarch_value_mesh_points).
      if (infos_.empty()) {
        std::vector<monarch_point_info> infos(len_);
        std::size_t n = 0;
        detail::check(monarch_value_mesh_points(h_.get(), infos.data(), infos.size(), &n));
        infos.resize(std::min(n, len_));
        infos_ = std::move(infos);
      }
    }
    if (rank < infos_.size()) {
      const monarch_point_info& info = infos_[rank];
      err = info.is_error;
      msg = info.error;
      p.nparts_ = info.nparts;
      p.part0_ = info.part0;
      p.part0_len_ = info.part0_len;
      p.has_part0_ = info.nparts > 0;
    } else {
      // Out of range: the library's error.
      detail::check(monarch_value_mesh_point(h_.get(), rank, &err, &msg, &p.nparts_));
    }
    p.vm_ = h_.get();
    p.is_error_ = err;
    p.error_ = msg ? msg : "";
    p.point_.rank = rank;
    p.point_.coords = shape().coords(rank);
    p.point_.shape = &shape();
    return p;
  }
  /// Whether any point is an error.
  bool has_errors() const {
    for (std::size_t i = 0; i < len_; ++i)
      if (!at(i).ok()) return true;
    return false;
  }
  /// Throw the first error point as ActorError.
  const ValueMesh& check() const {
    for (std::size_t i = 0; i < len_; ++i) at(i).check();
    return *this;
  }
  /// Part `i` of every point decoded as T (throws ActorError on an error point).
  template <class T>
  std::vector<T> values(std::size_t i = 0) const {
    std::vector<T> out;
    out.reserve(len_);
    for (std::size_t r = 0; r < len_; ++r) out.push_back(at(r).as<T>(i));
    return out;
  }
  /// The only point's part `i` as T (for a call on one actor).
  template <class T>
  T item(std::size_t i = 0) const {
    if (len_ != 1)
      throw Error(MONARCH_ERR_INVALID_ARGUMENT,
                  "item() on a ValueMesh of " + std::to_string(len_) + " points");
    return at(0).as<T>(i);
  }

  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = PointValue;
    using difference_type = std::ptrdiff_t;
    using pointer = const PointValue*;
    using reference = const PointValue&;
    iterator(const ValueMesh* vm, std::size_t i) : vm_(vm), i_(i) { load(); }
    reference operator*() const { return cur_; }
    pointer operator->() const { return &cur_; }
    iterator& operator++() {
      ++i_;
      load();
      return *this;
    }
    bool operator==(const iterator& o) const { return i_ == o.i_; }
    bool operator!=(const iterator& o) const { return i_ != o.i_; }

   private:
    void load() {
      if (i_ < vm_->size()) cur_ = vm_->at(i_);
    }
    const ValueMesh* vm_;
    std::size_t i_;
    PointValue cur_;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, len_); }

  monarch_value_mesh* handle() const { return h_.get(); }

 private:
  detail::Handle<monarch_value_mesh, monarch_value_mesh_free> h_;
  // Heap-allocated so Points keep pointing at it when the ValueMesh moves.
  mutable std::unique_ptr<Shape> shape_;
  std::size_t len_ = 0;
  // monarch_value_mesh_points (pointers borrowed from the value mesh).
  mutable std::vector<monarch_point_info> infos_;
};

inline BytesView PointValue::part(std::size_t i) const {
  check();
  if (i == 0 && has_part0_) return BytesView(part0_, part0_len_);
  const std::uint8_t* d = nullptr;
  std::size_t n = 0;
  detail::check(monarch_value_mesh_part(vm_, point_.rank, i, &d, &n));
  return BytesView(d, n);
}

/// A pending ValueMesh. `get()` waits and takes it (once).
class Future {
 public:
  Future() = default;
  explicit Future(monarch_future* f) : h_(f) {}

  /// Whether the result is there (never waits).
  bool ready() const {
    bool r = false;
    detail::check(monarch_future_poll(h_.get(), &r));
    return r;
  }
  /// Wait up to `d`; true when complete.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    return wait_ms(detail::to_ms(std::chrono::duration_cast<std::chrono::nanoseconds>(d)));
  }
  /// Wait until complete.
  void wait() const { wait_ms(-1); }
  /// Wait and take the result; throws Error with the status of an
  /// operation that failed as a whole.
  ValueMesh get() {
    wait_ms(-1);
    return take();
  }
  /// Like get(), but throws Error(MONARCH_ERR_TIMEOUT) after `d` (the
  /// future stays usable: get() again later).
  template <class Rep, class Period>
  ValueMesh get(std::chrono::duration<Rep, Period> d) {
    if (!wait_for(d))
      throw Error(MONARCH_ERR_TIMEOUT, "future not complete after " +
                                           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) +
                                           " ms");
    return take();
  }
  monarch_future* handle() const { return h_.get(); }
  monarch_future* release() { return h_.release(); }

 private:
  bool wait_ms(std::int64_t ms) const {
    monarch_status s = monarch_future_wait(h_.get(), ms);
    if (s == MONARCH_ERR_TIMEOUT) return false;
    detail::check(s);
    return true;
  }
  ValueMesh take() {
    monarch_value_mesh* vm = nullptr;
    detail::check(monarch_future_take(h_.get(), &vm));
    return ValueMesh(vm);
  }
  detail::Handle<monarch_future, monarch_future_free> h_;
};

// ------------------------------------------------------------------ ports

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

// ------------------------------------------------------------------ meshes

/// How a call is answered (MONARCH_CALL_*).
enum class CallMode : std::uint32_t {
  All = MONARCH_CALL_ALL,
  One = MONARCH_CALL_ONE,
  Choose = MONARCH_CALL_CHOOSE,
  Broadcast = MONARCH_CALL_BROADCAST,
};

/// `stop` for `slice(label, start, stop)` meaning "to the end".
constexpr std::int64_t kEnd = MONARCH_SLICE_END;
/// A size for `split` meaning "infer it from the dimension and the others".
constexpr std::size_t kInfer = MONARCH_SPLIT_INFER;

/// Named dimensions and sizes of a mesh to create, e.g. {{"hosts", 2}, {"gpus", 4}}.
using Dims = std::vector<std::pair<std::string, std::size_t>>;
/// Dimension renames for `rename`: {{"from", "to"}, ...}.
using Renames = std::vector<std::pair<std::string, std::string>>;

namespace detail {
// The C arrays of `rename` / `split`, and the call.
template <class H, class F>
H* renamed(const Renames& names, F&& f) {
  std::vector<const char*> from, to;
  for (auto& n : names) {
    from.push_back(n.first.c_str());
    to.push_back(n.second.c_str());
  }
  H* out = nullptr;
  check(f(from.data(), to.data(), names.size(), &out));
  return out;
}
template <class H, class F>
H* split_into(const Dims& dims, F&& f) {
  std::vector<const char*> names;
  std::vector<std::size_t> sizes;
  for (auto& d : dims) {
    names.push_back(d.first.c_str());
    sizes.push_back(d.second);
  }
  H* out = nullptr;
  check(f(names.data(), sizes.data(), dims.size(), &out));
  return out;
}
}  // namespace detail

class Runtime;

/// An n-d array of actors (or a slice of one).
class ActorMesh {
 public:
  ActorMesh() = default;
  explicit ActorMesh(monarch_actor_mesh* am) : h_(am) {}

  Shape shape() const {
    auto* h = h_.get();
    return detail::owned_shape([h](std::uint8_t** b, std::size_t* n) { return monarch_actor_mesh_shape(h, b, n); });
  }
  /// Fix dimension `label` at `index` (the dimension goes away).
  ActorMesh slice(const std::string& label, std::size_t index) const {
    monarch_actor_mesh* out = nullptr;
    detail::check(monarch_actor_mesh_slice_index(h_.get(), label.c_str(), index, &out));
    return ActorMesh(out);
  }
  /// Narrow dimension `label` to start..stop by step (negative: from the end).
  ActorMesh slice(const std::string& label, std::int64_t start, std::int64_t stop,
                  std::int64_t step = 1) const {
    monarch_actor_mesh* out = nullptr;
    detail::check(
        monarch_actor_mesh_slice_range(h_.get(), label.c_str(), start, stop, step, &out));
    return ActorMesh(out);
  }

  /// Merge every dimension into one named `label`, row-major (rank r stays
  /// rank r). Needs evenly spaced points (see docs/c-abi.md "Mesh geometry").
  ActorMesh flatten(const std::string& label) const {
    monarch_actor_mesh* out = nullptr;
    detail::check(monarch_actor_mesh_flatten(h_.get(), label.c_str(), &out));
    return ActorMesh(out);
  }
  /// Rename dimensions, all at once (so two can swap names).
  ActorMesh rename(const Renames& names) const {
    auto* h = h_.get();
    return ActorMesh(detail::renamed<monarch_actor_mesh>(names, [h](auto... a) {
      return monarch_actor_mesh_rename(h, a...);
    }));
  }
  /// Replace dimension `label`, in place, by `dims` (outermost first); one
  /// size may be kInfer. Ranks are unchanged.
  ActorMesh split(const std::string& label, const Dims& dims) const {
    auto* h = h_.get();
    return ActorMesh(detail::split_into<monarch_actor_mesh>(dims, [h, &label](auto... a) {
      return monarch_actor_mesh_split(h, label.c_str(), a...);
    }));
  }

  /// Call `method` on every actor; each argument is one part.
  template <class... A>
  Future call(const std::string& method, const A&... args) const {
    return call_parts(method, encode_all(args...), CallMode::All);
  }
  /// Call the mesh's only actor (error if it has several).
  template <class... A>
  Future call_one(const std::string& method, const A&... args) const {
    return call_parts(method, encode_all(args...), CallMode::One);
  }
  /// Call one actor chosen by the runtime.
  template <class... A>
  Future choose(const std::string& method, const A&... args) const {
    return call_parts(method, encode_all(args...), CallMode::Choose);
  }
  /// Send to every actor; nobody answers.
  template <class... A>
  void broadcast(const std::string& method, const A&... args) const {
    call_parts(method, encode_all(args...), CallMode::Broadcast);
  }
  /// Call with raw parts (borrowed for the call only).
  Future call_parts(const std::string& method, const std::vector<BytesView>& parts,
                    CallMode mode = CallMode::All) const {
    auto c = detail::to_c(parts);
    monarch_future* f = nullptr;
    detail::check(monarch_actor_mesh_call(h_.get(), method.c_str(), c.data(), c.size(),
                                          static_cast<std::uint32_t>(mode),
                                          mode == CallMode::Broadcast ? nullptr : &f));
    return Future(f);
  }
  Future call_parts(const std::string& method, const Parts& parts,
                    CallMode mode = CallMode::All) const {
    return call_parts(method, std::vector<BytesView>(parts.begin(), parts.end()), mode);
  }
  /// Call `method` on every actor with the replies sent to `port` instead
  /// of a future (point r of the mesh answers to slot r); each argument
  /// is one part.
  template <class... A>
  void send(const std::string& method, const Port& port, const A&... args) const {
    send_parts(method, encode_all(args...), port, CallMode::All);
  }
  /// As send, with raw parts; `mode` is CallMode::All or CallMode::Choose
  /// (one actor chosen by the runtime answers).
  void send_parts(const std::string& method, const std::vector<BytesView>& parts, const Port& port,
                  CallMode mode = CallMode::All) const {
    auto c = detail::to_c(parts);
    detail::check(monarch_actor_mesh_send(h_.get(), method.c_str(), c.data(), c.size(),
                                          port.bytes().data(), port.bytes().size(),
                                          static_cast<std::uint32_t>(mode)));
  }
  void send_parts(const std::string& method, const Parts& parts, const Port& port,
                  CallMode mode = CallMode::All) const {
    send_parts(method, std::vector<BytesView>(parts.begin(), parts.end()), port, mode);
  }
  /// Call `method` on every actor and stream the replies: each recv() of
  /// the receiver yields one reply (a one-point ValueMesh) in the order
  /// they arrive, one per actor (an actor whose proc is lost yields an
  /// error point); after the last, the port is closed.
  template <class... A>
  PortReceiver stream(const std::string& method, const A&... args) const {
    return stream_parts(method, encode_all(args...));
  }
  PortReceiver stream_parts(const std::string& method, const std::vector<BytesView>& parts) const {
    auto c = detail::to_c(parts);
    monarch_port_receiver* rx = nullptr;
    detail::check(monarch_actor_mesh_stream(h_.get(), method.c_str(), c.data(), c.size(), &rx));
    return PortReceiver(rx);
  }
  PortReceiver stream_parts(const std::string& method, const Parts& parts) const {
    return stream_parts(method, std::vector<BytesView>(parts.begin(), parts.end()));
  }
  /// Stop the actors (their procs keep running).
  Future stop() const {
    monarch_future* f = nullptr;
    detail::check(monarch_actor_mesh_stop(h_.get(), &f));
    return Future(f);
  }
  /// A serialized reference, to send to other procs (see from_ref).
  Bytes to_ref() const {
    auto* h = h_.get();
    return detail::owned_bytes(
        [h](std::uint8_t** b, std::size_t* n) { return monarch_actor_mesh_to_ref(h, b, n); });
  }
  static ActorMesh from_ref(const Runtime& rt, BytesView ref);
  /// Rebuild from to_ref() bytes with the process's runtime (e.g. in an
  /// actor that received a mesh reference in a message).
  static ActorMesh from_ref(BytesView ref) {
    monarch_actor_mesh* am = nullptr;
    detail::check(monarch_actor_mesh_from_ref(current_runtime(), ref.data, ref.size, &am));
    return ActorMesh(am);
  }

  monarch_actor_mesh* handle() const { return h_.get(); }
  monarch_actor_mesh* release() { return h_.release(); }

 private:
  template <class... A>
  static Parts encode_all(const A&... args) {
    Parts p;
    p.reserve(sizeof...(A));
    (p.push_back(encode(args)), ...);
    return p;
  }
  detail::Handle<monarch_actor_mesh, monarch_actor_mesh_free> h_;
};

/// An n-d array of procs (or a slice of one).
class ProcMesh {
 public:
  ProcMesh() = default;
  explicit ProcMesh(monarch_proc_mesh* pm) : h_(pm) {}

  Shape shape() const {
    auto* h = h_.get();
    return detail::owned_shape([h](std::uint8_t** b, std::size_t* n) { return monarch_proc_mesh_shape(h, b, n); });
  }
  ProcMesh slice(const std::string& label, std::size_t index) const {
    monarch_proc_mesh* out = nullptr;
    detail::check(monarch_proc_mesh_slice_index(h_.get(), label.c_str(), index, &out));
    return ProcMesh(out);
  }
  ProcMesh slice(const std::string& label, std::int64_t start, std::int64_t stop,
                 std::int64_t step = 1) const {
    monarch_proc_mesh* out = nullptr;
    detail::check(
        monarch_proc_mesh_slice_range(h_.get(), label.c_str(), start, stop, step, &out));
    return ProcMesh(out);
  }

  /// Merge every dimension into one named `label`, row-major (rank r stays
  /// rank r). Needs evenly spaced points (see docs/c-abi.md "Mesh geometry").
  ProcMesh flatten(const std::string& label) const {
    monarch_proc_mesh* out = nullptr;
    detail::check(monarch_proc_mesh_flatten(h_.get(), label.c_str(), &out));
    return ProcMesh(out);
  }
  /// Rename dimensions, all at once (so two can swap names).
  ProcMesh rename(const Renames& names) const {
    auto* h = h_.get();
    return ProcMesh(detail::renamed<monarch_proc_mesh>(names, [h](auto... a) {
      return monarch_proc_mesh_rename(h, a...);
    }));
  }
  /// Replace dimension `label`, in place, by `dims` (outermost first); one
  /// size may be kInfer. Ranks are unchanged.
  ProcMesh split(const std::string& label, const Dims& dims) const {
    auto* h = h_.get();
    return ProcMesh(detail::split_into<monarch_proc_mesh>(dims, [h, &label](auto... a) {
      return monarch_proc_mesh_split(h, label.c_str(), a...);
    }));
  }

  /// Spawn actor `name` of `type` on every proc and return the mesh with
  /// the future of the constructors' outcomes (does not wait).
  std::pair<ActorMesh, Future> spawn_async(const std::string& name, const std::string& type,
                                           const std::vector<BytesView>& args = {}) const {
    auto c = detail::to_c(args);
    monarch_actor_mesh* am = nullptr;
    monarch_future* ready = nullptr;
    detail::check(monarch_actor_mesh_spawn(h_.get(), name.c_str(), type.c_str(), c.data(),
                                           c.size(), &am, &ready));
    return {ActorMesh(am), Future(ready)};
  }
  /// Spawn and wait for every constructor; throws ActorError if one failed.
  /// Each argument is one part.
  template <class... A>
  ActorMesh spawn(const std::string& name, const std::string& type, const A&... args) const {
    Parts p;
    (p.push_back(encode(args)), ...);
    auto [mesh, ready] = spawn_async(name, type, std::vector<BytesView>(p.begin(), p.end()));
    ready.get().check();
    return std::move(mesh);
  }
  /// Stop the procs; the future completes when all have exited.
  Future stop() const {
    monarch_future* f = nullptr;
    detail::check(monarch_proc_mesh_stop(h_.get(), &f));
    return Future(f);
  }

  monarch_proc_mesh* handle() const { return h_.get(); }
  monarch_proc_mesh* release() { return h_.release(); }

 private:
  detail::Handle<monarch_proc_mesh, monarch_proc_mesh_free> h_;
};

/// Options of Runtime::spawn_procs.
struct ProcOptions {
  /// Bootstrap command; empty: this binary (which must call serve_if_worker).
  std::vector<std::string> argv;
  /// Extra environment for the procs, "NAME=value".
  std::vector<std::string> env;
};

/// An event for the actors of this process (pull API).
class Event {
 public:
  explicit Event(monarch_event* ev) : h_(ev) {
    const char *actor = nullptr, *method = nullptr, *type = nullptr;
    detail::check(monarch_event_info(h_.get(), &kind_, &actor, &method, &type));
    actor_ = actor;
    method_ = method;
    type_ = type;
  }
  /// An event with the header monarch_runtime_next_event_header wrote
  /// (which saves the info / nparts / part 0 / wants_reply calls).
  Event(monarch_event* ev, const monarch_event_header& h)
      : h_(ev),
        kind_(h.kind),
        actor_(h.actor ? h.actor : ""),
        method_(h.method ? h.method : ""),
        type_(h.type_name ? h.type_name : ""),
        header_(true),
        header_wants_reply_(h.wants_reply),
        nparts_(h.nparts),
        part0_(h.part0),
        part0_len_(h.part0_len) {}
  /// Wait up to `timeout_ms` (-1: forever) for the next event of this
  /// process's actors; std::nullopt on timeout. Throws
  /// Error(MONARCH_ERR_STOPPED) once the runtime was shut down.
  static std::optional<Event> next(monarch_runtime* rt, std::int64_t timeout_ms) {
    monarch_event* raw = nullptr;
    monarch_event_header h{};
    monarch_status s = monarch_runtime_next_event_header(rt, timeout_ms, &raw, &h);
    if (s == MONARCH_ERR_TIMEOUT) return std::nullopt;
    detail::check(s);
    return std::optional<Event>(std::in_place, raw, h);
  }
  std::uint32_t kind() const { return kind_; }
  const char* actor() const { return actor_; }
  const char* method() const { return method_; }
  const char* type_name() const { return type_; }
  /// The event's payload, rank and shape as a Call (borrows the event).
  Call call() const {
    std::size_t n = nparts_;
    if (!header_) detail::check(monarch_event_nparts(h_.get(), &n));
    std::vector<BytesView> parts;
    parts.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (i == 0 && header_) {
        parts.emplace_back(part0_, part0_len_);
        continue;
      }
      const std::uint8_t* d = nullptr;
      std::size_t len = 0;
      detail::check(monarch_event_part(h_.get(), i, &d, &len));
      parts.emplace_back(d, len);
    }
    std::uint64_t rank = 0;
    const std::uint8_t* shape = nullptr;
    std::size_t shape_len = 0;
    detail::check(monarch_event_rank(h_.get(), &rank, &shape, &shape_len));
    return Call(std::move(parts), rank, shape, shape_len, method_, actor_);
  }
  bool wants_reply() const {
    if (header_ && !answered_) return header_wants_reply_;
    bool w = false;
    detail::check(monarch_event_wants_reply(h_.get(), &w));
    return w;
  }
  void reply(const Parts& parts = {}) {
    answered_ = true;
    std::vector<monarch_bytes> c;
    c.reserve(parts.size());
    for (auto& p : parts) c.push_back(monarch_bytes{p.data(), p.size()});
    detail::check(monarch_event_reply(h_.get(), c.data(), c.size()));
  }
  /// Answer and free the event (one call for a one-part answer:
  /// monarch_event_reply_one_and_free). Everything borrowed from the event
  /// (its Call's parts) is invalid afterwards.
  void reply_and_free(const Parts& parts) {
    answered_ = true;
    if (parts.size() == 1) {
      detail::check(monarch_event_reply_one_and_free(h_.release(), parts[0].data(), parts[0].size()));
      return;
    }
    reply(parts);
    h_.reset();
  }
  void reply_error(const std::string& message) {
    answered_ = true;
    detail::check(monarch_event_reply_error(h_.get(), message.c_str(), nullptr, 0));
  }
  /// Take over answering (monarch_event_take_port): the reply port its
  /// sender waits on, or std::nullopt when nobody waits. The event then
  /// counts as answered; send the answer to the port later.
  std::optional<Port> take_port() {
    answered_ = true;
    std::uint8_t* buf = nullptr;
    std::size_t len = 0;
    detail::check(monarch_event_take_port(h_.get(), &buf, &len));
    if (!buf) return std::nullopt;
    Bytes ref(buf, buf + len);
    monarch_buffer_free(buf, len);
    return Port(std::move(ref));
  }
  monarch_event* handle() const { return h_.get(); }

 private:
  detail::Handle<monarch_event, monarch_event_free> h_;
  std::uint32_t kind_ = 0;
  const char* actor_ = "";
  const char* method_ = "";
  const char* type_ = "";
  // From monarch_runtime_next_event_header (valid while `header_`).
  bool header_ = false;
  bool header_wants_reply_ = false;
  bool answered_ = false;
  std::size_t nparts_ = 0;
  const std::uint8_t* part0_ = nullptr;
  std::size_t part0_len_ = 0;
};

/// Hosts this binary's registered actors (actor_registry) for a runtime:
/// turns events into constructor / endpoint calls and answers them.
class ActorServer {
 public:
  /// Handle one event. Returns false for STOP_PROC (leave the loop).
  bool handle(Event& ev) {
    std::uint32_t kind = ev.kind();
    if (kind == MONARCH_EVENT_STOP_PROC) return false;
    Parts out;
    std::string error;
    bool failed = false;
    // Set when the endpoint took the reply port (defer_reply).
    std::optional<Port> deferred;
    bool taken = false;
    try {
      switch (kind) {
        case MONARCH_EVENT_SPAWN:
          host_.spawn(ev.actor(), ev.type_name(), ev.call());
          break;
        case MONARCH_EVENT_MESSAGE: {
          Call call = ev.call();
          call.set_reply_port_taker([&ev, &deferred, &taken]() -> Bytes {
            if (taken) throw std::logic_error("the reply port was already taken");
            deferred = ev.take_port();
            taken = true;
            return deferred ? deferred->bytes() : Bytes{};
          });
          out = host_.message(ev.actor(), call);
          break;
        }
        case MONARCH_EVENT_STOP_ACTOR:
          host_.stop(ev.actor());
          break;
        case MONARCH_EVENT_SUPERVISE: {
          Call call = ev.call();
          BytesView fb = call.part(0);
          SupervisionEvent se = SupervisionEvent::parse(fb.data, fb.size);
          if (!host_.supervise(ev.actor(), se))
            throw std::runtime_error("actor '" + std::string(ev.actor()) +
                                     "' did not handle the failure: " + se.report);
          break;
        }
        default:
          throw std::runtime_error("unknown event kind " + std::to_string(kind));
      }
    } catch (const std::exception& e) {
      failed = true;
      error = e.what();
    } catch (...) {
      failed = true;
      error = "unknown C++ exception";
    }
    if (taken) {
      // The endpoint answers through the port; an error after deferring
      // goes there too, so the caller does not wait forever.
      if (failed && deferred) {
        try {
          deferred->send_error(error);
        } catch (const std::exception& e) {
          std::cerr << "monarch: cannot send the error of a deferred reply: " << e.what() << "\n";
        }
      }
    } else if (ev.wants_reply()) {
      if (failed)
        ev.reply_error(error);
      else
        ev.reply_and_free(out);
    } else if (failed && kind == MONARCH_EVENT_MESSAGE) {
      // Nobody waits (broadcast): the runtime fails the actor and reports
      // the error to the mesh's owner.
      ev.reply_error(error);
    }
    return true;
  }
  /// Serve until the proc is stopped (or `timeout_ms` passes with no
  /// event, if not -1). Returns false once the runtime stopped / STOP_PROC.
  bool serve(monarch_runtime* rt, std::int64_t timeout_ms = -1) {
    for (;;) {
      monarch_event* raw = nullptr;
      monarch_event_header h{};
      monarch_status s = monarch_runtime_next_event_header(rt, timeout_ms, &raw, &h);
      if (s == MONARCH_ERR_TIMEOUT) return true;
      if (s == MONARCH_ERR_STOPPED) return false;
      detail::check(s);
      Event ev(raw, h);
      if (!handle(ev)) return false;
    }
  }
  ActorHost& host() { return host_; }

 private:
  ActorHost host_;
};

/// The path of this executable (/proc/self/exe).
inline std::string self_exe() {
  std::vector<char> buf(4096);
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) throw Error(MONARCH_ERR_IO, "cannot read /proc/self/exe");
  return std::string(buf.data(), static_cast<std::size_t>(n));
}

namespace detail {
/// Marshal `dims` and `opts` (argv defaulting to this binary) into C arrays
/// and call `spawn(labels, sizes, ndim, argv, argc, env, nenv, &out)`.
template <class F>
ProcMesh spawn_with(const Dims& dims, const ProcOptions& opts, F&& spawn) {
  std::vector<const char*> labels;
  std::vector<std::size_t> sizes;
  for (auto& d : dims) {
    labels.push_back(d.first.c_str());
    sizes.push_back(d.second);
  }
  std::vector<std::string> argv = opts.argv;
  if (argv.empty()) argv.push_back(self_exe());
  std::vector<const char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.c_str());
  for (auto& e : opts.env) cenv.push_back(e.c_str());
  monarch_proc_mesh* pm = nullptr;
  check(spawn(labels.data(), sizes.data(), dims.size(), cargv.data(), cargv.size(),
              cenv.empty() ? nullptr : cenv.data(), cenv.size(), &pm));
  return ProcMesh(pm);
}
}  // namespace detail

/// Start procs with the process's runtime (as Runtime::spawn_procs), e.g.
/// from an actor: the mesh is then owned by that actor, whose
/// Actor::supervise hears of its failures.
inline ProcMesh spawn_procs(const Dims& dims, const ProcOptions& opts = {}) {
  monarch_runtime* rt = current_runtime();
  return detail::spawn_with(dims, opts, [rt](auto... args) {
    return monarch_proc_mesh_spawn(rt, args...);
  });
}

/// The runtime of this process (one per process). Frees (shuts down) on
/// destruction: stops the procs it started.
class Runtime {
 public:
  /// Create the runtime (or adopt the one serve_if_worker created).
  Runtime() {
    if (monarch_abi_version() != MONARCH_ABI_VERSION)
      throw Error(MONARCH_ERR_INVALID_ARGUMENT,
                  "libmonarch ABI version " + std::to_string(monarch_abi_version()) +
                      " but this header was built for " + std::to_string(MONARCH_ABI_VERSION));
    monarch_runtime* rt = std::exchange(detail::adopted_runtime(), nullptr);
    if (!rt) detail::check(monarch_runtime_new(&rt));
    h_ = Handle(rt);
    detail::process_runtime() = rt;
  }
  Runtime(Runtime&&) = default;
  Runtime& operator=(Runtime&& o) noexcept {
    if (this != &o) {
      shutdown();
      h_ = std::move(o.h_);
      server_ = std::move(o.server_);
    }
    return *this;
  }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  ~Runtime() { shutdown(); }

  bool is_worker() const {
    bool w = false;
    detail::check(monarch_runtime_is_worker(h_.get(), &w));
    return w;
  }
  /// Readable whenever a future completes or an event arrives.
  int fd() const {
    int fd = -1;
    detail::check(monarch_runtime_fd(h_.get(), &fd));
    return fd;
  }
  void clear_fd() const { detail::check(monarch_runtime_clear_fd(h_.get())); }

  /// Start one proc per point of `dims`, each running `opts.argv` (default:
  /// this binary, which turns into a worker in serve_if_worker).
  ProcMesh spawn_procs(const Dims& dims, const ProcOptions& opts = {}) const {
    return detail::spawn_with(dims, opts, [this](auto... args) {
      return monarch_proc_mesh_spawn(h_.get(), args...);
    });
  }
  /// A mesh with no dimensions holding this process's proc; serve its
  /// actors with serve_events().
  ProcMesh this_proc() const {
    monarch_proc_mesh* pm = nullptr;
    detail::check(monarch_runtime_this_proc(h_.get(), &pm));
    return ProcMesh(pm);
  }
  /// The next supervision event for this process's top level (failures
  /// of meshes this program spawned itself), waiting up to `timeout`;
  /// std::nullopt if none came. Throws Error(MONARCH_ERR_STOPPED) once the
  /// runtime was shut down. May be called from a thread of its own.
  template <class Rep, class Period>
  std::optional<SupervisionEvent> next_supervision_event(
      std::chrono::duration<Rep, Period> timeout) const {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
    return next_supervision_event_ms(static_cast<std::int64_t>(ms));
  }
  /// As above with a timeout in milliseconds (-1: forever, 0: just check).
  std::optional<SupervisionEvent> next_supervision_event_ms(std::int64_t timeout_ms) const {
    std::uint8_t* buf = nullptr;
    std::size_t len = 0;
    monarch_status s = monarch_supervision_next(h_.get(), timeout_ms, &buf, &len);
    if (s == MONARCH_ERR_TIMEOUT) return std::nullopt;
    detail::check(s);
    struct Free {
      std::uint8_t* b;
      std::size_t n;
      ~Free() { monarch_buffer_free(b, n); }
    } guard{buf, len};
    return SupervisionEvent::parse(buf, len);
  }

  /// Handle events for the actors of this process for up to `timeout_ms`
  /// (-1: until stopped). Returns false once the runtime stopped.
  bool serve_events(std::int64_t timeout_ms = 0) { return server_.serve(h_.get(), timeout_ms); }

  /// The job secret peers authenticate with; an allocator that starts
  /// `monarch host` agents gives it to them (environment variable
  /// MONARCH_JOB_TOKEN or a 0600 file), never on a command line.
  std::string job_token() const {
    std::uint8_t* b = nullptr;
    std::size_t n = 0;
    detail::check(monarch_runtime_job_token(h_.get(), &b, &n));
    std::string s(reinterpret_cast<const char*>(b), n);
    monarch_buffer_free(b, n);
    return s;
  }
  /// How remote procs' stdout/stderr reach this process: printed with a
  /// rank prefix (`stream_to_client`), identical lines within
  /// `aggregate_window_ms` printed once as "[K similar lines] ...".
  void logging_option(bool stream_to_client, std::uint64_t aggregate_window_ms = 0) const {
    detail::check(monarch_runtime_logging_option(h_.get(), stream_to_client, aggregate_window_ms));
  }

  monarch_runtime* handle() const { return h_.get(); }
  /// Shut down now (as the destructor does).
  void shutdown() {
    if (h_) {
      monarch_runtime* mine = h_.get();
      detail::process_runtime().compare_exchange_strong(mine, nullptr);
    }
    h_.reset();
  }

  /// Make actor `actor_key` (as in Call::actor(); "" = this process's top
  /// level) the owner of the meshes this thread spawns from now on: their
  /// failures go to that actor. The worker loop sets this itself while an
  /// event is handled; call it only when an actor's code runs on a thread
  /// of its own, right before spawning.
  void set_owner(const std::string& actor_key) const {
    detail::check(monarch_runtime_set_owner(h_.get(), actor_key.c_str()));
  }
  /// Open a port of this process (see PortReceiver::open).
  PortReceiver open_port(bool once = false) const {
    monarch_port_receiver* rx = nullptr;
    detail::check(monarch_port_open(h_.get(), once, &rx));
    return PortReceiver(rx);
  }

 private:
  using Handle = detail::Handle<monarch_runtime, monarch_runtime_free>;
  Handle h_;
  ActorServer server_;
};

inline ActorMesh ActorMesh::from_ref(const Runtime& rt, BytesView ref) {
  monarch_actor_mesh* am = nullptr;
  detail::check(monarch_actor_mesh_from_ref(rt.handle(), ref.data, ref.size, &am));
  return ActorMesh(am);
}

/// The hosts procs are started on: this machine (`local`), or running
/// `monarch host` agents (`attach`, one dimension `hosts`). Slices share
/// the agents. Procs started through an attached mesh keep running when
/// the HostMesh is destroyed; stop them with ProcMesh::stop.
class HostMesh {
 public:
  /// This machine only: spawn_procs starts local procs (shape {hosts: 1}).
  static HostMesh local(const Runtime& rt) { return HostMesh(rt); }
  /// Attach the agents at `addrs` ("IP:PORT" as printed after
  /// MONARCH_HOST_READY). The agents must share this runtime's job secret
  /// (Runtime::job_token()). Blocks until every agent answered.
  static HostMesh attach(const Runtime& rt, const std::vector<std::string>& addrs);

  Shape shape() const {
    if (!h_) return Shape({"hosts"}, {1});
    auto* h = h_.get();
    return detail::owned_shape(
        [h](std::uint8_t** b, std::size_t* n) { return monarch_host_mesh_shape(h, b, n); });
  }
  /// Fix dimension `label` at `index` (attached meshes only).
  HostMesh slice(const std::string& label, std::size_t index) const {
    monarch_host_mesh* out = nullptr;
    detail::check(monarch_host_mesh_slice_index(attached(), label.c_str(), index, &out));
    return HostMesh(rt_, out);
  }
  /// Keep `label` narrowed to start..stop by step (attached meshes only).
  HostMesh slice(const std::string& label, std::int64_t start, std::int64_t stop,
                 std::int64_t step = 1) const {
    monarch_host_mesh* out = nullptr;
    detail::check(
        monarch_host_mesh_slice_range(attached(), label.c_str(), start, stop, step, &out));
    return HostMesh(rt_, out);
  }
  /// Procs per host: `dims` are the per-host dimensions; the result has
  /// the host mesh's dimensions followed by `dims`. On attached hosts the
  /// default argv (this binary's path) must exist on every host.
  ProcMesh spawn_procs(const Dims& dims, const ProcOptions& opts = {}) const;

 private:
  friend class SlurmJob;
  explicit HostMesh(const Runtime& rt) : rt_(&rt) {}
  HostMesh(const Runtime* rt, monarch_host_mesh* h) : rt_(rt), h_(h) {}
  monarch_host_mesh* attached() const {
    if (!h_)
      throw Error(MONARCH_ERR_INVALID_ARGUMENT,
                  "a local HostMesh cannot be sliced: attach agents for several hosts");
    return h_.get();
  }
  const Runtime* rt_;
  detail::Handle<monarch_host_mesh, monarch_host_mesh_free> h_;
};

inline HostMesh HostMesh::attach(const Runtime& rt, const std::vector<std::string>& addrs) {
  std::vector<const char*> c;
  for (auto& a : addrs) c.push_back(a.c_str());
  monarch_host_mesh* out = nullptr;
  detail::check(monarch_host_mesh_attach(rt.handle(), c.data(), c.size(), &out));
  return HostMesh(&rt, out);
}

inline ProcMesh HostMesh::spawn_procs(const Dims& dims, const ProcOptions& opts) const {
  if (!h_) return rt_->spawn_procs(dims, opts);
  return detail::spawn_with(dims, opts, [this](auto... args) {
    return monarch_host_mesh_spawn_procs(h_.get(), args...);
  });
}

// ------------------------------------------------------------- data plane

/// An RDMA transfer in flight (RdmaBuffer::read_into / write_from). The
/// local memory it reads or writes must stay valid until it completes;
/// destroying a Transfer first waits for it to end (transfers always end:
/// their I/O is bounded by the data plane's stall timeout), so a Transfer
/// declared after its memory cannot outlive it.
class Transfer {
 public:
  Transfer() = default;
  explicit Transfer(monarch_future* f) : f_(f) {}
  Transfer(Transfer&&) = default;
  Transfer& operator=(Transfer&& o) noexcept {
    if (this != &o) {
      finish();
      f_ = std::move(o.f_);
    }
    return *this;
  }
  ~Transfer() { finish(); }

  bool ready() const { return f_.ready(); }
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    return f_.wait_for(d);
  }
  /// Wait for the end; returns the backend used ("same_host", "tcp", ...).
  /// Throws Error for a failed transfer (MONARCH_ERR_INVALID_ARGUMENT: a
  /// dropped buffer; MONARCH_ERR_PROC_FAILED: its owner died).
  std::string get() { return backend(f_.get()); }
  /// As get(), throwing Error(MONARCH_ERR_TIMEOUT) after `d` (the transfer
  /// goes on; get() again later).
  template <class Rep, class Period>
  std::string get(std::chrono::duration<Rep, Period> d) {
    return backend(f_.get(d));
  }
  monarch_future* handle() const { return f_.handle(); }

 private:
  static std::string backend(const ValueMesh& vm) {
    vm.check();
    return std::string(vm[0].part(0).str());
  }
  void finish() noexcept {
    if (f_.handle()) monarch_future_wait(f_.handle(), -1);
  }
  Future f_;
};

/// Access peers get to a registered buffer.
enum class RdmaAccess : std::uint32_t {
  ReadWrite = 0,
  ReadOnly = MONARCH_RDMA_READ_ONLY,
};

/// A registered memory buffer other procs read and write one-sided (see
/// docs/data-plane.md), or a handle on another proc's buffer rebuilt from
/// its descriptor bytes. Passed as a call argument (or returned from an
/// endpoint) it is one part: its descriptor. Destroying the owner's
/// RdmaBuffer unregisters the buffer (waiting for transfers in progress),
/// after which its memory may be released: declare the memory before the
/// RdmaBuffer that registers it. Destroying any other handle releases
/// nothing at the owner (drop() does).
class RdmaBuffer {
 public:
  RdmaBuffer() = default;
  explicit RdmaBuffer(monarch_rdma_buffer* b) : h_(b) {}

  /// Register `len` (> 0) bytes at `ptr` (owned by the caller, valid until
  /// this buffer is dropped or destroyed) with the process's runtime.
  /// `readers`: how many remote drops release it (1: the usual single
  /// reference; N: handed to N receivers that each drop once).
  static RdmaBuffer register_memory(void* ptr, std::size_t len,
                                    RdmaAccess access = RdmaAccess::ReadWrite,
                                    std::uint32_t readers = 1) {
    monarch_rdma_buffer* b = nullptr;
    detail::check(monarch_rdma_register(current_runtime(), static_cast<std::uint8_t*>(ptr), len,
                                        static_cast<std::uint32_t>(access), readers, &b));
    return RdmaBuffer(b);
  }
  /// Register the elements of `v` (which must not be resized or destroyed
  /// while registered).
  template <class T>
  static RdmaBuffer register_memory(std::vector<T>& v, RdmaAccess access = RdmaAccess::ReadWrite,
                                    std::uint32_t readers = 1) {
    static_assert(std::is_trivially_copyable_v<T>, "RDMA buffers hold trivially copyable elements");
    return register_memory(v.data(), v.size() * sizeof(T), access, readers);
  }
  /// A handle on the buffer named by descriptor bytes (to_bytes(), made in
  /// any proc of the job). Malformed bytes throw MONARCH_ERR_INVALID_ARGUMENT.
  static RdmaBuffer from_bytes(BytesView desc) {
    monarch_rdma_buffer* b = nullptr;
    detail::check(monarch_rdma_buffer_from_bytes(current_runtime(), desc.data, desc.size, &b));
    return RdmaBuffer(b);
  }
  /// The descriptor (owner, id, size, how to reach it) to send in a message.
  Bytes to_bytes() const {
    auto* h = h_.get();
    return detail::owned_bytes(
        [h](std::uint8_t** b, std::size_t* n) { return monarch_rdma_buffer_to_bytes(h, b, n); });
  }
  std::uint64_t size() const {
    std::uint64_t n = 0;
    detail::check(monarch_rdma_buffer_size(h_.get(), &n));
    return n;
  }
  /// The backend transfers on this handle use ("same_host", "tcp", "ibverbs").
  std::string backend() const {
    const char* b = nullptr;
    detail::check(monarch_rdma_buffer_backend(h_.get(), &b));
    return b ? b : "";
  }
  /// Owner's handle: still registered; other handles: not dropped.
  bool is_registered() const {
    bool r = false;
    detail::check(monarch_rdma_buffer_is_registered(h_.get(), &r));
    return r;
  }
  /// Copy `len` bytes of the buffer, from byte `offset`, into `dst`. A
  /// range outside the buffer throws Error(MONARCH_ERR_INVALID_ARGUMENT).
  Transfer read_into(void* dst, std::size_t len, std::uint64_t offset = 0) const {
    monarch_future* f = nullptr;
    detail::check(monarch_rdma_read_into(h_.get(), offset, static_cast<std::uint8_t*>(dst), len, &f));
    return Transfer(f);
  }
  /// Fill all of `dst` from the buffer's bytes at `offset`.
  template <class T>
  Transfer read_into(std::vector<T>& dst, std::uint64_t offset = 0) const {
    static_assert(std::is_trivially_copyable_v<T>, "RDMA transfers copy trivially copyable elements");
    return read_into(dst.data(), dst.size() * sizeof(T), offset);
  }
  /// Copy `len` bytes from `src` into the buffer at `offset` (refused for a
  /// read-only buffer or a range outside it).
  Transfer write_from(const void* src, std::size_t len, std::uint64_t offset = 0) const {
    monarch_future* f = nullptr;
    detail::check(
        monarch_rdma_write_from(h_.get(), offset, static_cast<const std::uint8_t*>(src), len, &f));
    return Transfer(f);
  }
  template <class T>
  Transfer write_from(const std::vector<T>& src, std::uint64_t offset = 0) const {
    static_assert(std::is_trivially_copyable_v<T>, "RDMA transfers copy trivially copyable elements");
    return write_from(src.data(), src.size() * sizeof(T), offset);
  }
  /// Release the buffer: the owner's handle unregisters it (waiting for
  /// transfers in progress); another handle asks the owner to release one
  /// reference. Every later use of this object throws.
  void drop() { detail::check(monarch_rdma_buffer_drop(h_.get())); }

  monarch_rdma_buffer* handle() const { return h_.get(); }
  monarch_rdma_buffer* release() { return h_.release(); }

 private:
  detail::Handle<monarch_rdma_buffer, monarch_rdma_buffer_free> h_;
};

template <>
struct Codec<RdmaBuffer> {
  static Bytes encode(const RdmaBuffer& b) { return b.to_bytes(); }
  static RdmaBuffer decode(BytesView b) { return RdmaBuffer::from_bytes(b); }
};

/// The backend a transfer with a proc on this host uses by default
/// (MONARCH_RDMA_BACKEND forces one; a bad value throws).
inline std::string default_rdma_backend() {
  const char* b = nullptr;
  detail::check(monarch_rdma_default_backend(&b));
  return b ? b : "";
}

/// Whether the ibverbs backend can be used, and why not.
struct IbverbsStatus {
  bool available = false;
  std::string reason;
};
inline IbverbsStatus ibverbs_status() {
  bool a = false;
  const char* r = nullptr;
  detail::check(monarch_rdma_ibverbs_status(&a, &r));
  return IbverbsStatus{a, r ? r : ""};
}

// ------------------------------------------------------------------ SLURM

/// Options of SlurmJob::start (see monarch_slurm_job_start, docs/slurm.md).
struct SlurmOptions {
  /// Nodes: 0 = every node of the current allocation (SLURM_JOB_ID set);
  /// outside an allocation, srun asks for a new one of this many (> 0).
  std::size_t nodes = 0;
  /// The agent command, valid on every node, e.g.
  /// {"/path/to/monarch", "host", "--listen", "0.0.0.0:0"} (required).
  std::vector<std::string> agent_argv;
  /// More srun options, e.g. "--partition=gpu", "--time=10".
  std::vector<std::string> srun_args;
  /// Bound on the wait for every agent, queueing included (< 0: 300 s).
  std::chrono::milliseconds timeout{-1};
};

/// A SLURM job step running one `monarch host` agent per node, attached as
/// a host mesh. Destroying it (or stop()) stops the agents, their procs
/// and the step (and the allocation srun made).
class SlurmJob {
 public:
  SlurmJob() = default;
  /// Run srun and wait until every agent is ready and attached. Throws
  /// Error with srun's and the agents' last output on failure (no srun:
  /// MONARCH_ERR_IO; refused allocation or a dead agent:
  /// MONARCH_ERR_PROC_FAILED; out of time: MONARCH_ERR_TIMEOUT).
  static SlurmJob start(const Runtime& rt, const SlurmOptions& opts) {
    auto argv = detail::c_strs(opts.agent_argv);
    auto args = detail::c_strs(opts.srun_args);
    monarch_slurm_job* job = nullptr;
    detail::check(monarch_slurm_job_start(rt.handle(), opts.nodes, argv.data(), argv.size(),
                                          args.empty() ? nullptr : args.data(), args.size(),
                                          static_cast<std::int64_t>(opts.timeout.count()), &job));
    return SlurmJob(&rt, job);
  }
  /// The agents as a host mesh (dimension `hosts`, in node order); it
  /// works while the job runs.
  HostMesh host_mesh() const {
    monarch_host_mesh* hm = nullptr;
    detail::check(monarch_slurm_job_host_mesh(h_.get(), &hm));
    return HostMesh(rt_, hm);
  }
  /// The SLURM job id ("" if srun did not report it).
  std::string id() const {
    auto* h = h_.get();
    Bytes b = detail::owned_bytes(
        [h](std::uint8_t** p, std::size_t* n) { return monarch_slurm_job_id(h, p, n); });
    return std::string(b.begin(), b.end());
  }
  /// Stop the agents and their procs and end the step; blocks until srun
  /// exited. Idempotent.
  void stop() const { detail::check(monarch_slurm_job_stop(h_.get())); }

  monarch_slurm_job* handle() const { return h_.get(); }
  monarch_slurm_job* release() { return h_.release(); }

 private:
  SlurmJob(const Runtime* rt, monarch_slurm_job* h) : rt_(rt), h_(h) {}
  const Runtime* rt_ = nullptr;
  detail::Handle<monarch_slurm_job, monarch_slurm_job_free> h_;
};

/// First line of main(): when this process was started by a controller as
/// a proc, serve its registered actors (MONARCH_ACTOR) until the proc is
/// stopped, then exit(0); otherwise return (the runtime made here is
/// adopted by the next monarch::Runtime).
inline void serve_if_worker(int argc, char** argv) {
  (void)argc;
  (void)argv;
  monarch_runtime* rt = nullptr;
  monarch_status s = monarch_runtime_new(&rt);
  if (s != MONARCH_OK) {
    std::cerr << "monarch: cannot start the runtime: " << monarch_last_error() << "\n";
    std::exit(1);
  }
  bool worker = false;
  monarch_runtime_is_worker(rt, &worker);
  if (!worker) {
    detail::adopted_runtime() = rt;
    return;
  }
  int code = 0;
  detail::process_runtime() = rt;
  try {
    ActorServer server;
    server.serve(rt);
  } catch (const std::exception& e) {
    std::cerr << "monarch worker: " << e.what() << "\n";
    code = 1;
  }
  detail::process_runtime() = nullptr;
  monarch_runtime_free(rt);
  std::exit(code);
}

}  // namespace monarch

#endif  // MONARCH_HPP
