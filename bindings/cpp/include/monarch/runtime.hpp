// monarch/runtime.hpp: monarch::Runtime, the owner of this process's
// runtime: spawning procs, supervision events for the top level, serving
// this process's actors, ports.
#ifndef MONARCH_RUNTIME_HPP
#define MONARCH_RUNTIME_HPP

#include <monarch.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <monarch/codec.hpp>
#include <monarch/detail/marshal.hpp>
#include <monarch/error.hpp>
#include <monarch/handle.hpp>
#include <monarch/introspect.hpp>
#include <monarch/mesh.hpp>
#include <monarch/port.hpp>
#include <monarch/process.hpp>
#include <monarch/server.hpp>
#include <monarch/supervision.hpp>

namespace monarch {

/// The runtime of this process (one per process). Frees (shuts down) on
/// destruction: stops the procs it started.
class Runtime {
 public:
  /// Create the runtime (or adopt the one serve_if_worker created).
  Runtime() {
    if (monarch_abi_version() != MONARCH_ABI_VERSION)
      throw Error(MONARCH_ERR_INVALID_ARGUMENT,
                  "libmonarch ABI version " + std::to_string(monarch_abi_version()) +
                      " but this header was built for " + std::to_string(MONARCH_ABI_VERSION));
    monarch_runtime* rt = std::exchange(detail::adopted_runtime(), nullptr);
    if (!rt) detail::check(monarch_runtime_new(&rt));
    h_ = Handle(rt);
    detail::process_runtime() = rt;
  }
  Runtime(Runtime&&) = default;
  Runtime& operator=(Runtime&& o) noexcept {
    if (this != &o) {
      shutdown();
      h_ = std::move(o.h_);
      server_ = std::move(o.server_);
    }
    return *this;
  }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  ~Runtime() { shutdown(); }

  bool is_worker() const {
    bool w = false;
    detail::check(monarch_runtime_is_worker(h_.get(), &w));
    return w;
  }
  /// Readable whenever a future completes or an event arrives. Asking for
  /// it has the runtime read its sockets for the watcher until a blocking
  /// wait (which reads them itself): ask again before watching it again.
  int fd() const {
    int fd = -1;
    detail::check(monarch_runtime_fd(h_.get(), &fd));
    return fd;
  }
  void clear_fd() const { detail::check(monarch_runtime_clear_fd(h_.get())); }

  /// Start one proc per point of `dims`, each running `opts.argv` (default:
  /// this binary, which turns into a worker in serve_if_worker).
  ProcMesh spawn_procs(const Dims& dims, const ProcOptions& opts = {}) const {
    return detail::spawn_with(dims, opts, [this](auto... args) {
      return monarch_proc_mesh_spawn(h_.get(), args...);
    });
  }
  /// Start, ahead of the first spawn, the zygote that procs spawned with
  /// `opts` (its env holding "MONARCH_ZYGOTE=1") will be forked from
  /// (docs/architecture.md, "Procs forked from a zygote"). Returns at once;
  /// a command that cannot serve as one leaves spawns on exec.
  void warm_zygote(const ProcOptions& opts) const {
    std::vector<const char*> cargv, cenv;
    for (auto& a : opts.argv) cargv.push_back(a.c_str());
    for (auto& e : opts.env) cenv.push_back(e.c_str());
    detail::check(monarch_runtime_warm_zygote(h_.get(), cargv.data(), cargv.size(),
                                              cenv.empty() ? nullptr : cenv.data(), cenv.size()));
  }
  /// Serve as a zygote on `fd` (the process's MONARCH_ZYGOTE_FD), in a
  /// process with one thread and no runtime: true in each forked child,
  /// which goes on as a proc; false in the zygote once the controller is
  /// done with it.
  static bool serve_as_zygote(int fd) {
    int is_proc = 0;
    detail::check(monarch_zygote_serve(fd, &is_proc));
    return is_proc != 0;
  }
  /// A mesh with no dimensions holding this process's proc; serve its
  /// actors with serve_events().
  ProcMesh this_proc() const {
    monarch_proc_mesh* pm = nullptr;
    detail::check(monarch_runtime_this_proc(h_.get(), &pm));
    return ProcMesh(pm);
  }
  /// The next supervision event for this process's top level (failures
  /// of meshes this program spawned itself), waiting up to `timeout`;
  /// std::nullopt if none came. Throws Error(MONARCH_ERR_STOPPED) once the
  /// runtime was shut down. May be called from a thread of its own.
  template <class Rep, class Period>
  std::optional<SupervisionEvent> next_supervision_event(
      std::chrono::duration<Rep, Period> timeout) const {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
    return next_supervision_event_ms(static_cast<std::int64_t>(ms));
  }
  /// As above with a timeout in milliseconds (-1: forever, 0: just check).
  std::optional<SupervisionEvent> next_supervision_event_ms(std::int64_t timeout_ms) const {
    std::uint8_t* buf = nullptr;
    std::size_t len = 0;
    monarch_status s = monarch_supervision_next(h_.get(), timeout_ms, &buf, &len);
    if (s == MONARCH_ERR_TIMEOUT) return std::nullopt;
    detail::check(s);
    struct Free {
      std::uint8_t* b;
      std::size_t n;
      ~Free() { monarch_buffer_free(b, n); }
    } guard{buf, len};
    return SupervisionEvent::parse(buf, len);
  }

  /// A snapshot of this process's job (monarch_runtime_introspect): its
  /// procs with host, pid and state, their actors' counters, its meshes;
  /// waits up to `timeout_ms` (>= 0) in all for the procs' answers.
  JobSnapshot introspect(std::int64_t timeout_ms = 5000) const {
    std::uint8_t* buf = nullptr;
    std::size_t len = 0;
    detail::check(monarch_runtime_introspect(h_.get(), timeout_ms, &buf, &len));
    struct Free {
      std::uint8_t* b;
      std::size_t n;
      ~Free() { monarch_buffer_free(b, n); }
    } guard{buf, len};
    return JobSnapshot::parse(buf, len);
  }
  /// Stop mesh `name` (as named in a snapshot) that this process spawned
  /// (monarch_runtime_stop_mesh).
  void stop_mesh(const std::string& name) const {
    detail::check(monarch_runtime_stop_mesh(h_.get(), name.c_str()));
  }

  /// Handle events for the actors of this process for up to `timeout_ms`
  /// (-1: until stopped). Returns false once the runtime stopped.
  bool serve_events(std::int64_t timeout_ms = 0) { return server_.serve(h_.get(), timeout_ms); }

  /// The job secret peers authenticate with; an allocator that starts
  /// `monarch host` agents gives it to them (environment variable
  /// MONARCH_JOB_TOKEN or a 0600 file), never on a command line.
  std::string job_token() const {
    std::uint8_t* b = nullptr;
    std::size_t n = 0;
    detail::check(monarch_runtime_job_token(h_.get(), &b, &n));
    std::string s(reinterpret_cast<const char*>(b), n);
    monarch_buffer_free(b, n);
    return s;
  }
  /// How remote procs' stdout/stderr reach this process: printed with a
  /// rank prefix (`stream_to_client`), identical lines within
  /// `aggregate_window_ms` printed once as "[K similar lines] ...".
  void logging_option(bool stream_to_client, std::uint64_t aggregate_window_ms = 0) const {
    detail::check(monarch_runtime_logging_option(h_.get(), stream_to_client, aggregate_window_ms));
  }

  monarch_runtime* handle() const { return h_.get(); }
  /// Shut down now (as the destructor does).
  void shutdown() {
    if (h_) {
      monarch_runtime* mine = h_.get();
      detail::process_runtime().compare_exchange_strong(mine, nullptr);
    }
    h_.reset();
  }

  /// Make actor `actor_key` (as in Call::actor(); "" = this process's top
  /// level) the owner of the meshes this thread spawns from now on: their
  /// failures go to that actor. The worker loop sets this itself while an
  /// event is handled; call it only when an actor's code runs on a thread
  /// of its own, right before spawning.
  void set_owner(const std::string& actor_key) const {
    detail::check(monarch_runtime_set_owner(h_.get(), actor_key.c_str()));
  }
  /// Open a port of this process (see PortReceiver::open).
  PortReceiver open_port(bool once = false) const {
    monarch_port_receiver* rx = nullptr;
    detail::check(monarch_port_open(h_.get(), once, &rx));
    return PortReceiver(rx);
  }

 private:
  using Handle = detail::Handle<monarch_runtime, monarch_runtime_free>;
  Handle h_;
  ActorServer server_;
};

inline ActorMesh ActorMesh::from_ref(const Runtime& rt, BytesView ref) {
  monarch_actor_mesh* am = nullptr;
  detail::check(monarch_actor_mesh_from_ref(rt.handle(), ref.data, ref.size, &am));
  return ActorMesh(am);
}

inline ProcMesh ProcMesh::from_ref(const Runtime& rt, BytesView ref) {
  monarch_proc_mesh* pm = nullptr;
  detail::check(monarch_proc_mesh_from_ref(rt.handle(), ref.data, ref.size, &pm));
  return ProcMesh(pm);
}

}  // namespace monarch

#endif  // MONARCH_RUNTIME_HPP
