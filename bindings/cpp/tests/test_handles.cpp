// cpp_test cases of handles: moved-from owners, handles used after free or
// of the wrong kind, use after the runtime was shut down.
#include <monarch/monarch.hpp>

#include <chrono>
#include <iostream>
#include <string>

#include "check.hpp"
#include "suites.hpp"

using namespace std::chrono_literals;

namespace cpp_test {

using monarch::ActorError;
using monarch::Error;

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

void test_handles() {
  // Status names come from the library, without its prefix.
  CHECK(std::string(monarch::status_name(MONARCH_OK)) == "OK");
  CHECK(std::string(monarch::status_name(MONARCH_ERR_TIMEOUT)) == "TIMEOUT");
  CHECK(std::string(monarch::status_name(MONARCH_ERR_INVALID_HANDLE)) == "INVALID_HANDLE");
  CHECK(std::string(monarch::status_name(static_cast<monarch_status>(9999))) == "UNKNOWN");
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
  // Zygotes: no template in a process with a runtime; a command that
  // cannot serve as one (it exits at once) is accepted and costs nothing.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::Runtime::serve_as_zygote(0));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, rt.warm_zygote(monarch::ProcOptions{}));
  monarch::ProcOptions not_a_zygote;
  not_a_zygote.argv = {"/bin/true"};
  not_a_zygote.env = {"MONARCH_ZYGOTE=1"};
  rt.warm_zygote(not_a_zygote);
  // set_owner: the top level, and a bad handle.
  rt.set_owner("");
  CHECK(monarch_runtime_set_owner(nullptr, "") == MONARCH_ERR_INVALID_HANDLE);
  // After shutdown, the process has no runtime: ports say so.
  rt.shutdown();
  THROWS_STATUS(MONARCH_ERR_STOPPED, monarch::PortReceiver::open());
}

}  // namespace cpp_test
