// monarch/host.hpp: monarch::HostMesh, the hosts procs are started on (this
// machine, or attached `monarch host` agents; docs/hosts.md).
#ifndef MONARCH_HOST_HPP
#define MONARCH_HOST_HPP

#include <monarch.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <monarch/detail/marshal.hpp>
#include <monarch/error.hpp>
#include <monarch/handle.hpp>
#include <monarch/mesh.hpp>
#include <monarch/runtime.hpp>
#include <monarch/shape.hpp>

namespace monarch {

/// The hosts procs are started on: this machine (`local`), or running
/// `monarch host` agents (`attach`, one dimension `hosts`). Slices share
/// the agents. Procs started through an attached mesh keep running when
/// the HostMesh is destroyed; stop them with ProcMesh::stop.
class HostMesh {
 public:
  /// This machine only: spawn_procs starts local procs (shape {hosts: 1}).
  static HostMesh local(const Runtime& rt) { return HostMesh(rt); }
  /// Attach the agents at `addrs` ("IP:PORT" as printed after
  /// MONARCH_HOST_READY). The agents must share this runtime's job secret
  /// (Runtime::job_token()). Blocks until every agent answered.
  static HostMesh attach(const Runtime& rt, const std::vector<std::string>& addrs);

  Shape shape() const {
    if (!h_) return Shape({"hosts"}, {1});
    auto* h = h_.get();
    return detail::owned_shape(
        [h](std::uint8_t** b, std::size_t* n) { return monarch_host_mesh_shape(h, b, n); });
  }
  /// Fix dimension `label` at `index` (attached meshes only).
  HostMesh slice(const std::string& label, std::size_t index) const {
    monarch_host_mesh* out = nullptr;
    detail::check(monarch_host_mesh_slice_index(attached(), label.c_str(), index, &out));
    return HostMesh(rt_, out);
  }
  /// Keep `label` narrowed to start..stop by step (attached meshes only).
  HostMesh slice(const std::string& label, std::int64_t start, std::int64_t stop,
                 std::int64_t step = 1) const {
    monarch_host_mesh* out = nullptr;
    detail::check(
        monarch_host_mesh_slice_range(attached(), label.c_str(), start, stop, step, &out));
    return HostMesh(rt_, out);
  }
  /// Procs per host: `dims` are the per-host dimensions; the result has
  /// the host mesh's dimensions followed by `dims`. On attached hosts the
  /// default argv (this binary's path) must exist on every host.
  ProcMesh spawn_procs(const Dims& dims, const ProcOptions& opts = {}) const;

 private:
  friend class SlurmJob;
  explicit HostMesh(const Runtime& rt) : rt_(&rt) {}
  HostMesh(const Runtime* rt, monarch_host_mesh* h) : rt_(rt), h_(h) {}
  monarch_host_mesh* attached() const {
    if (!h_)
      throw Error(MONARCH_ERR_INVALID_ARGUMENT,
                  "a local HostMesh cannot be sliced: attach agents for several hosts");
    return h_.get();
  }
  const Runtime* rt_;
  detail::Handle<monarch_host_mesh, monarch_host_mesh_free> h_;
};

inline HostMesh HostMesh::attach(const Runtime& rt, const std::vector<std::string>& addrs) {
  std::vector<const char*> c;
  for (auto& a : addrs) c.push_back(a.c_str());
  monarch_host_mesh* out = nullptr;
  detail::check(monarch_host_mesh_attach(rt.handle(), c.data(), c.size(), &out));
  return HostMesh(&rt, out);
}

inline ProcMesh HostMesh::spawn_procs(const Dims& dims, const ProcOptions& opts) const {
  if (!h_) return rt_->spawn_procs(dims, opts);
  return detail::spawn_with(dims, opts, [this](auto... args) {
    return monarch_host_mesh_spawn_procs(h_.get(), args...);
  });
}

}  // namespace monarch

#endif  // MONARCH_HOST_HPP
