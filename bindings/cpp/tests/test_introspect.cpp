// cpp_test case of introspection: Runtime::introspect over real procs
// (states, pids, per-actor counters, the last error) and Runtime::stop_mesh.
#include <monarch/monarch.hpp>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
#include <unistd.h>

#include "check.hpp"
#include "suites.hpp"

using namespace std::chrono_literals;

namespace cpp_test {

void test_introspect() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"procs", 2}});
  auto echo = procs.spawn("intro", "Echo");
  for (int i = 0; i < 3; ++i) echo.call("rank").get(30s);
  auto failed = echo.slice("procs", 1).call("fail", monarch::CallMode::One).get(30s);
  CHECK(failed.has_errors());

  monarch::JobSnapshot snap = rt.introspect(30000);
  CHECK(!snap.procs.empty());
  CHECK(snap.procs[0].addr == snap.controller);
  CHECK(snap.procs[0].pid == static_cast<std::uint32_t>(::getpid()));
  int seen = 0;
  std::string proc_mesh;
  for (const auto& p : snap.procs) {
    for (const auto& a : p.actors) {
      if (a.mesh != "intro") continue;
      ++seen;
      proc_mesh = p.mesh;
      CHECK(p.state == monarch::EntityState::Ready && p.answered && p.pid > 0);
      CHECK(a.state == monarch::EntityState::Ready);
      CHECK(a.handler_hist.size() == 24);
      CHECK(std::accumulate(a.handler_hist.begin(), a.handler_hist.end(), std::uint64_t{0}) ==
            a.messages);
      CHECK(a.queue_depth == 0);
      if (a.rank == 0) {
        CHECK(a.messages == 3 && a.errors == 0 && a.last_error.empty());
      } else {
        CHECK(a.messages == 4 && a.errors == 1);
        CHECK(a.last_error.find("fail on rank") != std::string::npos);
      }
    }
  }
  CHECK(seen == 2);
  CHECK(!proc_mesh.empty());

  rt.stop_mesh(proc_mesh);
  snap = rt.introspect(30000);
  for (const auto& m : snap.meshes)
    if (m.name == proc_mesh) CHECK(m.state == monarch::EntityState::Stopped);
  bool threw = false;
  try {
    rt.stop_mesh("no-such-mesh");
  } catch (const monarch::Error& e) {
    threw = e.status() == MONARCH_ERR_INVALID_ARGUMENT;
  }
  CHECK(threw);
  threw = false;
  try {
    rt.introspect(-1);
  } catch (const monarch::Error& e) {
    threw = e.status() == MONARCH_ERR_INVALID_ARGUMENT;
  }
  CHECK(threw);
  // A malformed buffer is refused, never read out of bounds.
  threw = false;
  const std::uint8_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  try {
    monarch::JobSnapshot::parse(junk, sizeof junk);
  } catch (const monarch::DecodeError&) {
    threw = true;
  }
  CHECK(threw);
}

}  // namespace cpp_test
