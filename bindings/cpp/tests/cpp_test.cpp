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
#include <string>

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

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

using namespace std::chrono_literals;
using monarch::ActorError;
using monarch::Error;

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
  auto e = THROWS(Error, echo.slice("nope", 0));
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT);
  e = THROWS(Error, echo.slice("hosts", 7));
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT);
  e = THROWS(Error, echo.slice("hosts", 0, 2, 0));
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT);
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
  auto e = THROWS(Error, echo.call_one("rank"));
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT);
  // get(timeout) throws a timeout; the future stays usable.
  auto slow = echo.slice("procs", 0).call_one("sleep_ms", std::int64_t{500});
  e = THROWS(Error, slow.get(1ms));
  if (e) {
    CHECK(e->status() == MONARCH_ERR_TIMEOUT);
    CHECK(e->is_timeout());
  }
  CHECK(slow.get(30s).size() == 1);
  // Taking a result twice.
  e = THROWS(Error, slow.get());
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT);
  // Bad bootstrap environment.
  monarch::ProcOptions bad;
  bad.env = {"NOEQUALS"};
  e = THROWS(Error, rt.spawn_procs({{"p", 1}}, bad));
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT);
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
  auto e = THROWS(Error, echo.call("rank"));
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_HANDLE);
  // A raw handle freed twice, or used after free, is rejected.
  monarch_actor_mesh* raw = moved.slice("procs", 0).release();
  CHECK(monarch_actor_mesh_free(raw) == MONARCH_OK);
  CHECK(monarch_actor_mesh_free(raw) == MONARCH_ERR_INVALID_HANDLE);
  monarch::ActorMesh stale(raw);  // adopts a freed handle
  e = THROWS(Error, stale.call("rank"));
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_HANDLE);
  stale.release();
  // A future whose handle was freed.
  monarch::Future f = moved.call("rank");
  monarch_future* rf = f.release();
  CHECK(monarch_future_free(rf) == MONARCH_OK);
  monarch::Future sf(rf);
  e = THROWS(Error, sf.get());
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_HANDLE);
  sf.release();
  // Wrong kind: a proc mesh handle passed as an actor mesh.
  monarch::ActorMesh wrong(reinterpret_cast<monarch_actor_mesh*>(procs.handle()));
  e = THROWS(Error, wrong.call("rank"));
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_HANDLE);
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
  CHECK(f.get().item<std::int64_t>() == 10);
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

const std::map<std::string, std::function<void()>> tests = {
    {"lifecycle", test_lifecycle}, {"calls", test_calls},           {"slicing", test_slicing},
    {"errors", test_errors},       {"crash", test_crash},           {"after_free", test_after_free},
    {"local_actors", test_local_actors}, {"plugin", test_plugin},
    {"python_actors", test_python_actors},
    {"hosts", test_hosts},
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
