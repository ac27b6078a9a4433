// cpp_test cases whose procs are not this binary: plugin actors in
// `monarch worker --plugin`, Python actors, `monarch host` agents, SLURM.
#include <monarch/monarch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.hpp"
#include "suites.hpp"

using namespace std::chrono_literals;

namespace {

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

}  // namespace

namespace cpp_test {

using monarch::ActorError;
using monarch::Error;

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

}  // namespace cpp_test
