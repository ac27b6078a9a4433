// monarch/mesh.hpp: meshes and calls: monarch::ProcMesh (procs),
// monarch::ActorMesh (actors on them; call, broadcast, send, stream),
// their views (slice, flatten, rename, split), and monarch::spawn_procs with
// this process's runtime.
#ifndef MONARCH_MESH_HPP
#define MONARCH_MESH_HPP

#include <monarch.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <monarch/codec.hpp>
#include <monarch/detail/marshal.hpp>
#include <monarch/error.hpp>
#include <monarch/handle.hpp>
#include <monarch/port.hpp>
#include <monarch/process.hpp>
#include <monarch/shape.hpp>
#include <monarch/value.hpp>

namespace monarch {

/// How a call is answered (MONARCH_CALL_*).
enum class CallMode : std::uint32_t {
  All = MONARCH_CALL_ALL,
  One = MONARCH_CALL_ONE,
  Choose = MONARCH_CALL_CHOOSE,
  Broadcast = MONARCH_CALL_BROADCAST,
};

/// `stop` for `slice(label, start, stop)` meaning "to the end".
constexpr std::int64_t kEnd = MONARCH_SLICE_END;
/// A size for `split` meaning "infer it from the dimension and the others".
constexpr std::size_t kInfer = MONARCH_SPLIT_INFER;

/// Named dimensions and sizes of a mesh to create, e.g. {{"hosts", 2}, {"gpus", 4}}.
using Dims = std::vector<std::pair<std::string, std::size_t>>;
/// Dimension renames for `rename`: {{"from", "to"}, ...}.
using Renames = std::vector<std::pair<std::string, std::string>>;

namespace detail {
// The C arrays of `rename` / `split`, and the call.
template <class H, class F>
H* renamed(const Renames& names, F&& f) {
  std::vector<const char*> from, to;
  for (auto& n : names) {
    from.push_back(n.first.c_str());
    to.push_back(n.second.c_str());
  }
  H* out = nullptr;
  check(f(from.data(), to.data(), names.size(), &out));
  return out;
}
template <class H, class F>
H* split_into(const Dims& dims, F&& f) {
  std::vector<const char*> names;
  std::vector<std::size_t> sizes;
  for (auto& d : dims) {
    names.push_back(d.first.c_str());
    sizes.push_back(d.second);
  }
  H* out = nullptr;
  check(f(names.data(), sizes.data(), dims.size(), &out));
  return out;
}
}  // namespace detail

// Only named here: monarch/runtime.hpp (which includes this header) defines
// Runtime, ActorMesh::from_ref and ProcMesh::from_ref(const Runtime&, BytesView).
class Runtime;

/// An n-d array of actors (or a slice of one).
class ActorMesh {
 public:
  ActorMesh() = default;
  explicit ActorMesh(monarch_actor_mesh* am) : h_(am) {}

  Shape shape() const {
    auto* h = h_.get();
    return detail::owned_shape([h](std::uint8_t** b, std::size_t* n) { return monarch_actor_mesh_shape(h, b, n); });
  }
  /// Fix dimension `label` at `index` (the dimension goes away).
  ActorMesh slice(const std::string& label, std::size_t index) const {
    monarch_actor_mesh* out = nullptr;
    detail::check(monarch_actor_mesh_slice_index(h_.get(), label.c_str(), index, &out));
    return ActorMesh(out);
  }
  /// Narrow dimension `label` to start..stop by step (negative: from the end).
  ActorMesh slice(const std::string& label, std::int64_t start, std::int64_t stop,
                  std::int64_t step = 1) const {
    monarch_actor_mesh* out = nullptr;
    detail::check(
        monarch_actor_mesh_slice_range(h_.get(), label.c_str(), start, stop, step, &out));
    return ActorMesh(out);
  }

  /// Merge every dimension into one named `label`, row-major (rank r stays
  /// rank r). Needs evenly spaced points (see docs/c-abi.md "Mesh geometry").
  ActorMesh flatten(const std::string& label) const {
    monarch_actor_mesh* out = nullptr;
    detail::check(monarch_actor_mesh_flatten(h_.get(), label.c_str(), &out));
    return ActorMesh(out);
  }
  /// Rename dimensions, all at once (so two can swap names).
  ActorMesh rename(const Renames& names) const {
    auto* h = h_.get();
    return ActorMesh(detail::renamed<monarch_actor_mesh>(names, [h](auto... a) {
      return monarch_actor_mesh_rename(h, a...);
    }));
  }
  /// Replace dimension `label`, in place, by `dims` (outermost first); one
  /// size may be kInfer. Ranks are unchanged.
  ActorMesh split(const std::string& label, const Dims& dims) const {
    auto* h = h_.get();
    return ActorMesh(detail::split_into<monarch_actor_mesh>(dims, [h, &label](auto... a) {
      return monarch_actor_mesh_split(h, label.c_str(), a...);
    }));
  }

  /// Call `method` on every actor; each argument is one part.
  template <class... A>
  Future call(const std::string& method, const A&... args) const {
    return call_parts(method, encode_all(args...), CallMode::All);
  }
  /// Call the mesh's only actor (error if it has several).
  template <class... A>
  Future call_one(const std::string& method, const A&... args) const {
    return call_parts(method, encode_all(args...), CallMode::One);
  }
  /// Call one actor chosen by the runtime.
  template <class... A>
  Future choose(const std::string& method, const A&... args) const {
    return call_parts(method, encode_all(args...), CallMode::Choose);
  }
  /// Send to every actor; nobody answers.
  template <class... A>
  void broadcast(const std::string& method, const A&... args) const {
    call_parts(method, encode_all(args...), CallMode::Broadcast);
  }
  /// Call with raw parts (borrowed for the call only).
  Future call_parts(const std::string& method, const std::vector<BytesView>& parts,
                    CallMode mode = CallMode::All) const {
    auto c = detail::to_c(parts);
    monarch_future* f = nullptr;
    detail::check(monarch_actor_mesh_call(h_.get(), method.c_str(), c.data(), c.size(),
                                          static_cast<std::uint32_t>(mode),
                                          mode == CallMode::Broadcast ? nullptr : &f));
    return Future(f);
  }
  Future call_parts(const std::string& method, const Parts& parts,
                    CallMode mode = CallMode::All) const {
    return call_parts(method, std::vector<BytesView>(parts.begin(), parts.end()), mode);
  }
  /// Call `method` on every actor with the replies sent to `port` instead
  /// of a future (point r of the mesh answers to slot r); each argument
  /// is one part.
  template <class... A>
  void send(const std::string& method, const Port& port, const A&... args) const {
    send_parts(method, encode_all(args...), port, CallMode::All);
  }
  /// As send, with raw parts; `mode` is CallMode::All or CallMode::Choose
  /// (one actor chosen by the runtime answers).
  void send_parts(const std::string& method, const std::vector<BytesView>& parts, const Port& port,
                  CallMode mode = CallMode::All) const {
    auto c = detail::to_c(parts);
    detail::check(monarch_actor_mesh_send(h_.get(), method.c_str(), c.data(), c.size(),
                                          port.bytes().data(), port.bytes().size(),
                                          static_cast<std::uint32_t>(mode)));
  }
  void send_parts(const std::string& method, const Parts& parts, const Port& port,
                  CallMode mode = CallMode::All) const {
    send_parts(method, std::vector<BytesView>(parts.begin(), parts.end()), port, mode);
  }
  /// Call `method` on every actor and stream the replies: each recv() of
  /// the receiver yields one reply (a one-point ValueMesh) in the order
  /// they arrive, one per actor (an actor whose proc is lost yields an
  /// error point); after the last, the port is closed.
  template <class... A>
  PortReceiver stream(const std::string& method, const A&... args) const {
    return stream_parts(method, encode_all(args...));
  }
  PortReceiver stream_parts(const std::string& method, const std::vector<BytesView>& parts) const {
    auto c = detail::to_c(parts);
    monarch_port_receiver* rx = nullptr;
    detail::check(monarch_actor_mesh_stream(h_.get(), method.c_str(), c.data(), c.size(), &rx));
    return PortReceiver(rx);
  }
  PortReceiver stream_parts(const std::string& method, const Parts& parts) const {
    return stream_parts(method, std::vector<BytesView>(parts.begin(), parts.end()));
  }
  /// Stop the actors (their procs keep running).
  Future stop() const {
    monarch_future* f = nullptr;
    detail::check(monarch_actor_mesh_stop(h_.get(), &f));
    return Future(f);
  }
  /// A serialized reference, to send to other procs (see from_ref).
  Bytes to_ref() const {
    auto* h = h_.get();
    return detail::owned_bytes(
        [h](std::uint8_t** b, std::size_t* n) { return monarch_actor_mesh_to_ref(h, b, n); });
  }
  /// Rebuild from to_ref() bytes (made in any proc of the job) with `rt`.
  static ActorMesh from_ref(const Runtime& rt, BytesView ref);
  /// Rebuild from to_ref() bytes with the process's runtime (e.g. in an
  /// actor that received a mesh reference in a message).
  static ActorMesh from_ref(BytesView ref) {
    monarch_actor_mesh* am = nullptr;
    detail::check(monarch_actor_mesh_from_ref(current_runtime(), ref.data, ref.size, &am));
    return ActorMesh(am);
  }

  monarch_actor_mesh* handle() const { return h_.get(); }
  monarch_actor_mesh* release() { return h_.release(); }

 private:
  template <class... A>
  static Parts encode_all(const A&... args) {
    Parts p;
    p.reserve(sizeof...(A));
    (p.push_back(encode(args)), ...);
    return p;
  }
  detail::Handle<monarch_actor_mesh, monarch_actor_mesh_free> h_;
};

/// An n-d array of procs (or a slice of one).
class ProcMesh {
 public:
  ProcMesh() = default;
  explicit ProcMesh(monarch_proc_mesh* pm) : h_(pm) {}

  Shape shape() const {
    auto* h = h_.get();
    return detail::owned_shape([h](std::uint8_t** b, std::size_t* n) { return monarch_proc_mesh_shape(h, b, n); });
  }
  ProcMesh slice(const std::string& label, std::size_t index) const {
    monarch_proc_mesh* out = nullptr;
    detail::check(monarch_proc_mesh_slice_index(h_.get(), label.c_str(), index, &out));
    return ProcMesh(out);
  }
  ProcMesh slice(const std::string& label, std::int64_t start, std::int64_t stop,
                 std::int64_t step = 1) const {
    monarch_proc_mesh* out = nullptr;
    detail::check(
        monarch_proc_mesh_slice_range(h_.get(), label.c_str(), start, stop, step, &out));
    return ProcMesh(out);
  }

  /// Merge every dimension into one named `label`, row-major (rank r stays
  /// rank r). Needs evenly spaced points (see docs/c-abi.md "Mesh geometry").
  ProcMesh flatten(const std::string& label) const {
    monarch_proc_mesh* out = nullptr;
    detail::check(monarch_proc_mesh_flatten(h_.get(), label.c_str(), &out));
    return ProcMesh(out);
  }
  /// Rename dimensions, all at once (so two can swap names).
  ProcMesh rename(const Renames& names) const {
    auto* h = h_.get();
    return ProcMesh(detail::renamed<monarch_proc_mesh>(names, [h](auto... a) {
      return monarch_proc_mesh_rename(h, a...);
    }));
  }
  /// Replace dimension `label`, in place, by `dims` (outermost first); one
  /// size may be kInfer. Ranks are unchanged.
  ProcMesh split(const std::string& label, const Dims& dims) const {
    auto* h = h_.get();
    return ProcMesh(detail::split_into<monarch_proc_mesh>(dims, [h, &label](auto... a) {
      return monarch_proc_mesh_split(h, label.c_str(), a...);
    }));
  }

  /// Spawn actor `name` of `type` on every proc and return the mesh with
  /// the future of the constructors' outcomes (does not wait).
  std::pair<ActorMesh, Future> spawn_async(const std::string& name, const std::string& type,
                                           const std::vector<BytesView>& args = {}) const {
    auto c = detail::to_c(args);
    monarch_actor_mesh* am = nullptr;
    monarch_future* ready = nullptr;
    detail::check(monarch_actor_mesh_spawn(h_.get(), name.c_str(), type.c_str(), c.data(),
                                           c.size(), &am, &ready));
    return {ActorMesh(am), Future(ready)};
  }
  /// Spawn and wait for every constructor; throws ActorError if one failed.
  /// Each argument is one part.
  template <class... A>
  ActorMesh spawn(const std::string& name, const std::string& type, const A&... args) const {
    Parts p;
    (p.push_back(encode(args)), ...);
    auto [mesh, ready] = spawn_async(name, type, std::vector<BytesView>(p.begin(), p.end()));
    ready.get().check();
    return std::move(mesh);
  }
  /// Stop the procs; the future completes when all have exited.
  Future stop() const {
    monarch_future* f = nullptr;
    detail::check(monarch_proc_mesh_stop(h_.get(), &f));
    return Future(f);
  }
  /// A serialized reference, to send to other procs, which can spawn
  /// actors on these procs (see from_ref); they cannot stop them.
  Bytes to_ref() const {
    auto* h = h_.get();
    return detail::owned_bytes(
        [h](std::uint8_t** b, std::size_t* n) { return monarch_proc_mesh_to_ref(h, b, n); });
  }
  /// Rebuild from to_ref() bytes (made in any proc of the job) with `rt`.
  static ProcMesh from_ref(const Runtime& rt, BytesView ref);
  /// Rebuild from to_ref() bytes with the process's runtime (e.g. in an
  /// actor that received a proc mesh reference in a message).
  static ProcMesh from_ref(BytesView ref) {
    monarch_proc_mesh* pm = nullptr;
    detail::check(monarch_proc_mesh_from_ref(current_runtime(), ref.data, ref.size, &pm));
    return ProcMesh(pm);
  }

  monarch_proc_mesh* handle() const { return h_.get(); }
  monarch_proc_mesh* release() { return h_.release(); }

 private:
  detail::Handle<monarch_proc_mesh, monarch_proc_mesh_free> h_;
};

/// Options of Runtime::spawn_procs.
struct ProcOptions {
  /// Bootstrap command; empty: this binary (which must call serve_if_worker).
  std::vector<std::string> argv;
  /// Extra environment for the procs, "NAME=value".
  std::vector<std::string> env;
};

namespace detail {
/// Marshal `dims` and `opts` (argv defaulting to this binary) into C arrays
/// and call `spawn(labels, sizes, ndim, argv, argc, env, nenv, &out)`.
template <class F>
ProcMesh spawn_with(const Dims& dims, const ProcOptions& opts, F&& spawn) {
  std::vector<const char*> labels;
  std::vector<std::size_t> sizes;
  for (auto& d : dims) {
    labels.push_back(d.first.c_str());
    sizes.push_back(d.second);
  }
  std::vector<std::string> argv = opts.argv;
  if (argv.empty()) argv.push_back(self_exe());
  std::vector<const char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.c_str());
  for (auto& e : opts.env) cenv.push_back(e.c_str());
  monarch_proc_mesh* pm = nullptr;
  check(spawn(labels.data(), sizes.data(), dims.size(), cargv.data(), cargv.size(),
              cenv.empty() ? nullptr : cenv.data(), cenv.size(), &pm));
  return ProcMesh(pm);
}
}  // namespace detail

/// Start procs with the process's runtime (as Runtime::spawn_procs), e.g.
/// from an actor: the mesh is then owned by that actor, whose
/// Actor::supervise hears of its failures.
inline ProcMesh spawn_procs(const Dims& dims, const ProcOptions& opts = {}) {
  monarch_runtime* rt = current_runtime();
  return detail::spawn_with(dims, opts, [rt](auto... args) {
    return monarch_proc_mesh_spawn(rt, args...);
  });
}

}  // namespace monarch

#endif  // MONARCH_MESH_HPP
