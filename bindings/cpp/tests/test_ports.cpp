// cpp_test case `ports`: channels, once ports, send / stream, deferred
// replies.
#include <monarch/monarch.hpp>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "suites.hpp"

using namespace std::chrono_literals;

// Actors of the ports test (they call libmonarch, so they live here and not
// in test_actors.hpp, which the plugin shares).
namespace {

class Sender : public monarch::Actor {
 public:
  Sender() {
    // Send n values (two parts each) to a port, then an error.
    endpoint("send_n", [](monarch::Port p, std::int64_t n) {
      for (std::int64_t i = 0; i < n; ++i) p.send(i * 10, std::string("v" + std::to_string(i)));
      p.send_error("done after " + std::to_string(n));
      return n;
    });
    // Deferred replies: answered by a later message, or by a thread.
    endpoint("hold", [this](const monarch::Call& c) { held_ = monarch::defer_reply(c); });
    endpoint("release", [this](std::int64_t v) {
      held_.send(v);
      return v;
    });
    endpoint("hold_thread", [this](const monarch::Call& c) {
      monarch::Port p = monarch::defer_reply(c);
      std::int64_t v = c.get<std::int64_t>(0);
      if (thread_.joinable()) thread_.join();
      thread_ = std::thread([p, v] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        p.send(v * 2);
      });
    });
    endpoint("defer_then_throw", [](const monarch::Call& c) -> std::int64_t {
      monarch::defer_reply(c);
      throw std::runtime_error("failed after deferring");
    });
    endpoint("defer_twice", [](const monarch::Call& c) {
      monarch::Port p = monarch::defer_reply(c);
      try {
        monarch::defer_reply(c);
      } catch (const std::logic_error& e) {
        p.send(std::string(e.what()));
      }
    });
  }
  ~Sender() override {
    if (thread_.joinable()) thread_.join();
  }

 private:
  monarch::Port held_;
  std::thread thread_;
};

}  // namespace

MONARCH_ACTOR(Sender, "Sender");

namespace cpp_test {

using monarch::ActorError;
using monarch::Error;

void test_ports() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"procs", 3}});
  auto senders = procs.spawn("s", "Sender");
  auto s0 = senders.slice("procs", 0);
  // A channel: the controller opens a port, an actor in another proc sends
  // several values to it; they arrive in order, then the error.
  auto rx = rt.open_port();
  CHECK(s0.call_one("send_n", rx.port(), std::int64_t{5}).get(30s).item<std::int64_t>() == 5);
  for (std::int64_t i = 0; i < 5; ++i) {
    auto v = rx.recv().get(30s);
    CHECK(v.size() == 1);
    CHECK(v[0].size() == 2);
    CHECK(v[0].as<std::int64_t>(0) == i * 10);
    CHECK(v[0].as<std::string>(1) == "v" + std::to_string(i));
  }
  auto last = rx.recv().get(30s);
  CHECK(!last[0].ok() && last[0].error() == "done after 5");
  // Futures asked before the values come complete in order too.
  std::vector<monarch::Future> pending;
  for (int i = 0; i < 3; ++i) pending.push_back(rx.recv());
  CHECK(!pending[0].ready());
  senders.slice("procs", 2).call_one("send_n", rx.port(), std::int64_t{2}).get(30s);
  CHECK(pending[0].get(30s).item<std::int64_t>() == 0);
  CHECK(pending[1].get(30s).item<std::int64_t>() == 10);
  CHECK(!pending[2].get(30s)[0].ok());
  // The controller sends to its own port, and to a port made from bytes.
  rx.port().send(std::int64_t{7});
  monarch::Port copy(rx.port().bytes());
  copy.send_parts({monarch::BytesView("raw"), monarch::BytesView()});
  CHECK(rx.recv().get(30s).item<std::int64_t>() == 7);
  auto raw = rx.recv().get(30s);
  CHECK(raw[0].size() == 2 && raw[0].part(0).str() == "raw" && raw[0].part(1).size == 0);
  // A once port closes after one value; later futures fail.
  auto once = monarch::PortReceiver::open(true);
  s0.call_one("send_n", once.port(), std::int64_t{3}).get(30s);
  CHECK(once.recv().get(30s).item<std::int64_t>() == 0);
  auto closed = THROWS(Error, once.recv().get(30s));
  if (closed) CHECK(closed->status() == MONARCH_ERR_INVALID_ARGUMENT);
  // Bad references are refused.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::Port().send(std::int64_t{1}));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::Port(monarch::Bytes{1, 2, 3}).send_error("x"));
  // ActorMesh::send: every actor's reply goes to a port.
  auto echo = procs.spawn("e", "Echo");
  auto replies = rt.open_port();
  echo.send("rank", replies.port());
  std::set<std::uint64_t> ranks;
  for (int i = 0; i < 3; ++i) ranks.insert(replies.recv().get(30s).item<std::uint64_t>());
  CHECK(ranks == (std::set<std::uint64_t>{0, 1, 2}));
  echo.send_parts("echo", {monarch::BytesView("one")}, replies.port(), monarch::CallMode::Choose);
  CHECK(replies.recv().get(30s)[0].part(0).str() == "one");
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.send_parts("rank", monarch::Parts{}, replies.port(), monarch::CallMode::One));
  // ActorMesh::stream: one reply per rank, in arrival order, then closed.
  auto stream = echo.stream("rank");
  ranks.clear();
  for (int i = 0; i < 3; ++i) ranks.insert(stream.recv().get(30s).item<std::uint64_t>());
  CHECK(ranks == (std::set<std::uint64_t>{0, 1, 2}));
  closed = THROWS(Error, stream.recv().get(30s));
  if (closed) CHECK(closed->status() == MONARCH_ERR_INVALID_ARGUMENT);
  // A stream of a slice, with typed arguments; failing endpoints stream
  // error points.
  auto greet = echo.slice("procs", 1, 3).stream("greet", std::string("s"), std::int32_t{1});
  for (int i = 0; i < 2; ++i) CHECK(greet.recv().get(30s).item<std::string>() == "hello s;");
  auto fails = echo.stream("fail");
  for (int i = 0; i < 3; ++i) {
    auto v = fails.recv().get(30s);
    CHECK(!v[0].ok() && contains(v[0].error(), "fail on rank"));
  }
  // Deferred replies: the caller's future completes when the actor sends
  // to the reply port it took, from a later message or another thread.
  auto held = s0.call_one("hold");
  CHECK(!held.wait_for(200ms));
  CHECK(s0.call_one("release", std::int64_t{42}).get(30s).item<std::int64_t>() == 42);
  CHECK(held.get(30s).item<std::int64_t>() == 42);
  CHECK(s0.call_one("hold_thread", std::int64_t{21}).get(30s).item<std::int64_t>() == 42);
  auto all = senders.call("hold_thread", std::int64_t{5}).get(30s);
  CHECK(all.values<std::int64_t>() == std::vector<std::int64_t>(3, 10));
  auto thrown = s0.call_one("defer_then_throw").get(30s);
  CHECK(!thrown[0].ok() && contains(thrown[0].error(), "failed after deferring"));
  auto twice = s0.call_one("defer_twice").get(30s);
  CHECK(contains(twice.item<std::string>(), "already taken"));
  // The actors still answer ordinary calls.
  CHECK(s0.call_one("send_n", rx.port(), std::int64_t{0}).get(30s).item<std::int64_t>() == 0);
  // A future pending on a receiver that is then destroyed does not hang.
  auto gone = rt.open_port();
  auto orphan = gone.recv();
  gone = monarch::PortReceiver();
  CHECK(orphan.wait_for(30s));
  THROWS(Error, orphan.get());
  procs.stop().get(30s);
}

}  // namespace cpp_test
