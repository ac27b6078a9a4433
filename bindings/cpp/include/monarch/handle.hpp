// monarch/handle.hpp: unique ownership of one libmonarch handle
// (monarch::detail::Handle), the building block of every RAII class of the
// binding.
#ifndef MONARCH_HANDLE_HPP
#define MONARCH_HANDLE_HPP

#include <utility>

namespace monarch {

namespace detail {

/// Unique ownership of one handle, freed with `Free`.
// `Free` is the C function that frees an `H*` (taken as `auto` so any
// signature the header gives it works).
template <class H, auto Free>
class Handle {
 public:
  Handle() = default;
  explicit Handle(H* h) : h_(h) {}
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  /// The raw handle (still owned). NULL after a move: the library then
  /// rejects it with MONARCH_ERR_INVALID_HANDLE.
  H* get() const { return h_; }
  /// Give up ownership.
  H* release() { return std::exchange(h_, nullptr); }
  void reset() {
    if (h_) Free(std::exchange(h_, nullptr));
  }
  explicit operator bool() const { return h_ != nullptr; }

 private:
  H* h_ = nullptr;
};

}  // namespace detail

}  // namespace monarch

#endif  // MONARCH_HANDLE_HPP
