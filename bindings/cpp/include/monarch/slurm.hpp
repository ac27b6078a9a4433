// monarch/slurm.hpp: monarch::SlurmJob, `monarch host` agents started on the
// nodes of a SLURM allocation and attached as a host mesh (docs/slurm.md).
#ifndef MONARCH_SLURM_HPP
#define MONARCH_SLURM_HPP

#include <monarch.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <monarch/codec.hpp>
#include <monarch/detail/marshal.hpp>
#include <monarch/error.hpp>
#include <monarch/handle.hpp>
#include <monarch/host.hpp>
#include <monarch/runtime.hpp>

namespace monarch {

/// Options of SlurmJob::start (see monarch_slurm_job_start, docs/slurm.md).
struct SlurmOptions {
  /// Nodes: 0 = every node of the current allocation (SLURM_JOB_ID set);
  /// outside an allocation, srun asks for a new one of this many (> 0).
  std::size_t nodes = 0;
  /// The agent command, valid on every node, e.g.
  /// {"/path/to/monarch", "host", "--listen", "0.0.0.0:0"} (required).
  std::vector<std::string> agent_argv;
  /// More srun options, e.g. "--partition=gpu", "--time=10".
  std::vector<std::string> srun_args;
  /// Bound on the wait for every agent, queueing included (< 0: 300 s).
  std::chrono::milliseconds timeout{-1};
};

/// A SLURM job step running one `monarch host` agent per node, attached as
/// a host mesh. Destroying it (or stop()) stops the agents, their procs
/// and the step (and the allocation srun made).
class SlurmJob {
 public:
  SlurmJob() = default;
  /// Run srun and wait until every agent is ready and attached. Throws
  /// Error with srun's and the agents' last output on failure (no srun:
  /// MONARCH_ERR_IO; refused allocation or a dead agent:
  /// MONARCH_ERR_PROC_FAILED; out of time: MONARCH_ERR_TIMEOUT).
  static SlurmJob start(const Runtime& rt, const SlurmOptions& opts) {
    auto argv = detail::c_strs(opts.agent_argv);
    auto args = detail::c_strs(opts.srun_args);
    monarch_slurm_job* job = nullptr;
    detail::check(monarch_slurm_job_start(rt.handle(), opts.nodes, argv.data(), argv.size(),
                                          args.empty() ? nullptr : args.data(), args.size(),
                                          static_cast<std::int64_t>(opts.timeout.count()), &job));
    return SlurmJob(&rt, job);
  }
  /// The agents as a host mesh (dimension `hosts`, in node order); it
  /// works while the job runs.
  HostMesh host_mesh() const {
    monarch_host_mesh* hm = nullptr;
    detail::check(monarch_slurm_job_host_mesh(h_.get(), &hm));
    return HostMesh(rt_, hm);
  }
  /// The SLURM job id ("" if srun did not report it).
  std::string id() const {
    auto* h = h_.get();
    Bytes b = detail::owned_bytes(
        [h](std::uint8_t** p, std::size_t* n) { return monarch_slurm_job_id(h, p, n); });
    return std::string(b.begin(), b.end());
  }
  /// Stop the agents and their procs and end the step; blocks until srun
  /// exited. Idempotent.
  void stop() const { detail::check(monarch_slurm_job_stop(h_.get())); }

  monarch_slurm_job* handle() const { return h_.get(); }
  monarch_slurm_job* release() { return h_.release(); }

 private:
  SlurmJob(const Runtime* rt, monarch_slurm_job* h) : rt_(rt), h_(h) {}
  const Runtime* rt_ = nullptr;
  detail::Handle<monarch_slurm_job, monarch_slurm_job_free> h_;
};

}  // namespace monarch

#endif  // MONARCH_SLURM_HPP
