// monarch/plugin.hpp: turn the C++ actor classes of a shared library into a
// plugin that `monarch worker --plugin PATH` loads (see plugin.h).
//
//   // myactors.cpp, built as libmyactors.so (link Monarch::plugin, NOT
//   // libmonarch: the worker that loads it owns the runtime)
//   #include <monarch/plugin.hpp>
//   class Trainer : public monarch::Actor { ... };
//   MONARCH_ACTOR(Trainer, "Trainer");
//   MONARCH_PLUGIN();   // exports monarch_plugin_init for every MONARCH_ACTOR
//
// Exceptions thrown by constructors and endpoints are caught here and become
// the call's error message; they never cross into the host.
#ifndef MONARCH_PLUGIN_HPP
#define MONARCH_PLUGIN_HPP

#include <exception>
#include <string>
#include <vector>

#include <monarch/actor.hpp>
#include <monarch/plugin.h>

namespace monarch {
namespace plugin_detail {

inline Call to_call(const monarch_plugin_call* c) {
  std::vector<BytesView> parts;
  parts.reserve(c->nparts);
  for (std::size_t i = 0; i < c->nparts; ++i) parts.emplace_back(c->parts[i].ptr, c->parts[i].len);
  return Call(std::move(parts), c->rank, c->shape, c->shape_len, c->method ? c->method : "",
              c->actor ? c->actor : "");
}

inline void answer(const monarch_plugin_call* c, const Parts& out) {
  for (const auto& p : out) c->add_part(c->reply_ctx, p.data(), p.size());
}

inline void* create(void* type_data, const monarch_plugin_call* c) noexcept {
  try {
    auto* factory = static_cast<ActorFactory*>(type_data);
    std::unique_ptr<Actor> a = (*factory)(to_call(c));
    return a.release();
  } catch (const std::exception& e) {
    c->set_error(c->reply_ctx, e.what());
  } catch (...) {
    c->set_error(c->reply_ctx, "unknown C++ exception in actor constructor");
  }
  return nullptr;
}

inline void handle(void* instance, const monarch_plugin_call* c) noexcept {
  try {
    answer(c, static_cast<Actor*>(instance)->dispatch(to_call(c)));
  } catch (const std::exception& e) {
    c->set_error(c->reply_ctx, e.what());
  } catch (...) {
    c->set_error(c->reply_ctx, "unknown C++ exception in endpoint");
  }
}

inline void destroy(void* instance) noexcept {
  try {
    delete static_cast<Actor*>(instance);
  } catch (...) {
  }
}

/// Register every type of actor_registry() with the host.
inline int init(const monarch_plugin_registry* reg) noexcept {
  try {
    if (reg->abi_version != MONARCH_PLUGIN_ABI_VERSION) {
      std::string m = "plugin built for plugin ABI " +
                      std::to_string(MONARCH_PLUGIN_ABI_VERSION) + ", host has " +
                      std::to_string(reg->abi_version);
      reg->set_error(reg->ctx, m.c_str());
      return 1;
    }
    for (auto& kv : actor_registry()) {
      monarch_plugin_actor_type t{};
      t.name = kv.first.c_str();
      t.type_data = &kv.second;  // the registry lives as long as the library
      t.create = &create;
      t.handle = &handle;
      t.destroy = &destroy;
      if (reg->register_type(reg->ctx, &t) != 0) {
        std::string m = "cannot register actor type '" + kv.first + "'";
        reg->set_error(reg->ctx, m.c_str());
        return 1;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    reg->set_error(reg->ctx, e.what());
  } catch (...) {
    reg->set_error(reg->ctx, "unknown C++ exception in monarch_plugin_init");
  }
  return 1;
}

}  // namespace plugin_detail
}  // namespace monarch

/// Export `monarch_plugin_init`, registering every MONARCH_ACTOR of this
/// library. Use exactly once per plugin, at namespace scope.
#define MONARCH_PLUGIN()                                                              \
  extern "C" __attribute__((visibility("default"))) int monarch_plugin_init(          \
      const monarch_plugin_registry* reg) {                                           \
    return ::monarch::plugin_detail::init(reg);                                       \
  }                                                                                   \
  static_assert(true, "")

#endif  // MONARCH_PLUGIN_HPP
