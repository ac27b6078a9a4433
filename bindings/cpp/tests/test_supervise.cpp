// cpp_test case `actor_supervise`: C++ actors supervising the meshes they
// spawn (Actor::supervise), handling or escalating a child's crash.
#include <monarch/monarch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>

#include "check.hpp"
#include "suites.hpp"

using namespace std::chrono_literals;

namespace {

// Hosted on the controller's own proc: spawns a child mesh (so it owns it)
// and hears of its failures through Actor::supervise.
class Watcher : public monarch::Actor {
 public:
  explicit Watcher(const monarch::Call& args) : handles_(args.get<std::uint8_t>(0) != 0) {
    endpoint("spawn_children", [this]() {
      procs_ = monarch::spawn_procs({{"kids", 2}});
      kids_ = procs_.spawn("kid", "Echo");
      return kids_.call("rank").get(std::chrono::seconds(60)).values<std::uint64_t>().size();
    });
    endpoint("crash_child", [this]() { kids_.slice("kids", 1).broadcast("exit"); });
    endpoint("seen", [this]() { return seen_; });
  }
  bool supervise(const monarch::SupervisionEvent& e) override {
    seen_ += "code=" + std::to_string(e.code) + " ranks=";
    for (auto r : e.ranks) seen_ += std::to_string(r) + ",";
    seen_ += ";";
    return handles_;
  }

 private:
  bool handles_;
  std::string seen_;
  monarch::ProcMesh procs_;
  monarch::ActorMesh kids_;
};

}  // namespace

MONARCH_ACTOR(Watcher, "Watcher");

namespace cpp_test {

using monarch::ActorError;
using monarch::Error;

void test_actor_supervise() {
  // C++ actors supervise the meshes they spawn: Actor::supervise handles a
  // child's crash, or (returning false) escalates to the top level.
  monarch::Runtime rt;
  auto me = rt.this_proc();
  auto serve_until = [&](monarch::Future& f) {
    for (int i = 0; i < 6000 && !f.ready(); ++i) rt.serve_events(10);
    return f.get(1s);
  };
  auto [keeper, ready1] = me.spawn_async("keeper", "Watcher", {monarch::encode(std::uint8_t{1})});
  auto [quitter, ready2] = me.spawn_async("quitter", "Watcher", {monarch::encode(std::uint8_t{0})});
  serve_until(ready1).check();
  serve_until(ready2).check();
  auto f = keeper.call_one("spawn_children");
  CHECK(serve_until(f).item<std::size_t>() == 2);
  f = keeper.call_one("crash_child");
  serve_until(f).check();
  std::string seen;
  for (int i = 0; i < 600 && seen.empty(); ++i) {
    rt.serve_events(50);
    auto s = keeper.call_one("seen");
    seen = serve_until(s).item<std::string>();
  }
  std::cout << "keeper saw: " << seen << "\n";
  CHECK(contains(seen, "code=3 ranks=1,"));
  // Handled: nothing reaches the top level, and the keeper lives on.
  rt.serve_events(200);
  CHECK(!rt.next_supervision_event(100ms).has_value());
  // Escalation: the quitter fails; the top level hears, caused by the crash.
  f = quitter.call_one("spawn_children");
  CHECK(serve_until(f).item<std::size_t>() == 2);
  f = quitter.call_one("crash_child");
  serve_until(f).check();
  std::optional<monarch::SupervisionEvent> top;
  for (int i = 0; i < 1200 && !top; ++i) {
    rt.serve_events(50);
    top = rt.next_supervision_event_ms(0);
  }
  CHECK(top.has_value());
  if (top) {
    std::cout << "top level: " << top->report << "\n";
    CHECK(top->mesh == "quitter");
    CHECK(top->caused_by != nullptr);
    if (top->caused_by) CHECK(top->caused_by->code == 3);
    CHECK(contains(top->report, "did not handle"));
  }
  auto k = keeper.call_one("seen");
  CHECK(contains(serve_until(k).item<std::string>(), "code=3"));
}

}  // namespace cpp_test
