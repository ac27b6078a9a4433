// cpp_test case `undeliverable_reply`: a C++ worker proc (serve_if_worker)
// whose caller is killed while it computes the answer logs the reply it
// cannot deliver and serves on.
#include <monarch/monarch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "check.hpp"
#include "suites.hpp"

using namespace std::chrono_literals;

namespace {

// The callee: touches a file when a slow call starts, answers after a while.
class Slow : public monarch::Actor {
 public:
  Slow() {
    endpoint("pid", []() { return static_cast<std::int64_t>(::getpid()); });
    endpoint("sleep", [this](std::string started, std::int64_t ms) {
      std::ofstream{started};
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return ++answered_;
    });
    endpoint("count", [this]() { return answered_; });
  }

 private:
  std::int64_t answered_ = 0;
};

// The caller that gets killed: calls `sleep` of the Slow actor whose
// reference it is given, from its own proc.
class Relay : public monarch::Actor {
 public:
  Relay() {
    endpoint("pid", []() { return static_cast<std::int64_t>(::getpid()); });
    endpoint("call_sleep", [](const monarch::Call& c) {
      auto target = monarch::ActorMesh::from_ref(c.part(0));
      auto started = c.get<std::string>(1);
      auto ms = c.get<std::int64_t>(2);
      return target.call_one("sleep", started, ms).get(120s).item<std::int64_t>();
    });
    endpoint("call_count", [](const monarch::Call& c) {
      auto target = monarch::ActorMesh::from_ref(c.part(0));
      return target.call_one("count").get(120s).item<std::int64_t>();
    });
  }
};

bool alive(std::int64_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  return !text.empty() && !cpp_test::contains(text, ") Z");
}

}  // namespace

MONARCH_ACTOR(Slow, "HardeningSlow");
MONARCH_ACTOR(Relay, "HardeningRelay");

namespace cpp_test {

void test_undeliverable_reply() {
  monarch::Runtime rt;
  auto callee_procs = rt.spawn_procs({{"b", 1}});
  auto caller_procs = rt.spawn_procs({{"a", 1}});
  auto slow = callee_procs.spawn("slow", "HardeningSlow");
  auto relay = caller_procs.spawn("relay", "HardeningRelay");
  auto callee_pid = slow.call_one("pid").get(60s).item<std::int64_t>();
  auto caller_pid = relay.call_one("pid").get(60s).item<std::int64_t>();
  std::string started = "/tmp/monarch-cpp-test-started-" + std::to_string(::getpid());
  ::unlink(started.c_str());
  monarch::Bytes ref = slow.to_ref();
  auto pending = relay.call_one("call_sleep", monarch::BytesView(ref), started, std::int64_t{1000});
  for (int i = 0; i < 6000 && ::access(started.c_str(), F_OK) != 0; ++i)
    std::this_thread::sleep_for(10ms);
  CHECK(::access(started.c_str(), F_OK) == 0);
  ::unlink(started.c_str());
  // The caller dies while the callee computes its answer.
  ::kill(static_cast<pid_t>(caller_pid), SIGKILL);
  auto vm = pending.get(60s);
  CHECK(vm.size() == 1 && !vm[0].ok());
  // Handled after the slow call answered (events are handled in order):
  // the answer went nowhere, and the callee is still there.
  CHECK(slow.call_one("count").get(60s).item<std::int64_t>() == 1);
  CHECK(alive(callee_pid));
  std::this_thread::sleep_for(200ms);
  CHECK(alive(callee_pid));
  CHECK(slow.call_one("pid").get(60s).item<std::int64_t>() == callee_pid);
  // A new caller, from another proc, is answered too.
  auto new_caller_procs = rt.spawn_procs({{"a", 1}});
  auto relay2 = new_caller_procs.spawn("relay2", "HardeningRelay");
  CHECK(relay2.call_one("call_count", monarch::BytesView(ref)).get(60s).item<std::int64_t>() == 1);
  // The caller's death reached this controller (its owner).
  auto ev = rt.next_supervision_event(30s);
  CHECK(ev.has_value());
  new_caller_procs.stop().get(60s);
  caller_procs.stop().get(60s);
  callee_procs.stop().get(60s);
}

}  // namespace cpp_test
