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
// Not covered yet, because the C ABI lacks them: remote host meshes
// (HostMesh is this machine only), zero-copy sends with a deleter.
#ifndef MONARCH_HPP
#define MONARCH_HPP

#include <monarch.h>
#include <unistd.h>

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
}  // namespace detail

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
    detail::check(monarch_value_mesh_point(h_.get(), rank, &err, &msg, &p.nparts_));
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
};

inline BytesView PointValue::part(std::size_t i) const {
  check();
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
  /// Stop the actors (their procs keep running).
  Future stop() const {
    monarch_future* f = nullptr;
    detail::check(monarch_actor_mesh_stop(h_.get(), &f));
    return Future(f);
  }
  /// A serialized reference, to send to other procs (see from_ref).
  Bytes to_ref() const {
    std::uint8_t* buf = nullptr;
    std::size_t len = 0;
    detail::check(monarch_actor_mesh_to_ref(h_.get(), &buf, &len));
    Bytes out(buf, buf + len);
    monarch_buffer_free(buf, len);
    return out;
  }
  static ActorMesh from_ref(const Runtime& rt, BytesView ref);

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

/// Named dimensions and sizes of a mesh to create, e.g. {{"hosts", 2}, {"gpus", 4}}.
using Dims = std::vector<std::pair<std::string, std::size_t>>;

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
  std::uint32_t kind() const { return kind_; }
  const char* actor() const { return actor_; }
  const char* method() const { return method_; }
  const char* type_name() const { return type_; }
  /// The event's payload, rank and shape as a Call (borrows the event).
  Call call() const {
    std::size_t n = 0;
    detail::check(monarch_event_nparts(h_.get(), &n));
    std::vector<BytesView> parts;
    parts.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
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
    bool w = false;
    detail::check(monarch_event_wants_reply(h_.get(), &w));
    return w;
  }
  void reply(const Parts& parts = {}) {
    std::vector<monarch_bytes> c;
    c.reserve(parts.size());
    for (auto& p : parts) c.push_back(monarch_bytes{p.data(), p.size()});
    detail::check(monarch_event_reply(h_.get(), c.data(), c.size()));
  }
  void reply_error(const std::string& message) {
    detail::check(monarch_event_reply_error(h_.get(), message.c_str(), nullptr, 0));
  }
  monarch_event* handle() const { return h_.get(); }

 private:
  detail::Handle<monarch_event, monarch_event_free> h_;
  std::uint32_t kind_ = 0;
  const char* actor_ = "";
  const char* method_ = "";
  const char* type_ = "";
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
    try {
      switch (kind) {
        case MONARCH_EVENT_SPAWN:
          host_.spawn(ev.actor(), ev.type_name(), ev.call());
          break;
        case MONARCH_EVENT_MESSAGE:
          out = host_.message(ev.actor(), ev.call());
          break;
        case MONARCH_EVENT_STOP_ACTOR:
          host_.stop(ev.actor());
          break;
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
    if (ev.wants_reply()) {
      if (failed)
        ev.reply_error(error);
      else
        ev.reply(out);
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
      monarch_status s = monarch_runtime_next_event(rt, timeout_ms, &raw);
      if (s == MONARCH_ERR_TIMEOUT) return true;
      if (s == MONARCH_ERR_STOPPED) return false;
      detail::check(s);
      Event ev(raw);
      if (!handle(ev)) return false;
    }
  }
  ActorHost& host() { return host_; }

 private:
  ActorHost host_;
};

// ------------------------------------------------------------ supervision

/// A failure reported to the owner of a mesh (decoded from the
/// `monarch.schema.SupervisionEvent` flatbuffer; see docs/supervision.md).
struct SupervisionEvent {
  /// monarch.schema.FailureCause values.
  enum Cause : std::uint8_t {
    ExitCode = 0,
    Signal = 1,
    EndpointError = 2,
    HeartbeatLost = 3,
    Undeliverable = 4,
    ConnectionLost = 5,
    SupervisorFailed = 6,
    SpawnFailed = 7,
  };
  std::uint64_t id = 0;
  /// Name of the failed mesh (a proc mesh is named "procs.<n>").
  std::string mesh;
  /// Actor key of the failed actor mesh ("" for a proc mesh).
  std::string mesh_key;
  /// The failed ranks of that mesh.
  std::vector<std::uint64_t> ranks;
  /// Address of the failed proc; key of the failed actor ("" for a proc).
  std::string proc, actor;
  /// Key of the owning actor ("" = this process's top level).
  std::string owner;
  Cause cause = ExitCode;
  /// Exit code or signal number.
  std::int32_t code = 0;
  /// Readable report (with the remote error text when there is one).
  std::string report;
  /// The failure this one was caused by (a supervisor that gave up).
  std::shared_ptr<SupervisionEvent> caused_by;
  /// Binding-defined bytes (e.g. a pickled Python exception).
  Bytes payload;

  /// Decode (bounds-checked; throws DecodeError).
  static SupervisionEvent parse(const std::uint8_t* buf, std::size_t len) {
    if (!buf || len < 4) throw DecodeError("malformed SupervisionEvent flatbuffer");
    detail::FbReader r{buf, len};
    return parse_table(r, r.u32(0), 0);
  }

 private:
  static std::string str(const detail::FbReader& r, std::size_t fpos) {
    if (!fpos) return {};
    std::size_t sp = fpos + r.u32(fpos);
    std::size_t sl = r.u32(sp);
    r.need(sp + 4, sl);
    return std::string(reinterpret_cast<const char*>(r.b + sp + 4), sl);
  }
  static SupervisionEvent parse_table(const detail::FbReader& r, std::size_t t, int depth) {
    if (depth > 64) throw DecodeError("SupervisionEvent chain too deep");
    SupervisionEvent e;
    // Fields: 0 id, 1 mesh, 2 mesh_key, 3 ranks, 4 proc, 5 actor, 6 owner,
    // 7 cause, 8 code, 9 report, 10 caused_by, 11 payload.
    if (std::size_t p = r.field(t, 0)) e.id = r.u64(p);
    e.mesh = str(r, r.field(t, 1));
    e.mesh_key = str(r, r.field(t, 2));
    auto [rp, rn] = r.vec(r.field(t, 3), 8);
    for (std::size_t i = 0; i < rn; ++i) e.ranks.push_back(r.u64(rp + 8 * i));
    e.proc = str(r, r.field(t, 4));
    e.actor = str(r, r.field(t, 5));
    e.owner = str(r, r.field(t, 6));
    if (std::size_t p = r.field(t, 7)) {
      r.need(p, 1);
      e.cause = static_cast<Cause>(r.b[p]);
    }
    if (std::size_t p = r.field(t, 8)) e.code = static_cast<std::int32_t>(r.u32(p));
    e.report = str(r, r.field(t, 9));
    if (std::size_t p = r.field(t, 10))
      e.caused_by = std::make_shared<SupervisionEvent>(parse_table(r, p + r.u32(p), depth + 1));
    auto [pp, pn] = r.vec(r.field(t, 11), 1);
    if (pn) e.payload.assign(r.b + pp, r.b + pp + pn);
    return e;
  }
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
  }
  Runtime(Runtime&&) = default;
  Runtime& operator=(Runtime&&) = default;

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
  void shutdown() { h_.reset(); }

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
  try {
    ActorServer server;
    server.serve(rt);
  } catch (const std::exception& e) {
    std::cerr << "monarch worker: " << e.what() << "\n";
    code = 1;
  }
  monarch_runtime_free(rt);
  std::exit(code);
}

}  // namespace monarch

#endif  // MONARCH_HPP
