// A C++ controller built with find_package(Monarch) against an installed
// package (tests/install/CMakeLists.txt): two procs of this very binary
// each host an Adder; one call gathers both replies.
#include <monarch/monarch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>

class Adder : public monarch::Actor {
 public:
  explicit Adder(const monarch::Call&) { endpoint("add", &Adder::add); }
  std::int64_t add(std::int64_t a, std::int64_t b) { return a + b; }
};
MONARCH_ACTOR(Adder, "Adder");

int main(int argc, char** argv) {
  monarch::serve_if_worker(argc, argv);
  try {
    monarch::Runtime rt;
    auto procs = monarch::HostMesh::local(rt).spawn_procs({{"procs", 2}});
    auto adders = procs.spawn("adder", "Adder");
    std::int64_t total = 0;
    for (const auto& point : adders.call("add", std::int64_t{40}, std::int64_t{2}).get(std::chrono::seconds(60)))
      total += point.as<std::int64_t>();
    procs.stop().get(std::chrono::seconds(60));
    std::printf("sum of replies %lld\n", static_cast<long long>(total));
    return total == 84 ? 0 : 1;
  } catch (const monarch::Error& e) {
    std::fprintf(stderr, "monarch error (%s): %s\n", monarch::status_name(e.status()), e.what());
    return 1;
  }
}
