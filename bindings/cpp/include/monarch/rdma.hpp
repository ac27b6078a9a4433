// monarch/rdma.hpp: the data plane (docs/data-plane.md): monarch::RdmaBuffer
// (registered memory other procs read and write one-sided), monarch::Transfer
// (a copy in flight), and the backends.
#ifndef MONARCH_RDMA_HPP
#define MONARCH_RDMA_HPP

#include <monarch.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <monarch/codec.hpp>
#include <monarch/detail/marshal.hpp>
#include <monarch/error.hpp>
#include <monarch/handle.hpp>
#include <monarch/process.hpp>
#include <monarch/value.hpp>

namespace monarch {

/// An RDMA transfer in flight (RdmaBuffer::read_into / write_from). The
/// local memory it reads or writes must stay valid until it completes;
/// destroying a Transfer first waits for it to end (transfers always end:
/// their I/O is bounded by the data plane's stall timeout), so a Transfer
/// declared after its memory cannot outlive it.
class Transfer {
 public:
  Transfer() = default;
  explicit Transfer(monarch_future* f) : f_(f) {}
  Transfer(Transfer&&) = default;
  Transfer& operator=(Transfer&& o) noexcept {
    if (this != &o) {
      finish();
      f_ = std::move(o.f_);
    }
    return *this;
  }
  ~Transfer() { finish(); }

  bool ready() const { return f_.ready(); }
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    return f_.wait_for(d);
  }
  /// Wait for the end; returns the backend used ("same_host", "tcp", ...).
  /// Throws Error for a failed transfer (MONARCH_ERR_INVALID_ARGUMENT: a
  /// dropped buffer; MONARCH_ERR_PROC_FAILED: its owner died).
  std::string get() { return backend(f_.get()); }
  /// As get(), throwing Error(MONARCH_ERR_TIMEOUT) after `d` (the transfer
  /// goes on; get() again later).
  template <class Rep, class Period>
  std::string get(std::chrono::duration<Rep, Period> d) {
    return backend(f_.get(d));
  }
  monarch_future* handle() const { return f_.handle(); }

 private:
  static std::string backend(const ValueMesh& vm) {
    vm.check();
    return std::string(vm[0].part(0).str());
  }
  void finish() noexcept {
    if (f_.handle()) monarch_future_wait(f_.handle(), -1);
  }
  Future f_;
};

/// Access peers get to a registered buffer.
enum class RdmaAccess : std::uint32_t {
  ReadWrite = 0,
  ReadOnly = MONARCH_RDMA_READ_ONLY,
};

/// A registered memory buffer other procs read and write one-sided (see
/// docs/data-plane.md), or a handle on another proc's buffer rebuilt from
/// its descriptor bytes. Passed as a call argument (or returned from an
/// endpoint) it is one part: its descriptor. Destroying the owner's
/// RdmaBuffer unregisters the buffer (waiting for transfers in progress),
/// after which its memory may be released: declare the memory before the
/// RdmaBuffer that registers it. Destroying any other handle releases
/// nothing at the owner (drop() does).
class RdmaBuffer {
 public:
  RdmaBuffer() = default;
  explicit RdmaBuffer(monarch_rdma_buffer* b) : h_(b) {}

  /// Register `len` (> 0) bytes at `ptr` (owned by the caller, valid until
  /// this buffer is dropped or destroyed) with the process's runtime.
  /// `readers`: how many remote drops release it (1: the usual single
  /// reference; N: handed to N receivers that each drop once).
  static RdmaBuffer register_memory(void* ptr, std::size_t len,
                                    RdmaAccess access = RdmaAccess::ReadWrite,
                                    std::uint32_t readers = 1) {
    monarch_rdma_buffer* b = nullptr;
    detail::check(monarch_rdma_register(current_runtime(), static_cast<std::uint8_t*>(ptr), len,
                                        static_cast<std::uint32_t>(access), readers, &b));
    return RdmaBuffer(b);
  }
  /// Register the elements of `v` (which must not be resized or destroyed
  /// while registered).
  template <class T>
  static RdmaBuffer register_memory(std::vector<T>& v, RdmaAccess access = RdmaAccess::ReadWrite,
                                    std::uint32_t readers = 1) {
    static_assert(std::is_trivially_copyable_v<T>, "RDMA buffers hold trivially copyable elements");
    return register_memory(v.data(), v.size() * sizeof(T), access, readers);
  }
  /// A handle on the buffer named by descriptor bytes (to_bytes(), made in
  /// any proc of the job). Malformed bytes throw MONARCH_ERR_INVALID_ARGUMENT.
  static RdmaBuffer from_bytes(BytesView desc) {
    monarch_rdma_buffer* b = nullptr;
    detail::check(monarch_rdma_buffer_from_bytes(current_runtime(), desc.data, desc.size, &b));
    return RdmaBuffer(b);
  }
  /// The descriptor (owner, id, size, how to reach it) to send in a message.
  Bytes to_bytes() const {
    auto* h = h_.get();
    return detail::owned_bytes(
        [h](std::uint8_t** b, std::size_t* n) { return monarch_rdma_buffer_to_bytes(h, b, n); });
  }
  std::uint64_t size() const {
    std::uint64_t n = 0;
    detail::check(monarch_rdma_buffer_size(h_.get(), &n));
    return n;
  }
  /// The backend transfers on this handle use ("same_host", "tcp", "ibverbs").
  std::string backend() const {
    const char* b = nullptr;
    detail::check(monarch_rdma_buffer_backend(h_.get(), &b));
    return b ? b : "";
  }
  /// Owner's handle: still registered; other handles: not dropped.
  bool is_registered() const {
    bool r = false;
    detail::check(monarch_rdma_buffer_is_registered(h_.get(), &r));
    return r;
  }
  /// Copy `len` bytes of the buffer, from byte `offset`, into `dst`. A
  /// range outside the buffer throws Error(MONARCH_ERR_INVALID_ARGUMENT).
  Transfer read_into(void* dst, std::size_t len, std::uint64_t offset = 0) const {
    monarch_future* f = nullptr;
    detail::check(monarch_rdma_read_into(h_.get(), offset, static_cast<std::uint8_t*>(dst), len, &f));
    return Transfer(f);
  }
  /// Fill all of `dst` from the buffer's bytes at `offset`.
  template <class T>
  Transfer read_into(std::vector<T>& dst, std::uint64_t offset = 0) const {
    static_assert(std::is_trivially_copyable_v<T>, "RDMA transfers copy trivially copyable elements");
    return read_into(dst.data(), dst.size() * sizeof(T), offset);
  }
  /// Copy `len` bytes from `src` into the buffer at `offset` (refused for a
  /// read-only buffer or a range outside it).
  Transfer write_from(const void* src, std::size_t len, std::uint64_t offset = 0) const {
    monarch_future* f = nullptr;
    detail::check(
        monarch_rdma_write_from(h_.get(), offset, static_cast<const std::uint8_t*>(src), len, &f));
    return Transfer(f);
  }
  template <class T>
  Transfer write_from(const std::vector<T>& src, std::uint64_t offset = 0) const {
    static_assert(std::is_trivially_copyable_v<T>, "RDMA transfers copy trivially copyable elements");
    return write_from(src.data(), src.size() * sizeof(T), offset);
  }
  /// Release the buffer: the owner's handle unregisters it (waiting for
  /// transfers in progress); another handle asks the owner to release one
  /// reference. Every later use of this object throws.
  void drop() { detail::check(monarch_rdma_buffer_drop(h_.get())); }

  monarch_rdma_buffer* handle() const { return h_.get(); }
  monarch_rdma_buffer* release() { return h_.release(); }

 private:
  detail::Handle<monarch_rdma_buffer, monarch_rdma_buffer_free> h_;
};

template <>
struct Codec<RdmaBuffer> {
  static Bytes encode(const RdmaBuffer& b) { return b.to_bytes(); }
  static RdmaBuffer decode(BytesView b) { return RdmaBuffer::from_bytes(b); }
};

/// The backend a transfer with a proc on this host uses by default
/// (MONARCH_RDMA_BACKEND forces one; a bad value throws).
inline std::string default_rdma_backend() {
  const char* b = nullptr;
  detail::check(monarch_rdma_default_backend(&b));
  return b ? b : "";
}

/// Whether the ibverbs backend can be used, and why not.
struct IbverbsStatus {
  bool available = false;
  std::string reason;
};
inline IbverbsStatus ibverbs_status() {
  bool a = false;
  const char* r = nullptr;
  detail::check(monarch_rdma_ibverbs_status(&a, &r));
  return IbverbsStatus{a, r ? r : ""};
}

}  // namespace monarch

#endif  // MONARCH_RDMA_HPP
