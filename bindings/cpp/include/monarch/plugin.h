/*
 * monarch/plugin.h: the entry point of a plugin actor library.
 *
 * A plugin is a shared library that registers actor types with the process
 * that loads it (`monarch worker --plugin PATH`). A controller in any
 * language can then spawn those actors by type name on such workers.
 *
 * The plugin exports one C function, `monarch_plugin_init` (see
 * MONARCH_PLUGIN_INIT_SYMBOL), which the host calls once, right after
 * loading the library, on the host's main thread:
 *
 *     int monarch_plugin_init(const monarch_plugin_registry *reg);
 *
 * It registers each actor type with `reg->register_type(reg->ctx, &type)`
 * and returns 0 on success (non-zero: the host refuses the plugin; call
 * `reg->set_error` first to say why). The plugin does not link libmonarch:
 * this interface is plain C data and function pointers, and the host owns
 * the runtime. Each actor is its own sequential worker: its `create`, every
 * `handle` and its `destroy` run on one thread of its own, one call at a
 * time, in message order; actors of the same proc run concurrently on their
 * own threads (so one may block until another has handled a message, and
 * thread-locals set in `create` are seen by `handle`). State shared between
 * actors (globals, `type_data`) must therefore be thread-safe. The host
 * never calls in from its I/O threads.
 *
 * Lifetimes: everything the host passes in (`monarch_plugin_call` and what
 * it points to, `reg`) is borrowed for the duration of the callback.
 * `register_type` copies the type struct and its name. Reply bytes are
 * copied by `add_part`. The library stays loaded until the host exits.
 *
 * Exceptions or other unwinding must never leave a callback: catch them and
 * report with `call->set_error`. (bindings/cpp/include/monarch/plugin.hpp
 * does this for C++ actor classes.)
 *
 * Bumping MONARCH_PLUGIN_ABI_VERSION means an incompatible change; the host
 * refuses a plugin compiled against a version it does not know.
 */
#ifndef MONARCH_PLUGIN_H
#define MONARCH_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MONARCH_PLUGIN_ABI_VERSION 1
#define MONARCH_PLUGIN_INIT_SYMBOL "monarch_plugin_init"

/* A borrowed byte range. */
typedef struct monarch_plugin_bytes {
  const uint8_t *ptr;
  size_t len;
} monarch_plugin_bytes;

/*
 * One unit of work handed to an actor: its constructor arguments (create)
 * or a message (handle). The actor answers by calling `add_part` zero or
 * more times (the reply's payload parts, copied), or `set_error` once (the
 * call fails with that UTF-8 message; parts added before are dropped).
 */
typedef struct monarch_plugin_call {
  /* Endpoint name for a message; "" for a constructor. */
  const char *method;
  /* Key of the actor inside this proc (unique per actor instance). */
  const char *actor;
  /* Payload parts. */
  const monarch_plugin_bytes *parts;
  size_t nparts;
  /* Rank of the actor in the mesh the message was sent to (for a
   * constructor: in the mesh it is spawned into) and that mesh's Shape
   * (a `monarch.schema.Shape` flatbuffer, core/schema/monarch.fbs; may be
   * NULL/0). */
  uint64_t rank;
  const uint8_t *shape;
  size_t shape_len;
  /* Answering: pass `reply_ctx` as the first argument. */
  void *reply_ctx;
  void (*add_part)(void *reply_ctx, const uint8_t *ptr, size_t len);
  void (*set_error)(void *reply_ctx, const char *message);
} monarch_plugin_call;

/* An actor type. */
typedef struct monarch_plugin_actor_type {
  /* Type name controllers spawn it by (NUL-terminated UTF-8, copied). */
  const char *name;
  /* Passed back to `create` unchanged. */
  void *type_data;
  /* Construct an instance from `call->parts`; return it, or NULL after
   * `call->set_error` if construction failed. Parts added are returned to
   * the spawner as the constructor's result. */
  void *(*create)(void *type_data, const monarch_plugin_call *call);
  /* Run endpoint `call->method` of `instance`; answer through `call`.
   * Answering nothing is an empty (zero-part) reply. */
  void (*handle)(void *instance, const monarch_plugin_call *call);
  /* Destroy an instance (when the actor is stopped, or the proc stops). */
  void (*destroy)(void *instance);
} monarch_plugin_actor_type;

/* What the host passes to `monarch_plugin_init`. */
typedef struct monarch_plugin_registry {
  /* MONARCH_PLUGIN_ABI_VERSION of the host. */
  uint32_t abi_version;
  void *ctx;
  /* Register a type; returns 0, or non-zero if the name is taken or the
   * struct is unusable (the reason goes to the host's log). */
  int (*register_type)(void *ctx, const monarch_plugin_actor_type *type);
  /* Explain a non-zero return of monarch_plugin_init. */
  void (*set_error)(void *ctx, const char *message);
} monarch_plugin_registry;

typedef int (*monarch_plugin_init_fn)(const monarch_plugin_registry *reg);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MONARCH_PLUGIN_H */
