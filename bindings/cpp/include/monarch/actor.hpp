// monarch/actor.hpp: C++ actors, independent of the runtime.
//
// Defines what an actor is (a class deriving from monarch::Actor whose
// endpoints are registered by name) and the registry of actor types of this
// binary, with what they use: the Codec (monarch/codec.hpp), Call
// (monarch/call.hpp), Shape (monarch/shape.hpp) and SupervisionEvent
// (monarch/supervision.hpp). It does not call libmonarch: the worker loop of
// monarch/server.hpp and the plugin entry point of monarch/plugin.hpp both
// drive actors through it.
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
// Each argument of a call is one payload part, each return value one part
// (encodings: monarch/codec.hpp). A raw endpoint takes `const Call&` and
// returns Parts (or one of the typed values, or void).
#ifndef MONARCH_ACTOR_HPP
#define MONARCH_ACTOR_HPP

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include <monarch/call.hpp>
#include <monarch/codec.hpp>
#include <monarch/detail/endpoint.hpp>
#include <monarch/shape.hpp>
#include <monarch/supervision.hpp>

namespace monarch {

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
  /// monarch/server.hpp (plugin hosts escalate without calling it).
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
/// Shared by the worker loop (monarch/server.hpp) and plugin hosts.
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
    std::unique_ptr<Actor> a = it->second(args);
    std::lock_guard<std::mutex> lk(*mu_);
    actors_[key] = std::move(a);
  }
  Parts message(const std::string& key, const Call& call) { return find(key)->dispatch(call); }
  /// Offer a failure to the owning actor; false if it did not handle it.
  bool supervise(const std::string& key, const SupervisionEvent& event) {
    return find(key)->supervise(event);
  }
  void stop(const std::string& key) {
    std::unique_ptr<Actor> gone;
    std::lock_guard<std::mutex> lk(*mu_);
    auto it = actors_.find(key);
    if (it == actors_.end()) return;
    gone = std::move(it->second);
    actors_.erase(it);
  }
  std::size_t size() const {
    std::lock_guard<std::mutex> lk(*mu_);
    return actors_.size();
  }

 private:
  // Each actor runs on one thread at a time (ActorServer): the map is
  // shared by the threads, an actor only by its own events.
  Actor* find(const std::string& key) {
    std::lock_guard<std::mutex> lk(*mu_);
    auto it = actors_.find(key);
    if (it == actors_.end()) throw std::runtime_error("no actor '" + key + "' in this proc");
    return it->second.get();
  }
  std::unique_ptr<std::mutex> mu_ = std::make_unique<std::mutex>();
  std::unordered_map<std::string, std::unique_ptr<Actor>> actors_;
};

}  // namespace monarch

#endif  // MONARCH_ACTOR_HPP
