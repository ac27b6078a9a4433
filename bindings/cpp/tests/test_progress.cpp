// cpp_test case `progress`: the progress events of procs starting (real
// worker procs of this binary) and of an operation the program reports.
#include <monarch/monarch.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "check.hpp"
#include "suites.hpp"

using namespace std::chrono_literals;

namespace {

// The events, in order, of the first operation of `kind` and size `total`
// whose start is seen, up to its last one (bounded: 60 s).
std::vector<monarch::ProgressEvent> events_of(monarch::ProgressEvent::Kind kind,
                                              std::uint64_t total) {
  std::vector<monarch::ProgressEvent> mine;
  std::optional<std::uint64_t> op;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto ev = monarch::next_progress_event(1000);
    if (!ev || ev->kind != kind) continue;
    if (!op) {
      if (ev->done != 0 || ev->finished || ev->total != total) continue;
      op = ev->id;
    }
    if (ev->id != *op) continue;
    mine.push_back(*ev);
    if (ev->finished) return mine;
  }
  CHECK(!"no finished operation within 60 s");
  return mine;
}

}  // namespace

void cpp_test::test_progress() {
  monarch::Runtime rt;
  monarch::watch_progress(true);
  auto procs = rt.spawn_procs({{"gpus", 3}});
  auto evs = events_of(monarch::ProgressEvent::ProcsReady, 3);
  CHECK(!evs.empty());
  CHECK(evs.front().done == 0 && !evs.front().finished);
  const auto& last = evs.back();
  CHECK(last.finished && last.done == 3 && last.failed == 0);
  CHECK(last.label == "procs ready");
  CHECK(last.text.rfind("procs ready 3/3 (", 0) == 0);
  auto c = procs.spawn("c", "Counter", std::int64_t{1});
  CHECK(c.call("get").get(30s).values<std::int64_t>() == std::vector<std::int64_t>(3, 1));
  procs.stop().get(30s);

  {
    monarch::Progress p(monarch::ProgressEvent::TensorFetch, "fetch weights", 100);
    p.set(40);
    p.set(100);
  }
  auto own = events_of(monarch::ProgressEvent::TensorFetch, 100);
  CHECK(own.size() == 4);
  CHECK(own[1].done == 40 && own[2].done == 100 && own[3].finished);
  CHECK(own[3].text.rfind("fetch weights 100 B/100 B (", 0) == 0);
  try {
    monarch::Progress bad(static_cast<monarch::ProgressEvent::Kind>(99), "x");
    CHECK(!"an unknown kind is refused");
  } catch (const monarch::Error& e) {
    CHECK(std::string(e.what()).find("unknown progress kind") != std::string::npos);
  }
  monarch::watch_progress(false);
}
