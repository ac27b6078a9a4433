// cpp_test case `actor_workers`: each actor of a C++ worker proc is its own
// sequential worker, so an endpoint may block on another actor of its own
// proc (with one thread for every actor of the proc, this call would wait
// forever).
#include <monarch/monarch.hpp>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "suites.hpp"

using namespace std::chrono_literals;

namespace {

// Calls the Counter at its own point (an actor of its own proc) from an
// endpoint, and waits for the answer there.
class Forwarder : public monarch::Actor {
 public:
  explicit Forwarder(const monarch::Call& args)
      : counters_(monarch::ActorMesh::from_ref(args.part(0))), rank_(args.rank()),
        thread_(std::this_thread::get_id()) {
    endpoint("forward", [this](std::int64_t by) {
      auto mine = counters_.slice("gpus", rank_);
      return mine.call_one("incr", by).get(60s).item<std::int64_t>();
    });
    endpoint("die", []() -> std::int64_t { throw monarch::ActorFailure("giving up on purpose"); });
    // Its constructor and its endpoints run on one thread.
    endpoint("same_thread", [this]() { return std::uint8_t{std::this_thread::get_id() == thread_}; });
  }

 private:
  monarch::ActorMesh counters_;
  std::uint64_t rank_;
  std::thread::id thread_;
};

}  // namespace

MONARCH_ACTOR(Forwarder, "Forwarder");

namespace cpp_test {

void test_actor_workers() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"gpus", 2}});
  auto counters = procs.spawn("counters", "Counter", std::int64_t{100});
  auto fwd = procs.spawn("fwd", "Forwarder", counters.to_ref());
  auto fwd2 = procs.spawn("fwd2", "Forwarder", counters.to_ref());
  for (int round = 1; round <= 3; ++round) {
    auto vm = fwd.call("forward", std::int64_t{1}).get(60s);
    auto expect = std::int64_t{100} + 2 * round - 1;
    CHECK(vm.values<std::int64_t>() == std::vector<std::int64_t>(2, expect));
    vm = fwd2.call("forward", std::int64_t{1}).get(60s);
    CHECK(vm.values<std::int64_t>() == std::vector<std::int64_t>(2, expect + 1));
  }
  // Many calls in flight through two forwarders: each counter sees them all.
  std::vector<monarch::Future> futs;
  for (int i = 0; i < 50; ++i) {
    futs.push_back(fwd.call("forward", std::int64_t{1}));
    futs.push_back(fwd2.call("forward", std::int64_t{1}));
  }
  for (auto& f : futs) CHECK(!f.get(60s).has_errors());
  CHECK(counters.call("get").get(60s).values<std::int64_t>() == std::vector<std::int64_t>(2, 206));
  CHECK(fwd2.call("same_thread").get(60s).values<std::uint8_t>() == std::vector<std::uint8_t>(2, 1));
  // ActorFailure kills the actor (monarch_event_fail): the caller gets the
  // failure report, later calls fail, the top level hears once.
  auto dead = fwd2.slice("gpus", 1);
  auto r = dead.call_one("die").get(60s);
  CHECK(r.has_errors());
  std::string report = r.has_errors() ? r[0].error() : "";
  std::cout << "killed: " << report << "\n";
  CHECK(contains(report, "The actor fwd2{'gpus': 1/2} and all its descendants have failed"));
  CHECK(contains(report, "giving up on purpose"));
  bool later_failed = false;
  try {
    later_failed = dead.call_one("same_thread").get(60s).has_errors();
  } catch (const monarch::Error& e) {
    // Refused at once once the failure reached this process.
    later_failed = contains(e.what(), "and all its descendants have failed");
  }
  CHECK(later_failed);
  std::optional<monarch::SupervisionEvent> top;
  for (int i = 0; i < 600 && !top; ++i) top = rt.next_supervision_event_ms(100);
  CHECK(top.has_value() && top->mesh == "fwd2" && top->ranks == std::vector<std::uint64_t>{1});
  CHECK(!rt.next_supervision_event_ms(200).has_value());
  // The other actors of that proc live on.
  CHECK(fwd.slice("gpus", 1).call_one("same_thread").get(60s).item<std::uint8_t>() == 1);
  procs.stop().get(60s);
}

}  // namespace cpp_test
