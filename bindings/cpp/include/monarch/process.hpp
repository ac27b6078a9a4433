// monarch/process.hpp: this process: its runtime (the C ABI allows one at a
// time; monarch::current_runtime) and its executable (monarch::self_exe).
#ifndef MONARCH_PROCESS_HPP
#define MONARCH_PROCESS_HPP

#include <monarch.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include <monarch/error.hpp>

namespace monarch {

namespace detail {

/// The runtime serve_if_worker created in a process that is not a worker,
/// until the next monarch::Runtime adopts it.
inline monarch_runtime*& adopted_runtime() {
  static monarch_runtime* rt = nullptr;
  return rt;
}

/// The runtime of this process (the C ABI allows one at a time), not owned:
/// set while a monarch::Runtime lives or serve_if_worker serves. Atomic:
/// actors' own threads read it.
inline std::atomic<monarch_runtime*>& process_runtime() {
  static std::atomic<monarch_runtime*> rt{nullptr};
  return rt;
}

}  // namespace detail

/// The runtime of this process, not owned: the one a monarch::Runtime
/// created (or, in a worker, the one serve_if_worker serves). Throws
/// Error(MONARCH_ERR_STOPPED) when there is none. Ports, RDMA buffers and
/// references rebuilt from bytes use it, so actor code can call them.
inline monarch_runtime* current_runtime() {
  monarch_runtime* rt = detail::process_runtime();
  if (!rt)
    throw Error(MONARCH_ERR_STOPPED,
                "no monarch runtime in this process (create a monarch::Runtime first)");
  return rt;
}

/// The path of this executable (/proc/self/exe).
inline std::string self_exe() {
  std::vector<char> buf(4096);
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) throw Error(MONARCH_ERR_IO, "cannot read /proc/self/exe");
  return std::string(buf.data(), static_cast<std::size_t>(n));
}

}  // namespace monarch

#endif  // MONARCH_PROCESS_HPP
