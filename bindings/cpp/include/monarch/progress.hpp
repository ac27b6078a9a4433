// monarch/progress.hpp: progress of this process's long operations (procs
// starting, a SLURM allocation in the queue, large RDMA transfers) as
// events (monarch::next_progress_event), and operations the program
// reports itself (monarch::Progress). docs/tracing.md, "Progress".
#ifndef MONARCH_PROGRESS_HPP
#define MONARCH_PROGRESS_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <monarch.h>
#include <monarch/detail/schema.hpp>
#include <monarch/error.hpp>

namespace monarch {

/// One update of an operation (decoded from the
/// `monarch.schema.ProgressEvent` flatbuffer); its last one is `finished`.
struct ProgressEvent {
  /// monarch.schema.ProgressKind values.
  enum Kind : std::uint32_t {
    Unknown = 0,
    ProcsReady = 1,
    SlurmAllocation = 2,
    RdmaTransfer = 3,
    TensorFetch = 4,
  };
  std::uint64_t id = 0;
  Kind kind = Unknown;
  std::string label;
  std::uint64_t done = 0;
  /// 0 when unknown.
  std::uint64_t total = 0;
  std::uint64_t failed = 0;
  /// A state in words (a SLURM job's queue state), or "".
  std::string state;
  std::uint64_t elapsed_us = 0;
  bool finished = false;
  /// As the terminal shows it, e.g. "procs ready 37/128 (2.1s)".
  std::string text;

  /// Decode (verified; throws DecodeError).
  static ProgressEvent parse(const std::uint8_t* buf, std::size_t len) {
    const auto& t = detail::verified_root<schema::ProgressEvent>(buf, len, "ProgressEvent");
    ProgressEvent e;
    e.id = t.id();
    e.kind = static_cast<Kind>(t.kind());
    e.label = detail::str(t.label());
    e.done = t.done();
    e.total = t.total();
    e.failed = t.failed();
    e.state = detail::str(t.state());
    e.elapsed_us = t.elapsed_us();
    e.finished = t.finished();
    e.text = detail::str(t.text());
    return e;
  }
};

/// Start (or stop) keeping progress events for next_progress_event;
/// stopping drops those not taken.
inline void watch_progress(bool enable = true) { detail::check(monarch_progress_watch(enable)); }

/// The next progress event, waiting up to `timeout_ms` (-1: forever);
/// nullopt when none came.
inline std::optional<ProgressEvent> next_progress_event(std::int64_t timeout_ms) {
  std::uint8_t* buf = nullptr;
  std::size_t len = 0;
  monarch_status s = monarch_progress_next(timeout_ms, &buf, &len);
  if (s == MONARCH_ERR_TIMEOUT) return std::nullopt;
  detail::check(s);
  struct Free {
    std::uint8_t* b;
    std::size_t n;
    ~Free() { monarch_buffer_free(b, n); }
  } guard{buf, len};
  return ProgressEvent::parse(buf, len);
}

/// An operation of the program's own, shown and sent like the runtime's;
/// finished when destroyed (or by finish()).
class Progress {
 public:
  Progress(ProgressEvent::Kind kind, const std::string& label, std::uint64_t total = 0) {
    detail::check(monarch_progress_begin(kind, label.c_str(), total, &h_));
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { monarch_progress_free(h_); }

  /// How much is done (and, when not 0, how much there is in all).
  void set(std::uint64_t done, std::uint64_t total = 0) {
    detail::check(monarch_progress_set(h_, done, total));
  }
  /// Send the last event; later set() calls throw.
  void finish() {
    monarch_progress* h = h_;
    h_ = nullptr;
    detail::check(monarch_progress_free(h));
  }

 private:
  monarch_progress* h_ = nullptr;
};

}  // namespace monarch

#endif  // MONARCH_PROGRESS_HPP
