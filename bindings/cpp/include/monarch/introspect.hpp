// monarch/introspect.hpp: a snapshot of the controller's job
// (monarch::JobSnapshot, decoded from the `monarch.schema.Introspection`
// flatbuffer that monarch_runtime_introspect returns; docs/operating.md).
// Does not use libmonarch: Runtime::introspect (monarch/runtime.hpp) calls it.
#ifndef MONARCH_INTROSPECT_HPP
#define MONARCH_INTROSPECT_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <monarch/codec.hpp>
#include <monarch/detail/schema.hpp>

namespace monarch {

/// monarch.schema.EntityState values.
enum class EntityState : std::uint8_t { Starting = 0, Ready = 1, Failed = 2, Stopped = 3 };

/// One actor hosted by a proc and its counters.
struct ActorStats {
  std::string key, mesh;
  std::uint64_t rank = 0;
  EntityState state = EntityState::Starting;
  std::uint64_t messages = 0, errors = 0, queue_depth = 0, handler_ns = 0;
  /// [0]: handlers under 1 us; [i]: in [2^(i-1), 2^i) us; the last
  /// bucket is open-ended.
  std::vector<std::uint64_t> handler_hist;
  std::string last_error;
};

/// One proc of the job (the controller first in JobSnapshot::procs).
struct ProcInfo {
  std::string addr, host;
  std::uint32_t pid = 0;
  std::string mesh;
  std::uint64_t rank = 0;
  EntityState state = EntityState::Starting;
  std::string error;
  /// Whether the proc answered for its actors.
  bool answered = false;
  std::vector<ActorStats> actors;
};

/// One mesh the controller spawned.
struct MeshInfo {
  std::string name;
  /// Actor key of an actor mesh; "" for a proc mesh.
  std::string key;
  EntityState state = EntityState::Starting;
  std::vector<std::string> procs;
};

/// A snapshot of the controller's job.
struct JobSnapshot {
  std::string controller;
  std::vector<ProcInfo> procs;
  std::vector<MeshInfo> meshes;

  /// Decode (verified; throws DecodeError).
  static JobSnapshot parse(const std::uint8_t* buf, std::size_t len) {
    if (!buf || len < 4) throw DecodeError("malformed Introspection flatbuffer");
    const auto& t = detail::verified_root<schema::Introspection>(buf, len, "Introspection");
    JobSnapshot j;
    j.controller = detail::str(t.controller());
    if (const auto* procs = t.procs()) {
      for (const auto* p : *procs) {
        ProcInfo pi;
        pi.addr = detail::str(p->addr());
        pi.host = detail::str(p->host());
        pi.pid = p->pid();
        pi.mesh = detail::str(p->mesh());
        pi.rank = p->rank();
        pi.state = static_cast<EntityState>(p->state());
        pi.error = detail::str(p->error());
        pi.answered = p->answered();
        if (const auto* actors = p->actors()) {
          for (const auto* a : *actors) {
            ActorStats s;
            s.key = detail::str(a->key());
            s.mesh = detail::str(a->mesh());
            s.rank = a->rank();
            s.state = static_cast<EntityState>(a->state());
            s.messages = a->messages();
            s.errors = a->errors();
            s.queue_depth = a->queue_depth();
            s.handler_ns = a->handler_ns();
            if (const auto* h = a->handler_hist()) s.handler_hist.assign(h->begin(), h->end());
            s.last_error = detail::str(a->last_error());
            pi.actors.push_back(std::move(s));
          }
        }
        j.procs.push_back(std::move(pi));
      }
    }
    if (const auto* meshes = t.meshes()) {
      for (const auto* m : *meshes) {
        MeshInfo mi;
        mi.name = detail::str(m->name());
        mi.key = detail::str(m->key());
        mi.state = static_cast<EntityState>(m->state());
        if (const auto* ps = m->procs())
          for (const auto* s : *ps) mi.procs.push_back(detail::str(s));
        j.meshes.push_back(std::move(mi));
      }
    }
    return j;
  }
};

}  // namespace monarch

#endif  // MONARCH_INTROSPECT_HPP
