// monarch/actor.hpp: C++ actors, independent of the runtime.
//
// Defines what an actor is (a class deriving from monarch::Actor whose
// endpoints are registered by name), how values become payload parts (the
// Codec), the Shape of a mesh, and the registry of actor types of this
// binary. It does not call libmonarch: the worker loop of monarch.hpp and
// the plugin entry point of plugin.hpp both drive actors through it.
//
//   class Counter : public monarch::Actor {
//    public:
//     explicit Counter(const monarch::Call& args) {
//       if (args.size() > 0) value_ = args.get<int64_t>(0);
//       endpoint("incr", &Counter::incr);                     // typed member
//       endpoint("get", [this]() { return value_; });         // typed lambda
//       endpoint("raw", [](const monarch::Call& c) {          // raw parts
//         return monarch::Parts{c.part(0).to_bytes()};
//       });
//     }
//     int64_t incr(int64_t by) { return value_ += by; }
//    private:
//     int64_t value_ = 0;
//   };
//   MONARCH_ACTOR(Counter, "Counter");
//
// Encoding (the "user bytes" of DESIGN.md): each argument of a call is one
// payload part, each return value one part. Trivially copyable types are
// their object bytes (host byte order), std::string its UTF-8 bytes,
// std::vector<T> of a trivially copyable T its elements' bytes, Bytes and
// BytesView are raw. A raw endpoint takes `const Call&` and returns Parts
// (or one of the typed values, or void).
#ifndef MONARCH_ACTOR_HPP
#define MONARCH_ACTOR_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace monarch {

using Bytes = std::vector<std::uint8_t>;
/// The payload parts of a reply (or of a call built by hand).
using Parts = std::vector<Bytes>;

/// A borrowed byte range (valid as long as what it was taken from).
struct BytesView {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;

  BytesView() = default;
  BytesView(const std::uint8_t* d, std::size_t n) : data(d), size(n) {}
  BytesView(const Bytes& b) : data(b.data()), size(b.size()) {}  // NOLINT
  BytesView(std::string_view s)                                   // NOLINT
      : data(reinterpret_cast<const std::uint8_t*>(s.data())), size(s.size()) {}

  Bytes to_bytes() const { return Bytes(data, data + size); }
  std::string_view str() const {
    return std::string_view(reinterpret_cast<const char*>(data), size);
  }
};

/// Raised for a payload that cannot be decoded or a malformed structure.
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ------------------------------------------------------------------ codec

template <class T, class = void>
struct Codec;  // no encoding for this type: specialize Codec<T>

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};

template <class T>
struct Codec<T, std::enable_if_t<std::is_trivially_copyable_v<T> &&
                                 !std::is_pointer_v<T>>> {
  static Bytes encode(const T& v) {
    Bytes b(sizeof(T));
    std::memcpy(b.data(), &v, sizeof(T));
    return b;
  }
  static T decode(BytesView b) {
    if (b.size != sizeof(T))
      throw DecodeError("expected a part of " + std::to_string(sizeof(T)) +
                        " bytes, got " + std::to_string(b.size));
    T v;
    std::memcpy(&v, b.data, sizeof(T));
    return v;
  }
};

template <>
struct Codec<std::string> {
  static Bytes encode(const std::string& s) { return Bytes(s.begin(), s.end()); }
  static std::string decode(BytesView b) { return std::string(b.str()); }
};

template <class T>
struct Codec<std::vector<T>, std::enable_if_t<std::is_trivially_copyable_v<T>>> {
  static Bytes encode(const std::vector<T>& v) {
    Bytes b(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
  }
  static std::vector<T> decode(BytesView b) {
    if (b.size % sizeof(T) != 0)
      throw DecodeError("part of " + std::to_string(b.size) +
                        " bytes is not a whole number of " +
                        std::to_string(sizeof(T)) + "-byte elements");
    std::vector<T> v(b.size / sizeof(T));
    if (b.size) std::memcpy(v.data(), b.data, b.size);
    return v;
  }
};

template <>
struct Codec<BytesView> {
  static Bytes encode(const BytesView& v) { return v.to_bytes(); }
  static BytesView decode(BytesView b) { return b; }
};

template <class T>
Bytes encode(const T& v) {
  return Codec<std::decay_t<T>>::encode(v);
}
inline Bytes encode(const char* s) { return Codec<std::string>::encode(s); }
template <class T>
T decode(BytesView b) {
  return Codec<T>::decode(b);
}

// ------------------------------------------------------------------ shape

/// A mesh's named dimensions (decoded from the `monarch.schema.Shape`
/// flatbuffer the ABI hands out). Ranks are row-major over `sizes`.
class Shape {
 public:
  Shape() = default;
  Shape(std::vector<std::string> labels, std::vector<std::uint64_t> sizes)
      : labels_(std::move(labels)), sizes_(std::move(sizes)) {}

  /// Decode a Shape flatbuffer (bounds-checked; throws DecodeError).
  static Shape parse(const std::uint8_t* buf, std::size_t len);

  const std::vector<std::string>& labels() const { return labels_; }
  const std::vector<std::uint64_t>& sizes() const { return sizes_; }
  const std::vector<std::uint64_t>& strides() const { return strides_; }
  std::uint64_t offset() const { return offset_; }
  std::size_t ndim() const { return labels_.size(); }
  std::size_t numel() const {
    std::size_t n = 1;
    for (auto s : sizes_) n *= static_cast<std::size_t>(s);
    return n;
  }
  /// Size of dimension `label` (throws std::out_of_range if absent).
  std::size_t size(std::string_view label) const {
    return static_cast<std::size_t>(sizes_[index_of(label)]);
  }
  std::size_t index_of(std::string_view label) const {
    for (std::size_t i = 0; i < labels_.size(); ++i)
      if (labels_[i] == label) return i;
    throw std::out_of_range("no dimension '" + std::string(label) + "'");
  }
  /// Coordinates of row-major `rank`.
  std::vector<std::size_t> coords(std::size_t rank) const {
    std::vector<std::size_t> c(sizes_.size());
    for (std::size_t i = sizes_.size(); i-- > 0;) {
      std::size_t s = static_cast<std::size_t>(sizes_[i]);
      c[i] = s ? rank % s : 0;
      rank = s ? rank / s : 0;
    }
    return c;
  }
  std::string to_string() const {
    std::string s = "{";
    for (std::size_t i = 0; i < labels_.size(); ++i) {
      if (i) s += ", ";
      s += "'" + labels_[i] + "': " + std::to_string(sizes_[i]);
    }
    return s + "}";
  }

 private:
  std::vector<std::string> labels_;
  std::vector<std::uint64_t> sizes_;
  std::vector<std::uint64_t> strides_;
  std::uint64_t offset_ = 0;
};

namespace detail {
// A minimal, bounds-checked reader for the one flatbuffer table we need.
struct FbReader {
  const std::uint8_t* b;
  std::size_t n;
  void need(std::size_t pos, std::size_t len) const {
    if (pos > n || len > n - pos) throw DecodeError("malformed Shape flatbuffer");
  }
  std::uint32_t u32(std::size_t p) const {
    need(p, 4);
    std::uint32_t v;
    std::memcpy(&v, b + p, 4);
    return v;
  }
  std::uint16_t u16(std::size_t p) const {
    need(p, 2);
    std::uint16_t v;
    std::memcpy(&v, b + p, 2);
    return v;
  }
  std::uint64_t u64(std::size_t p) const {
    need(p, 8);
    std::uint64_t v;
    std::memcpy(&v, b + p, 8);
    return v;
  }
  // Position of field `i` of the table at `t`, or 0 if absent.
  std::size_t field(std::size_t t, unsigned i) const {
    std::int32_t soff = static_cast<std::int32_t>(u32(t));
    std::int64_t vt = static_cast<std::int64_t>(t) - soff;
    if (vt < 0) throw DecodeError("malformed Shape flatbuffer");
    std::size_t v = static_cast<std::size_t>(vt);
    std::uint16_t vsize = u16(v);
    std::size_t at = 4 + 2 * static_cast<std::size_t>(i);
    if (at + 2 > vsize) return 0;
    std::uint16_t fo = u16(v + at);
    return fo ? t + fo : 0;
  }
  // A vector field: returns (position of first element, length).
  std::pair<std::size_t, std::size_t> vec(std::size_t fpos, std::size_t elem) const {
    if (!fpos) return {0, 0};
    std::size_t v = fpos + u32(fpos);
    std::size_t len = u32(v);
    need(v + 4, len * elem);
    return {v + 4, len};
  }
};
}  // namespace detail

inline Shape Shape::parse(const std::uint8_t* buf, std::size_t len) {
  Shape s;
  if (!buf || len == 0) return s;
  detail::FbReader r{buf, len};
  std::size_t t = r.u32(0);
  // Fields: 0 labels, 1 offset, 2 sizes, 3 strides.
  auto [lp, ln] = r.vec(r.field(t, 0), 4);
  for (std::size_t i = 0; i < ln; ++i) {
    std::size_t e = lp + 4 * i;
    std::size_t sp = e + r.u32(e);
    std::size_t sl = r.u32(sp);
    r.need(sp + 4, sl);
    s.labels_.emplace_back(reinterpret_cast<const char*>(buf + sp + 4), sl);
  }
  if (std::size_t op = r.field(t, 1)) s.offset_ = r.u64(op);
  auto [zp, zn] = r.vec(r.field(t, 2), 8);
  for (std::size_t i = 0; i < zn; ++i) s.sizes_.push_back(r.u64(zp + 8 * i));
  auto [tp, tn] = r.vec(r.field(t, 3), 8);
  for (std::size_t i = 0; i < tn; ++i) s.strides_.push_back(r.u64(tp + 8 * i));
  if (s.sizes_.size() != s.labels_.size())
    throw DecodeError("Shape flatbuffer: labels and sizes differ in length");
  return s;
}

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

// ------------------------------------------------------------------ calls

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
  /// monarch::Port in monarch.hpp). Only endpoints run by the worker loop
  /// of monarch.hpp can defer; elsewhere (constructors, plugin actors)
  /// this throws std::logic_error. Call it while the endpoint runs, not on
  /// a copy of the Call kept for later (it refers to the event in hand).
  Bytes take_reply_port() const {
    if (!take_port_)
      throw std::logic_error(
          "this reply cannot be deferred (only endpoints hosted by monarch.hpp's worker loop "
          "can; constructors and plugin actors answer when they return)");
    return take_port_();
  }
  /// Set by the host that can defer replies (monarch.hpp's ActorServer).
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

namespace detail {
template <class F>
struct fn_traits : fn_traits<decltype(&std::decay_t<F>::operator())> {};
template <class R, class... A>
struct fn_traits<R (*)(A...)> {
  using ret = R;
  using args = std::tuple<std::decay_t<A>...>;
};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...)> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) noexcept> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const noexcept> : fn_traits<R (*)(A...)> {};

template <class R>
Parts to_parts(R&& r) {
  using D = std::decay_t<R>;
  if constexpr (std::is_same_v<D, Parts>) {
    return std::forward<R>(r);
  } else {
    Parts p;
    p.push_back(encode(r));
    return p;
  }
}

template <class Tuple, std::size_t... I>
Tuple decode_args(const Call& c, std::index_sequence<I...>) {
  return Tuple{c.get<std::tuple_element_t<I, Tuple>>(I)...};
}

using Handler = std::function<Parts(const Call&)>;

// Wrap any callable into a Handler: raw (takes const Call&) or typed.
template <class F>
Handler make_handler(F f) {
  if constexpr (std::is_invocable_v<F&, const Call&>) {
    return [f = std::move(f)](const Call& c) mutable -> Parts {
      using R = std::invoke_result_t<F&, const Call&>;
      if constexpr (std::is_void_v<R>) {
        f(c);
        return {};
      } else {
        return to_parts(f(c));
      }
    };
  } else {
    using Tr = fn_traits<F>;
    using Args = typename Tr::args;
    using R = typename Tr::ret;
    return [f = std::move(f)](const Call& c) mutable -> Parts {
      constexpr std::size_t N = std::tuple_size_v<Args>;
      if (c.size() != N)
        throw DecodeError("endpoint '" + c.method() + "' takes " + std::to_string(N) +
                          " parts, got " + std::to_string(c.size()));
      Args args = decode_args<Args>(c, std::make_index_sequence<N>{});
      if constexpr (std::is_void_v<R>) {
        std::apply(f, std::move(args));
        return {};
      } else {
        return to_parts(std::apply(f, std::move(args)));
      }
    };
  }
}
}  // namespace detail

// ------------------------------------------------------------------ actors

/// Base class of C++ actors. Register endpoints in the constructor.
class Actor {
 public:
  virtual ~Actor() = default;
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  /// Run endpoint `call.method()`. Throws if there is none or it throws.
  /// Override for fully custom dispatch.
  virtual Parts dispatch(const Call& call) {
    auto it = endpoints_.find(call.method());
    if (it == endpoints_.end())
      throw std::runtime_error("actor has no endpoint '" + call.method() + "'");
    return it->second(call);
  }

  /// Whether an endpoint of that name is registered.
  bool has_endpoint(const std::string& name) const { return endpoints_.count(name) != 0; }

  /// A mesh this actor owns (it spawned it while handling a message)
  /// failed. Return true if handled; false (the default) or an exception
  /// escalates: this actor fails, and its own owner gets an event caused
  /// by this one (docs/supervision.md). Called by the worker loop of
  /// monarch.hpp (plugin hosts escalate without calling it).
  virtual bool supervise(const SupervisionEvent& event) {
    (void)event;
    return false;
  }

 protected:
  Actor() = default;

  /// Register a lambda / function object / function pointer. It takes
  /// either `const Call&` (raw) or decodable arguments, one per part.
  template <class F, std::enable_if_t<!std::is_member_function_pointer_v<F>, int> = 0>
  void endpoint(std::string name, F f) {
    endpoints_[std::move(name)] = detail::make_handler(std::move(f));
  }

  /// Register a member function of the derived class, bound to this actor.
  template <class M, std::enable_if_t<std::is_member_function_pointer_v<M>, int> = 0>
  void endpoint(std::string name, M m) {
    register_member(std::move(name), m);
  }

 private:
  template <class C, class R, class... A>
  void register_member(std::string name, R (C::*m)(A...)) {
    C* self = static_cast<C*>(this);
    endpoint(std::move(name), [self, m](A... a) -> R { return (self->*m)(a...); });
  }
  template <class C, class R, class... A>
  void register_member(std::string name, R (C::*m)(A...) const) {
    const C* self = static_cast<const C*>(this);
    endpoint(std::move(name), [self, m](A... a) -> R { return (self->*m)(a...); });
  }

  std::unordered_map<std::string, detail::Handler> endpoints_;
};

/// Makes an actor of a registered type from its constructor call.
using ActorFactory = std::function<std::unique_ptr<Actor>(const Call&)>;

/// The actor types of this binary (or plugin), by type name.
inline std::map<std::string, ActorFactory>& actor_registry() {
  static std::map<std::string, ActorFactory> r;
  return r;
}

/// Register `T` (an Actor constructible from `const Call&` or by default)
/// under `name`.
template <class T>
bool register_actor(const std::string& name) {
  static_assert(std::is_base_of_v<Actor, T>, "actor types derive from monarch::Actor");
  actor_registry()[name] = [](const Call& c) -> std::unique_ptr<Actor> {
    if constexpr (std::is_constructible_v<T, const Call&>) {
      return std::make_unique<T>(c);
    } else {
      static_assert(std::is_default_constructible_v<T>,
                    "actor types are constructible from const monarch::Call& or by default");
      if (c.size() != 0)
        throw DecodeError("actor constructor takes no arguments, got " +
                          std::to_string(c.size()) + " parts");
      return std::make_unique<T>();
    }
  };
  return true;
}

#define MONARCH_DETAIL_CAT2(a, b) a##b
#define MONARCH_DETAIL_CAT(a, b) MONARCH_DETAIL_CAT2(a, b)
/// Register actor class `Type` under the type name `name` (a string), at
/// static-initialization time. Use at namespace scope in a .cpp file.
#define MONARCH_ACTOR(Type, name)                                           \
  static const bool MONARCH_DETAIL_CAT(monarch_actor_registered_, __COUNTER__) = \
      ::monarch::register_actor<Type>(name)

/// The actors living in one process, keyed by the runtime's actor key.
/// Shared by the worker loop (monarch.hpp) and plugin hosts.
class ActorHost {
 public:
  /// Construct an actor; throws what the constructor throws.
  void spawn(const std::string& key, const std::string& type, const Call& args) {
    auto& reg = actor_registry();
    auto it = reg.find(type);
    if (it == reg.end()) {
      std::string known;
      for (auto& kv : reg) known += (known.empty() ? "" : ", ") + kv.first;
      throw std::runtime_error("unknown actor type '" + type + "' (this binary has: " +
                               (known.empty() ? std::string("none") : known) + ")");
    }
    actors_[key] = it->second(args);
  }
  Parts message(const std::string& key, const Call& call) {
    auto it = actors_.find(key);
    if (it == actors_.end()) throw std::runtime_error("no actor '" + key + "' in this proc");
    return it->second->dispatch(call);
  }
  /// Offer a failure to the owning actor; false if it did not handle it.
  bool supervise(const std::string& key, const SupervisionEvent& event) {
    auto it = actors_.find(key);
    if (it == actors_.end()) throw std::runtime_error("no actor '" + key + "' in this proc");
    return it->second->supervise(event);
  }
  void stop(const std::string& key) { actors_.erase(key); }
  std::size_t size() const { return actors_.size(); }

 private:
  std::unordered_map<std::string, std::unique_ptr<Actor>> actors_;
};

}  // namespace monarch

#endif  // MONARCH_ACTOR_HPP
