// End-to-end tests of the C++ binding (monarch/monarch.hpp). The binary is
// its own worker: procs it spawns re-run it, and serve_if_worker hosts the
// test actors there. The cases live in test_*.cpp (listed in suites.hpp).
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

#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <string>

#include "check.hpp"
#include "suites.hpp"
#include "test_actors.hpp"

MONARCH_ACTOR(test_actors::Counter, "Counter");
MONARCH_ACTOR(test_actors::Echo, "Echo");

namespace {

using namespace cpp_test;

const std::map<std::string, std::function<void()>> tests = {
    {"lifecycle", test_lifecycle}, {"calls", test_calls},           {"slicing", test_slicing},
    {"errors", test_errors},       {"crash", test_crash},           {"after_free", test_after_free},
    {"local_actors", test_local_actors}, {"plugin", test_plugin},
    {"python_actors", test_python_actors},
    {"hosts", test_hosts},         {"views", test_views},           {"ports", test_ports},
    {"rdma", test_rdma},           {"slurm", test_slurm},           {"handles", test_handles},
    {"actor_supervise", test_actor_supervise}, {"schema", test_schema},
    {"undeliverable_reply", test_undeliverable_reply},
    {"actor_workers", test_actor_workers},
    {"introspect", test_introspect},
    {"progress", test_progress},
    {"tensor", test_tensor},
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
