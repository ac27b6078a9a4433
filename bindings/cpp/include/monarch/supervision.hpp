// monarch/supervision.hpp: a failure reported to the owner of a mesh
// (monarch::SupervisionEvent; docs/supervision.md). Does not use libmonarch.
#ifndef MONARCH_SUPERVISION_HPP
#define MONARCH_SUPERVISION_HPP

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <monarch/codec.hpp>
#include <monarch/detail/schema.hpp>

namespace monarch {

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

  /// Decode (verified; throws DecodeError).
  static SupervisionEvent parse(const std::uint8_t* buf, std::size_t len) {
    if (!buf || len < 4) throw DecodeError("malformed SupervisionEvent flatbuffer");
    return from_table(
        detail::verified_root<schema::SupervisionEvent>(buf, len, "SupervisionEvent"), 0);
  }

 private:
  static SupervisionEvent from_table(const schema::SupervisionEvent& t, int depth) {
    if (depth > 64) throw DecodeError("SupervisionEvent chain too deep");
    SupervisionEvent e;
    e.id = t.id();
    e.mesh = detail::str(t.mesh());
    e.mesh_key = detail::str(t.mesh_key());
    if (const auto* ranks = t.ranks()) e.ranks.assign(ranks->begin(), ranks->end());
    e.proc = detail::str(t.proc());
    e.actor = detail::str(t.actor());
    e.owner = detail::str(t.owner());
    e.cause = static_cast<Cause>(t.cause());
    e.code = t.code();
    e.report = detail::str(t.report());
    if (const schema::SupervisionEvent* cause = t.caused_by())
      e.caused_by = std::make_shared<SupervisionEvent>(from_table(*cause, depth + 1));
    if (const auto* payload = t.payload()) e.payload.assign(payload->begin(), payload->end());
    return e;
  }
};

}  // namespace monarch

#endif  // MONARCH_SUPERVISION_HPP
