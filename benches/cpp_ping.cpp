// C++ ping benchmark: round trip and pipelined throughput between the
// controller and one worker proc (two processes), through monarch.hpp.
//
//   make bench-cpp     (or build/cpp/examples/cpp_ping [ROUND_TRIPS [PIPELINED [WINDOW]]])
//
// Prints the median and p99 round trip of a call with an 8-byte payload to
// one actor, and calls/s with WINDOW calls in flight. Targets (from C/C++):
// ping <= 15 us, >= 300,000 msgs/s.
#include <monarch/monarch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>

namespace {
class Echo : public monarch::Actor {
 public:
  Echo() {
    endpoint("ping", [](const monarch::Call& c) {
      monarch::Parts out;
      for (auto& p : c.parts()) out.push_back(p.to_bytes());
      return out;
    });
  }
};
MONARCH_ACTOR(Echo, "Echo");
}  // namespace

int main(int argc, char** argv) {
  monarch::serve_if_worker(argc, argv);
  using clock = std::chrono::steady_clock;
  const int round_trips = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int pipelined = argc > 2 ? std::atoi(argv[2]) : 200000;
  const int window = argc > 3 ? std::atoi(argv[3]) : 256;

  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"procs", 1}});
  auto echo = procs.spawn("echo", "Echo").slice("procs", 0);
  std::uint64_t payload = 0x1234;
  const std::vector<monarch::BytesView> parts{
      monarch::BytesView(reinterpret_cast<const std::uint8_t*>(&payload), sizeof payload)};
  auto ping = [&] { return echo.call_parts("ping", parts, monarch::CallMode::One); };

  for (int i = 0; i < 2000; ++i) ping().get();  // warm up

  std::vector<double> us;
  us.reserve(round_trips);
  for (int i = 0; i < round_trips; ++i) {
    auto t0 = clock::now();
    auto vm = ping().get();
    auto t1 = clock::now();
    if (vm.size() != 1 || vm[0].part().size != sizeof payload) {
      std::fprintf(stderr, "bad reply\n");
      return 1;
    }
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  double median = us[us.size() / 2];
  double p99 = us[std::min(us.size() - 1, us.size() * 99 / 100)];

  std::deque<monarch::Future> inflight;
  auto t0 = clock::now();
  for (int i = 0; i < pipelined; ++i) {
    if (static_cast<int>(inflight.size()) >= window) {
      inflight.front().get();
      inflight.pop_front();
    }
    inflight.push_back(ping());
  }
  while (!inflight.empty()) {
    inflight.front().get();
    inflight.pop_front();
  }
  double secs = std::chrono::duration<double>(clock::now() - t0).count();
  double rate = pipelined / secs;

  std::printf("cpp ping round trip: median %.1f us, p99 %.1f us (%d calls; target <= 15 us)\n",
              median, p99, round_trips);
  std::printf("cpp pipelined calls: %.0f msgs/s (%d calls, window %d; target >= 300000)\n", rate,
              pipelined, window);
  procs.stop().get(std::chrono::seconds(30));
  return 0;
}
