// End-to-end tests of monarch.hpp. The binary is its own worker: procs it
// spawns re-run it, and serve_if_worker hosts the test actors there.
//
//   cpp_test NAME    run one test (ctest runs each in its own process,
//                    since a process has one runtime)
//   cpp_test         list the tests
//
// MONARCH_CLI and MONARCH_TEST_PLUGIN (compile definitions) are the paths of
// the `monarch` binary and of the test plugin library; MONARCH_TEST_PYTHON
// and MONARCH_TEST_PYTHONPATH (overridden by the environment variables of
// the same names) the interpreter and PYTHONPATH of the Python worker procs
// of the python_actors test (an empty interpreter skips it).
#include <monarch/monarch.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_actors.hpp"

MONARCH_ACTOR(test_actors::Counter, "Counter");
MONARCH_ACTOR(test_actors::Echo, "Echo");

namespace {

int failures = 0;

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond "\n"; \
      ++failures;                                                               \
    }                                                                           \
  } while (0)

// Run `f`, expecting it to throw E; returns the exception (or a default).
template <class E, class F>
std::optional<E> throws(F&& f, int line) {
  try {
    f();
  } catch (const E& e) {
    return e;
  } catch (const std::exception& e) {
    std::cerr << __FILE__ << ":" << line << ": wrong exception: " << e.what() << "\n";
    ++failures;
    return std::nullopt;
  }
  std::cerr << __FILE__ << ":" << line << ": expected an exception\n";
  ++failures;
  return std::nullopt;
}
#define THROWS(E, expr) throws<E>([&] { expr; }, __LINE__)

// `expr` throws monarch::Error with status `st`.
#define THROWS_STATUS(st, expr)                          \
  do {                                                   \
    auto err_ = THROWS(monarch::Error, expr);            \
    if (err_) CHECK(err_->status() == (st));             \
  } while (0)

// `raw` was released from a live W: free it, then check that freeing it
// again and using a W that adopts it are rejected (invalid handle).
template <class W, class Raw, class Use>
void check_freed_handle(Raw* raw, monarch_status (*free_fn)(Raw*), Use use) {
  CHECK(free_fn(raw) == MONARCH_OK);
  CHECK(free_fn(raw) == MONARCH_ERR_INVALID_HANDLE);
  W stale(raw);  // adopts a freed handle
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, use(stale));
  stale.release();
}

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

using namespace std::chrono_literals;
using monarch::ActorError;
using monarch::Error;

// Actors of the ports / data-plane tests (they call libmonarch, so they
// live here and not in test_actors.hpp, which the plugin shares).
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

std::uint8_t pattern(std::size_t i, unsigned seed) {
  return static_cast<std::uint8_t>((i * 131 + seed * 7 + (i >> 11)) & 0xff);
}

// Owns `n` bytes (a pattern) registered as an RDMA buffer.
class Store : public monarch::Actor {
 public:
  explicit Store(const monarch::Call& args) : data_(args.get<std::uint64_t>(0)) {
    bool read_only = args.size() > 1 && args.get<std::uint8_t>(1) != 0;
    for (std::size_t i = 0; i < data_.size(); ++i) data_[i] = pattern(i, 1);
    buf_ = monarch::RdmaBuffer::register_memory(
        data_, read_only ? monarch::RdmaAccess::ReadOnly : monarch::RdmaAccess::ReadWrite);
    endpoint("buffer", [this]() { return buf_.to_bytes(); });
    endpoint("contents", [this]() { return data_; });
    endpoint("registered", [this]() { return buf_.is_registered(); });
    endpoint("drop", [this]() { buf_.drop(); });
  }

 private:
  std::vector<std::uint8_t> data_;  // before buf_: unregistered first
  monarch::RdmaBuffer buf_;
};

// Reads and writes other procs' buffers (handles rebuilt from descriptors).
class Peer : public monarch::Actor {
 public:
  Peer() {
    endpoint("pull", [](monarch::RdmaBuffer b) {
      std::vector<std::uint8_t> dst(b.size());
      b.read_into(dst).get(std::chrono::seconds(60));
      return dst;
    });
    endpoint("push", [](monarch::RdmaBuffer b, std::vector<std::uint8_t> src, std::uint64_t at) {
      return b.write_from(src, at).get(std::chrono::seconds(60));
    });
  }
};


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

MONARCH_ACTOR(Sender, "Sender");
MONARCH_ACTOR(Watcher, "Watcher");
MONARCH_ACTOR(Store, "Store");
MONARCH_ACTOR(Peer, "Peer");

namespace {

void test_lifecycle() {
  monarch::Runtime rt;
  CHECK(!rt.is_worker());
  CHECK(rt.fd() >= 0);
  auto procs = rt.spawn_procs({{"hosts", 2}, {"gpus", 2}});
  auto shape = procs.shape();
  CHECK(shape.labels() == (std::vector<std::string>{"hosts", "gpus"}));
  CHECK(shape.numel() == 4);
  auto counters = procs.spawn("c", "Counter", std::int64_t{10});
  CHECK(counters.shape().numel() == 4);
  auto vm = counters.call("incr", std::int64_t{5}).get(30s);
  CHECK(vm.size() == 4);
  for (auto v : vm.values<std::int64_t>()) CHECK(v == 15);
  // Stop the actors: later calls fail per point, procs keep running.
  counters.stop().get(30s);
  auto after = counters.call("get").get(30s);
  CHECK(after.has_errors());
  // A new actor on the same procs still works.
  auto c2 = procs.spawn("c2", "Counter");
  CHECK(c2.call("get").get(30s).values<std::int64_t>() == std::vector<std::int64_t>(4, 0));
  procs.stop().get(30s);
  // Calls after the procs stopped do not hang.
  auto f = c2.call("get");
  CHECK(f.wait_for(30s));
  try {
    auto r = f.get();
    CHECK(r.has_errors());
  } catch (const Error& e) {
    CHECK(e.status() != MONARCH_OK);
  }
}

void test_calls() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"procs", 3}});
  auto echo = procs.spawn("e", "Echo");
  // Typed arguments and results.
  auto greet = echo.call("greet", std::string("bob"), std::int32_t{2}).get(30s);
  for (auto& p : greet) CHECK(p.as<std::string>() == "hello bob;hello bob;");
  CHECK(echo.call("sum", std::vector<double>{1, 2, 3.5}).get(30s).values<double>() ==
        std::vector<double>(3, 6.5));
  // Raw parts, several of them, including an empty one.
  monarch::Bytes big(1 << 20, 7);
  auto raw = echo.slice("procs", 1)
                 .call_parts("echo", std::vector<monarch::BytesView>{monarch::BytesView("ab"),
                                                                      monarch::BytesView(),
                                                                      big},
                             monarch::CallMode::One)
                 .get(30s);
  CHECK(raw.size() == 1);
  CHECK(raw[0].size() == 3);
  CHECK(raw[0].part(0).str() == "ab");
  CHECK(raw[0].part(1).size == 0);
  CHECK(raw[0].part(2).size == big.size() && raw[0].part(2).data[12345] == 7);
  // Ranks and points.
  auto ranks = echo.call("rank").get(30s);
  std::size_t i = 0;
  for (auto& p : ranks) {
    CHECK(p.ok());
    CHECK(p.rank() == i);
    CHECK(p.point()["procs"] == i);
    CHECK(p.as<std::uint64_t>() == i);
    ++i;
  }
  CHECK(i == 3);
  // choose: one answer.
  auto one = echo.choose("rank").get(30s);
  CHECK(one.size() == 1);
  // call_one on one actor.
  CHECK(echo.slice("procs", 2).call_one("rank").get(30s).item<std::uint64_t>() == 0);
  // broadcast then a call: FIFO per sender, so the broadcast went first.
  auto counter = procs.spawn("c", "Counter");
  counter.broadcast("incr", std::int64_t{4});
  CHECK(counter.call("get").get(30s).values<std::int64_t>() == std::vector<std::int64_t>(3, 4));
  // void endpoint: zero parts.
  auto nothing = echo.call("nothing").get(30s);
  for (auto& p : nothing) CHECK(p.ok() && p.size() == 0);
  // Pipelined futures complete in any order of get().
  std::vector<monarch::Future> fs;
  for (int k = 0; k < 50; ++k) fs.push_back(counter.slice("procs", 0).call_one("incr", std::int64_t{1}));
  for (int k = 49; k >= 0; --k) CHECK(fs[k].get(30s).item<std::int64_t>() == 4 + k + 1);
  // ready()/wait_for on a slow call.
  auto slow = echo.slice("procs", 0).call_one("sleep_ms", std::int64_t{300});
  CHECK(!slow.ready());
  CHECK(!slow.wait_for(10ms));
  CHECK(slow.wait_for(30s));
  CHECK(slow.ready());
  slow.get();
  // A reference round trip.
  auto ref = counter.to_ref();
  auto again = monarch::ActorMesh::from_ref(rt, ref);
  CHECK(again.call("get").get(30s).size() == 3);
}

void test_slicing() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"hosts", 2}, {"gpus", 3}});
  auto echo = procs.spawn("e", "Echo");
  auto host1 = echo.slice("hosts", 1);
  auto s = host1.shape();
  CHECK(s.labels() == std::vector<std::string>{"gpus"});
  CHECK(s.sizes() == std::vector<std::uint64_t>{3});
  // Ranks are relative to the mesh called.
  CHECK(host1.call("rank").get(30s).values<std::uint64_t>() ==
        (std::vector<std::uint64_t>{0, 1, 2}));
  CHECK(host1.call("labels").get(30s)[0].as<std::string>() == "gpus,");
  auto tail = echo.slice("gpus", 1, monarch::kEnd);
  CHECK(tail.shape().sizes() == (std::vector<std::uint64_t>{2, 2}));
  auto vm = tail.call("rank").get(30s);
  CHECK(vm.shape().labels() == (std::vector<std::string>{"hosts", "gpus"}));
  for (auto& p : vm) {
    CHECK(p.point().coords.size() == 2);
    CHECK(p.point()["hosts"] * 2 + p.point()["gpus"] == p.rank());
  }
  auto stepped = echo.slice("gpus", 0, 3, 2).slice("hosts", -1, monarch::kEnd);
  CHECK(stepped.shape().sizes() == (std::vector<std::uint64_t>{1, 2}));
  // Proc mesh slices: spawn on a slice only.
  auto sub = procs.slice("hosts", 0);
  auto c = sub.spawn("c", "Counter", std::int64_t{1});
  CHECK(c.shape().numel() == 3);
  CHECK(c.call("get").get(30s).values<std::int64_t>() == std::vector<std::int64_t>(3, 1));
  // Bad slices are errors thrown across the boundary.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.slice("nope", 0));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.slice("hosts", 7));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.slice("hosts", 0, 2, 0));
}

void test_errors() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"procs", 2}});
  auto echo = procs.spawn("e", "Echo");
  // An endpoint that throws: an error point per rank; the actor lives on.
  auto vm = echo.call("fail").get(30s);
  CHECK(vm.has_errors());
  CHECK(!vm[1].ok() && contains(vm[1].error(), "fail on rank 1"));
  auto ae = THROWS(ActorError, vm.check());
  if (ae) {
    CHECK(ae->rank() == 0);
    CHECK(ae->status() == monarch::kEndpointFailed);
    CHECK(contains(ae->what(), "fail on rank 0"));
  }
  THROWS(ActorError, vm.values<std::int64_t>());
  THROWS(ActorError, vm[0].as<std::int64_t>());
  CHECK(echo.call("rank").get(30s).values<std::uint64_t>().size() == 2);
  // Unknown endpoint, wrong argument count and sizes.
  auto u = echo.call("nope").get(30s);
  CHECK(contains(u[0].error(), "no endpoint 'nope'"));
  auto w = echo.call("greet", std::string("x")).get(30s);
  CHECK(contains(w[0].error(), "takes 2 parts, got 1"));
  auto z = echo.call("greet", std::string("x"), std::int64_t{1}).get(30s);
  CHECK(contains(z[0].error(), "expected a part of 4 bytes"));
  // Decoding a reply as the wrong type throws locally.
  THROWS(monarch::DecodeError, echo.call("rank").get(30s)[0].as<std::int32_t>());
  // Constructors: unknown type, throwing constructor.
  auto ce = THROWS(ActorError, procs.spawn("x", "NoSuchType"));
  if (ce) CHECK(contains(ce->what(), "unknown actor type 'NoSuchType'"));
  ce = THROWS(ActorError, procs.spawn("y", "Counter", std::int64_t{-1}));
  if (ce) CHECK(contains(ce->what(), "start must be >= 0"));
  // call_one on a mesh of two actors is an invalid argument.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.call_one("rank"));
  // get(timeout) throws a timeout; the future stays usable.
  auto slow = echo.slice("procs", 0).call_one("sleep_ms", std::int64_t{500});
  auto e = THROWS(Error, slow.get(1ms));
  if (e) {
    CHECK(e->status() == MONARCH_ERR_TIMEOUT);
    CHECK(e->is_timeout());
  }
  CHECK(slow.get(30s).size() == 1);
  // Taking a result twice.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, slow.get());
  // Bad bootstrap environment.
  monarch::ProcOptions bad;
  bad.env = {"NOEQUALS"};
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, rt.spawn_procs({{"p", 1}}, bad));
}

void test_crash() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"procs", 3}});
  auto echo = procs.spawn("e", "Echo");
  // The proc of rank 2 exits while its call is in flight: that point fails
  // (promptly), the other ranks answer.
  auto vm = echo.slice("procs", 2).call_one("exit").get(30s);
  CHECK(!vm[0].ok());
  CHECK(contains(vm[0].error(), "code 3"));
  // The crash is a supervision event for this controller (the owner).
  auto ev = rt.next_supervision_event(30s);
  CHECK(ev.has_value());
  if (ev) {
    CHECK(ev->cause == monarch::SupervisionEvent::ExitCode);
    CHECK(ev->code == 3);
    CHECK(ev->ranks == std::vector<std::uint64_t>{2});
    CHECK(contains(ev->report, "exited with code 3"));
    CHECK(contains(ev->report, "'e'"));  // the actor mesh on the proc
    CHECK(ev->caused_by == nullptr);
  }
  CHECK(!rt.next_supervision_event(100ms).has_value());
  // Later calls to a view holding the dead rank fail at once.
  auto e = THROWS(Error, echo.call("rank"));
  if (e) {
    CHECK(e->status() == MONARCH_ERR_PROC_FAILED);
    CHECK(contains(e->what(), "rank 2"));
  }
  // Disjoint slices keep working.
  CHECK(echo.slice("procs", 0, 2).call("rank").get(30s).values<std::uint64_t>().size() == 2);
  // An endpoint failing under broadcast (nobody waits) fails that actor and
  // is reported too.
  auto fine = procs.slice("procs", 0, 2).spawn("f", "Echo");
  fine.slice("procs", 1).broadcast("fail");
  auto ev2 = rt.next_supervision_event(30s);
  CHECK(ev2.has_value());
  if (ev2) {
    CHECK(ev2->cause == monarch::SupervisionEvent::EndpointError);
    CHECK(ev2->mesh == "f");
    CHECK(ev2->ranks == std::vector<std::uint64_t>{1});
  }
  // Bad handles are rejected.
  std::uint8_t* b = nullptr;
  std::size_t n = 0;
  CHECK(monarch_supervision_next(nullptr, 0, &b, &n) == MONARCH_ERR_INVALID_HANDLE);
  CHECK(monarch_supervision_next(rt.handle(), 0, nullptr, &n) == MONARCH_ERR_INVALID_ARGUMENT);
}

// A `monarch host` agent on 127.0.0.1 started by the test (dies with the
// test process; stopped with SIGTERM at the end of scope).
class Agent {
 public:
  explicit Agent(const std::string& secret) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::setenv("MONARCH_JOB_TOKEN", secret.c_str(), 1);
      ::execl(MONARCH_CLI, MONARCH_CLI, "host", "--listen", "127.0.0.1:0", (char*)nullptr);
      ::_exit(127);
    }
    ::close(fds[1]);
    // Read up to the READY line (60 s at most, so a broken agent fails the
    // test instead of hanging it).
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (out.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, 1000) <= 0) continue;
      char buf[256];
      ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    const std::string tag = "MONARCH_HOST_READY ";
    auto at = out.find(tag);
    if (at == std::string::npos) throw std::runtime_error("agent never became ready: " + out);
    addr_ = out.substr(at + tag.size(), out.find('\n', at) - at - tag.size());
  }
  ~Agent() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  const std::string& addr() const { return addr_; }

 private:
  pid_t pid_ = -1;
  std::string addr_;
};

void test_hosts() {
  monarch::Runtime rt;
  Agent a(rt.job_token()), b(rt.job_token());
  auto hosts = monarch::HostMesh::attach(rt, {a.addr(), b.addr()});
  CHECK(hosts.shape().labels() == std::vector<std::string>{"hosts"});
  CHECK(hosts.shape().numel() == 2);
  auto procs = hosts.spawn_procs({{"gpus", 2}});
  CHECK(procs.shape().labels() == (std::vector<std::string>{"hosts", "gpus"}));
  auto echo = procs.spawn("e", "Echo");
  auto ranks = echo.call("rank").get(60s).values<std::uint64_t>();
  CHECK(ranks == (std::vector<std::uint64_t>{0, 1, 2, 3}));
  // Procs started through a slice land on that host only.
  auto second = hosts.slice("hosts", 1);
  CHECK(second.shape().ndim() == 0);
  CHECK(hosts.slice("hosts", 1, monarch::kEnd).shape().sizes() == std::vector<std::uint64_t>{1});
  auto more = second.spawn_procs({{"gpus", 1}});
  auto e2 = more.spawn("e2", "Echo");
  CHECK(e2.call("rank").get(60s).values<std::uint64_t>().size() == 1);
  auto bad = THROWS(Error, hosts.slice("hosts", 5));
  if (bad) CHECK(contains(bad->what(), "hosts"));
  // A local HostMesh has no agents to slice.
  THROWS(Error, monarch::HostMesh::local(rt).slice("hosts", 0));
  more.stop().get(60s);
  procs.stop().get(60s);
}

void test_after_free() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"procs", 1}});
  auto echo = procs.spawn("e", "Echo");
  // A moved-from owner holds no handle: the library rejects it.
  monarch::ActorMesh moved = std::move(echo);
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, echo.call("rank"));
  // A raw handle freed twice, or used after free, is rejected.
  check_freed_handle<monarch::ActorMesh>(moved.slice("procs", 0).release(), monarch_actor_mesh_free,
                                         [](monarch::ActorMesh& m) { m.call("rank"); });
  // A future whose handle was freed.
  monarch::Future f = moved.call("rank");
  monarch_future* rf = f.release();
  CHECK(monarch_future_free(rf) == MONARCH_OK);
  monarch::Future sf(rf);
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, sf.get());
  sf.release();
  // Wrong kind: a proc mesh handle passed as an actor mesh.
  monarch::ActorMesh wrong(reinterpret_cast<monarch_actor_mesh*>(procs.handle()));
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, wrong.call("rank"));
  wrong.release();
  // After the runtime is shut down, meshes fail instead of hanging.
  rt.shutdown();
  try {
    auto vm = moved.call("rank").get(30s);
    std::cerr << "after shutdown: " << vm[0].error() << "\n";
    CHECK(vm.has_errors());
  } catch (const Error& err) {
    std::cerr << "after shutdown: " << monarch::status_name(err.status()) << ": " << err.what() << "\n";
    CHECK(err.status() == MONARCH_ERR_STOPPED || err.status() == MONARCH_ERR_INVALID_HANDLE);
  }
}

void test_local_actors() {
  // Actors in the controller process itself, served while we wait.
  monarch::Runtime rt;
  auto me = rt.this_proc();
  auto [counter, ready] = me.spawn_async("local", "Counter",
                                         {monarch::encode(std::int64_t{7})});
  while (!ready.ready()) rt.serve_events(10);
  ready.get().check();
  auto f = counter.call("incr", std::int64_t{3});
  while (!f.ready()) rt.serve_events(10);
  auto vm = f.get();
  CHECK(vm.item<std::int64_t>() == 10);
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, vm.at(1));
  // The pull API by hand: Event::next (the event's header in one call),
  // then reply_and_free (one call for a one-part answer).
  auto f2 = counter.call("incr", std::int64_t{5});
  std::optional<monarch::Event> ev;
  for (int i = 0; i < 3000 && !ev; ++i) ev = monarch::Event::next(rt.handle(), 10);
  CHECK(ev.has_value());
  if (ev) {
    CHECK(ev->kind() == MONARCH_EVENT_MESSAGE);
    CHECK(std::string(ev->method()) == "incr");
    CHECK(ev->wants_reply());
    auto call = ev->call();
    CHECK(call.size() == 1 && call.get<std::int64_t>(0) == 5);
    ev->reply_and_free({monarch::encode(std::int64_t{99})});
    CHECK(ev->handle() == nullptr);
  }
  CHECK(f2.get(30s).item<std::int64_t>() == 99);
}

void test_plugin() {
  monarch::Runtime rt;
  monarch::ProcOptions opts;
  opts.argv = {MONARCH_CLI, "worker", "--plugin", MONARCH_TEST_PLUGIN};
  auto procs = rt.spawn_procs({{"procs", 2}}, opts);
  auto c = procs.spawn("pc", "PluginCounter", std::int64_t{100});
  CHECK(c.call("incr", std::int64_t{1}).get(30s).values<std::int64_t>() ==
        std::vector<std::int64_t>(2, 101));
  CHECK(c.call("add_all", std::vector<std::int64_t>{1, 2, 3}).get(30s).values<std::int64_t>() ==
        std::vector<std::int64_t>(2, 107));
  auto e = procs.spawn("pe", "PluginEcho");
  CHECK(e.call("greet", std::string("plugin"), std::int32_t{1}).get(30s)[1].as<std::string>() ==
        "hello plugin;");
  CHECK(e.call("rank").get(30s).values<std::uint64_t>() == (std::vector<std::uint64_t>{0, 1}));
  CHECK(e.call("labels").get(30s)[0].as<std::string>() == "procs,");
  auto vm = e.call("fail").get(30s);
  CHECK(!vm[1].ok() && contains(vm[1].error(), "fail on rank 1"));
  auto ce = THROWS(ActorError, procs.spawn("bad", "PluginCounter", std::int64_t{-5}));
  if (ce) CHECK(contains(ce->what(), "start must be >= 0"));
  // Unknown types list the plugin's types.
  ce = THROWS(ActorError, procs.spawn("x", "Nope"));
  if (ce) CHECK(contains(ce->what(), "PluginCounter"));
  // Built-in Rust actors still work next to plugin actors.
  auto echo = procs.spawn("be", "echo");
  CHECK(echo.call_parts("echo", std::vector<monarch::BytesView>{monarch::BytesView("x")})
            .get(30s)[0]
            .part(0)
            .str() == "x");
  // Stopping a plugin actor destroys it; the proc lives on.
  c.stop().get(30s);
  CHECK(c.call("get").get(30s).has_errors());
  CHECK(e.call("rank").get(30s).size() == 2);
  // A plugin that cannot load makes the worker exit: calls fail, no hang.
  monarch::ProcOptions badopts;
  badopts.argv = {MONARCH_CLI, "worker", "--plugin", "/nonexistent/libnope.so"};
  auto badprocs = rt.spawn_procs({{"procs", 1}}, badopts);
  try {
    // Once its exit is known, spawning there fails at once (supervision).
    auto [m, ready] = badprocs.spawn_async("x", "echo");
    CHECK(ready.wait_for(60s));
    CHECK(ready.get().has_errors());
  } catch (const Error& err) {
    CHECK(err.status() != MONARCH_OK);
  }
}

// ctest's SKIP_RETURN_CODE.
constexpr int kSkip = 77;

std::string setting(const char* env, const char* configured) {
  const char* v = std::getenv(env);
  return (v && *v) ? v : configured;
}

void test_python_actors() {
  // A C++ controller spawns Python worker procs and calls raw endpoints of
  // a Python actor spawned by type name ("module:Class"), without pickle.
  std::string python = setting("MONARCH_TEST_PYTHON", MONARCH_TEST_PYTHON);
  if (python.empty()) {
    std::cout << "python_actors: skipped (no Python configured: set MONARCH_TEST_PYTHON)\n";
    std::exit(kSkip);
  }
  monarch::Runtime rt;
  monarch::ProcOptions opts;
  opts.argv = {python, "-m", "monarch._bootstrap"};
  opts.env = {"PYTHONPATH=" + setting("MONARCH_TEST_PYTHONPATH", MONARCH_TEST_PYTHONPATH)};
  auto procs = rt.spawn_procs({{"procs", 2}}, opts);
  using monarch::BytesView;
  using Views = std::vector<BytesView>;
  auto [g, ready] = procs.spawn_async("greeters", "py_actors:Greeter", Views{BytesView("hello ")});
  ready.get(60s).check();
  auto vm = g.call_parts("greet", Views{BytesView("c++")}).get(30s);
  CHECK(vm.size() == 2);
  CHECK(vm[0].part(0).str() == "hello c++ from rank 0");
  CHECK(vm[1].part(0).str() == "hello c++ from rank 1");
  // Typed C++ values are raw bytes too (host byte order).
  CHECK(g.call("add", std::int64_t{5}).get(30s).values<std::int64_t>() ==
        std::vector<std::int64_t>(2, 5));
  CHECK(g.slice("procs", 1).call_one("add", std::int64_t{-7}).get(30s).item<std::int64_t>() == -2);
  // Several reply parts; several argument parts.
  auto one = g.slice("procs", 0);
  auto parts = one.call_parts("split", Views{BytesView("abc")}, monarch::CallMode::One).get(30s);
  CHECK(parts[0].size() == 3);
  CHECK(parts[0].part(2).str() == "c");
  CHECK(one.call_parts("nparts", Views{BytesView("x"), BytesView(""), BytesView("z")},
                       monarch::CallMode::One)
            .get(30s)[0]
            .part(0)
            .str() == "3");
  // A raising Python endpoint is an error point carrying the traceback.
  auto err = g.call_parts("fail", Views{BytesView("this")}).get(30s);
  CHECK(err.has_errors() && !err[1].ok());
  CHECK(contains(err[1].error(), "ValueError: python says no to this"));
  auto e = THROWS(ActorError, err.check());
  if (e) CHECK(contains(e->what(), "python says no"));
  // Bad type names fail the spawn with Python's reason.
  auto ce = THROWS(ActorError, procs.spawn("bad", "py_actors:Nope"));
  if (ce) CHECK(contains(ce->what(), "Nope"));
  ce = THROWS(ActorError, procs.spawn("bad2", "no_such_module_xyz:Thing"));
  if (ce) CHECK(contains(ce->what(), "No module named"));
  // The actors lived on.
  CHECK(g.call("add", std::int64_t{1}).get(30s).values<std::int64_t>() ==
        (std::vector<std::int64_t>{6, -1}));
  procs.stop().get(30s);
}


void test_views() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"hosts", 2}, {"gpus", 3}});
  auto echo = procs.spawn("e", "Echo");
  // flatten: one dimension, rank r stays rank r.
  auto flat = echo.flatten("all");
  CHECK(flat.shape().labels() == std::vector<std::string>{"all"});
  CHECK(flat.shape().sizes() == std::vector<std::uint64_t>{6});
  CHECK(flat.call("rank").get(30s).values<std::uint64_t>() ==
        (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5}));
  // rename, all at once (a swap).
  auto swapped = echo.rename({{"hosts", "gpus"}, {"gpus", "hosts"}});
  CHECK(swapped.shape().labels() == (std::vector<std::string>{"gpus", "hosts"}));
  CHECK(swapped.call("labels").get(30s)[0].as<std::string>() == "gpus,hosts,");
  // split, with one inferred size; views compose.
  auto split = flat.split("all", {{"a", 3}, {"b", monarch::kInfer}});
  CHECK(split.shape().labels() == (std::vector<std::string>{"a", "b"}));
  CHECK(split.shape().sizes() == (std::vector<std::uint64_t>{3, 2}));
  auto col = split.slice("b", 1);
  CHECK(col.call("rank").get(30s).values<std::uint64_t>() == (std::vector<std::uint64_t>{0, 1, 2}));
  // Proc meshes: the same views; spawning on one.
  auto pflat = procs.flatten("p");
  CHECK(pflat.shape().sizes() == std::vector<std::uint64_t>{6});
  auto psplit = procs.split("gpus", {{"x", 1}, {"y", 3}});
  CHECK(psplit.shape().labels() == (std::vector<std::string>{"hosts", "x", "y"}));
  CHECK(procs.rename({{"gpus", "cpus"}}).shape().labels() ==
        (std::vector<std::string>{"hosts", "cpus"}));
  auto c = pflat.slice("p", 4, monarch::kEnd).spawn("c", "Counter", std::int64_t{2});
  CHECK(c.call("get").get(30s).values<std::int64_t>() == std::vector<std::int64_t>(2, 2));
  // Bad views throw with the library's message.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, flat.split("all", {{"a", 4}, {"b", 2}}));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.rename({{"hosts", "gpus"}}));
  auto e = THROWS(Error, procs.split("nope", {{"a", 1}}));
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT && contains(e->what(), "nope"));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.slice("gpus", 1, 3).flatten("x"));
}

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

void test_rdma() {
  monarch::Runtime rt;
  std::cout << "default backend: " << monarch::default_rdma_backend() << "\n";
  auto ib = monarch::ibverbs_status();
  CHECK(ib.available || !ib.reason.empty());
  auto procs = rt.spawn_procs({{"procs", 2}});
  // An odd size over a few MiB: pieces, stripes and tails all matter.
  const std::size_t n = (3u << 20) + 13;
  auto store = procs.slice("procs", 0).spawn("store", "Store", std::uint64_t{n});
  auto peer = procs.slice("procs", 1).spawn("peer", "Peer");
  auto desc = store.call_one("buffer").get(30s).item<monarch::Bytes>();
  // The controller (another proc) reads it, byte-exact.
  auto buf = monarch::RdmaBuffer::from_bytes(desc);
  CHECK(buf.size() == n);
  CHECK(buf.is_registered());
  std::vector<std::uint8_t> dst(n, 0);
  std::string backend = buf.read_into(dst).get(60s);
  std::cout << "controller read: " << backend << "\n";
  CHECK(backend == buf.backend());
  bool exact = true;
  for (std::size_t i = 0; i < n; ++i) exact = exact && dst[i] == pattern(i, 1);
  CHECK(exact);
  // A range at an offset.
  std::vector<std::uint8_t> tail(100);
  buf.read_into(tail, n - 100).get(60s);
  for (std::size_t i = 0; i < 100; ++i) exact = exact && tail[i] == pattern(n - 100 + i, 1);
  CHECK(exact);
  // The controller writes into it; the owner sees exactly that.
  std::vector<std::uint8_t> src(70000);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = pattern(i, 2);
  buf.write_from(src, 5000).get(60s);
  auto contents = store.call_one("contents").get(30s).item<std::vector<std::uint8_t>>();
  CHECK(contents.size() == n);
  std::vector<std::uint8_t> expect(n);
  for (std::size_t i = 0; i < n; ++i) expect[i] = pattern(i, 1);
  std::copy(src.begin(), src.end(), expect.begin() + 5000);
  CHECK(contents == expect);
  // An actor in a third proc reads and writes it through the descriptor
  // it got in a message.
  CHECK(peer.call_one("pull", buf).get(60s).item<std::vector<std::uint8_t>>() == expect);
  std::vector<std::uint8_t> head(4096, 0xab);
  CHECK(!peer.call_one("push", buf, head, std::uint64_t{0}).get(60s).item<std::string>().empty());
  std::copy(head.begin(), head.end(), expect.begin());
  CHECK(store.call_one("contents").get(30s).item<std::vector<std::uint8_t>>() == expect);
  // A Transfer destroyed before completing waits for it: the bytes are there.
  std::vector<std::uint8_t> waited(n, 0);
  { auto t = buf.read_into(waited); }
  CHECK(waited == expect);
  // Size mismatches throw monarch::Error with the sizes in the message.
  std::vector<std::uint8_t> big(n + 1);
  auto e = THROWS(Error, buf.read_into(big));
  if (e) {
    std::cout << "oversized read: " << e->what() << "\n";
    CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT);
    CHECK(contains(e->what(), std::to_string(n)));
  }
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, buf.write_from(src, n - 10));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, buf.read_into(nullptr, 10));
  // A read-only buffer refuses writes.
  auto ro = procs.slice("procs", 1).spawn("ro", "Store", std::uint64_t{64}, std::uint8_t{1});
  auto robuf = monarch::RdmaBuffer::from_bytes(ro.call_one("buffer").get(30s).item<monarch::Bytes>());
  std::vector<std::uint8_t> small(64);
  robuf.read_into(small).get(60s);
  CHECK(small[63] == pattern(63, 1));
  THROWS(Error, robuf.write_from(small).get(60s));
  // Malformed descriptors.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::RdmaBuffer::from_bytes(monarch::BytesView("nope")));
  // Use after drop: this handle refuses everything; the owner released it
  // (one reader), so a fresh handle's transfers fail too.
  buf.drop();
  CHECK(!buf.is_registered());
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, buf.read_into(dst).get(60s));
  THROWS(Error, buf.to_bytes());
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, buf.drop());
  bool released = false;
  for (int i = 0; i < 300 && !released; ++i) {
    released = !store.call_one("registered").get(30s).item<bool>();
    if (!released) std::this_thread::sleep_for(100ms);
  }
  CHECK(released);
  auto again = monarch::RdmaBuffer::from_bytes(desc);
  e = THROWS(Error, again.read_into(small).get(60s));
  if (e) {
    std::cout << "read of a released buffer: " << e->what() << "\n";
    CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT);
  }
  // The owner drops its own buffer: readers are refused.
  ro.call_one("drop").get(30s).check();
  THROWS(Error, robuf.read_into(small).get(60s));
  // Buffers this process owns: read in place; freed handles are rejected.
  std::vector<std::uint64_t> mine{1, 2, 3, 4};
  {
    auto own = monarch::RdmaBuffer::register_memory(mine);
    auto local = monarch::RdmaBuffer::from_bytes(own.to_bytes());
    std::vector<std::uint64_t> out(4);
    local.read_into(out).get(60s);
    CHECK(out == mine);
    check_freed_handle<monarch::RdmaBuffer>(local.release(), monarch_rdma_buffer_free,
                                            [](monarch::RdmaBuffer& b) { b.size(); });
    monarch::RdmaBuffer moved = std::move(own);
    THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, own.read_into(out));
    CHECK(moved.is_registered());
  }
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::RdmaBuffer::register_memory(nullptr, 0));
  procs.stop().get(30s);
}

void test_slurm() {
  // Only on the SLURM test cluster (make test-slurm runs this with
  // MONARCH_SLURM_TEST=1 inside scripts/slurm/with-cluster.sh).
  if (setting("MONARCH_SLURM_TEST", "") != "1") {
    std::cout << "slurm: skipped (needs the SLURM test cluster: make test-slurm)\n";
    std::exit(kSkip);
  }
  monarch::Runtime rt;
  monarch::SlurmOptions opts;
  opts.nodes = 2;
  opts.agent_argv = {MONARCH_CLI, "host", "--listen", "127.0.0.1:0"};
  opts.timeout = 120s;
  auto job = monarch::SlurmJob::start(rt, opts);
  CHECK(!job.id().empty());
  auto hosts = job.host_mesh();
  CHECK(hosts.shape().labels() == std::vector<std::string>{"hosts"});
  CHECK(hosts.shape().numel() == 2);
  auto procs = hosts.spawn_procs({{"gpus", 2}});
  CHECK(procs.shape().labels() == (std::vector<std::string>{"hosts", "gpus"}));
  auto echo = procs.spawn("e", "Echo");
  CHECK(echo.call("rank").get(60s).values<std::uint64_t>() ==
        (std::vector<std::uint64_t>{0, 1, 2, 3}));
  CHECK(echo.slice("hosts", 1).call("labels").get(60s)[0].as<std::string>() == "gpus,");
  procs.stop().get(60s);
  job.stop();
  job.stop();  // idempotent
  // A refused allocation: srun's message in the Error.
  opts.nodes = 3;
  opts.timeout = 60s;
  auto e = THROWS(Error, monarch::SlurmJob::start(rt, opts));
  if (e) {
    std::cout << "refused: " << e->what() << "\n";
    CHECK(e->status() == MONARCH_ERR_PROC_FAILED);
  }
}

void test_handles() {
  // Handles of the newer types used after free (or never valid) are
  // rejected: the wrappers throw Error(MONARCH_ERR_INVALID_HANDLE).
  monarch::Runtime rt;
  auto rx = rt.open_port();
  monarch::PortReceiver moved = std::move(rx);
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, rx.recv());
  check_freed_handle<monarch::PortReceiver>(moved.release(), monarch_port_receiver_free,
                                            [](monarch::PortReceiver& r) { r.port(); });
  // Wrong kind: a runtime passed as a port receiver.
  monarch::PortReceiver wrong(reinterpret_cast<monarch_port_receiver*>(rt.handle()));
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, wrong.recv());
  wrong.release();
  // RDMA buffers and SLURM jobs (none started: no cluster needed).
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, monarch::RdmaBuffer().size());
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, monarch::SlurmJob().host_mesh());
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, monarch::SlurmJob().id());
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, monarch::SlurmJob().stop());
  CHECK(monarch_slurm_job_free(reinterpret_cast<monarch_slurm_job*>(rt.handle())) ==
        MONARCH_ERR_INVALID_HANDLE);
  monarch::SlurmOptions none;  // no agent command: refused before srun runs
  auto e = THROWS(Error, monarch::SlurmJob::start(rt, none));
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT && contains(e->what(), "agent_argv"));
  // Events: a freed event handle.
  CHECK(monarch_event_take_port(nullptr, nullptr, nullptr) == MONARCH_ERR_INVALID_HANDLE);
  // set_owner: the top level, and a bad handle.
  rt.set_owner("");
  CHECK(monarch_runtime_set_owner(nullptr, "") == MONARCH_ERR_INVALID_HANDLE);
  // After shutdown, the process has no runtime: ports say so.
  rt.shutdown();
  THROWS_STATUS(MONARCH_ERR_STOPPED, monarch::PortReceiver::open());
}


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

const std::map<std::string, std::function<void()>> tests = {
    {"lifecycle", test_lifecycle}, {"calls", test_calls},           {"slicing", test_slicing},
    {"errors", test_errors},       {"crash", test_crash},           {"after_free", test_after_free},
    {"local_actors", test_local_actors}, {"plugin", test_plugin},
    {"python_actors", test_python_actors},
    {"hosts", test_hosts},         {"views", test_views},           {"ports", test_ports},
    {"rdma", test_rdma},           {"slurm", test_slurm},           {"handles", test_handles},
    {"actor_supervise", test_actor_supervise},
};

}  // namespace

int main(int argc, char** argv) {
  monarch::serve_if_worker(argc, argv);
  if (argc < 2) {
    for (auto& t : tests) std::cout << t.first << "\n";
    return 0;
  }
  auto it = tests.find(argv[1]);
  if (it == tests.end()) {
    std::cerr << "unknown test " << argv[1] << "\n";
    return 2;
  }
  try {
    it->second();
  } catch (const std::exception& e) {
    std::cerr << "uncaught exception: " << e.what() << "\n";
    ++failures;
  }
  std::cout << argv[1] << ": " << (failures ? "FAILED" : "ok") << " (" << failures
            << " failures)\n";
  return failures ? 1 : 0;
}
