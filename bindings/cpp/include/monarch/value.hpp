// monarch/value.hpp: the results of calls: monarch::ValueMesh (one value or
// error per point), monarch::PointValue, monarch::Point, and monarch::Future
// (a pending ValueMesh).
#ifndef MONARCH_VALUE_HPP
#define MONARCH_VALUE_HPP

#include <monarch.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <monarch/codec.hpp>
#include <monarch/detail/marshal.hpp>
#include <monarch/error.hpp>
#include <monarch/handle.hpp>
#include <monarch/shape.hpp>

namespace monarch {

/// A point of a mesh: its row-major rank and coordinates.
struct Point {
  std::size_t rank = 0;
  std::vector<std::size_t> coords;
  const Shape* shape = nullptr;
  /// Coordinate along dimension `label`.
  std::size_t operator[](std::string_view label) const { return coords.at(shape->index_of(label)); }
};

class ValueMesh;

/// One point of a ValueMesh: a value (payload parts) or an error.
class PointValue {
 public:
  const Point& point() const { return point_; }
  std::size_t rank() const { return point_.rank; }
  bool ok() const { return !is_error_; }
  /// The error message ("" for a value).
  const std::string& error() const { return error_; }
  std::size_t size() const { return nparts_; }
  /// Borrow part `i` (valid while the ValueMesh lives). Throws the point's
  /// ActorError if it is an error.
  BytesView part(std::size_t i = 0) const;
  /// Decode part `i` as T. Throws ActorError for an error point.
  template <class T>
  T as(std::size_t i = 0) const {
    return decode<T>(part(i));
  }
  /// Throw the point's ActorError if it is an error.
  void check() const {
    if (is_error_) throw ActorError(point_.rank, error_);
  }

 private:
  friend class ValueMesh;
  monarch_value_mesh* vm_ = nullptr;
  Point point_;
  bool is_error_ = false;
  std::string error_;
  std::size_t nparts_ = 0;
  // Part 0 as monarch_value_mesh_points described it (borrowed).
  bool has_part0_ = false;
  const std::uint8_t* part0_ = nullptr;
  std::size_t part0_len_ = 0;
};

/// The gathered replies of a call: one PointValue per rank (row-major over
/// `shape()`). Iterable.
class ValueMesh {
 public:
  explicit ValueMesh(monarch_value_mesh* vm) : h_(vm) {
    detail::check(monarch_value_mesh_len(h_.get(), &len_));
  }
  ValueMesh(ValueMesh&&) = default;
  ValueMesh& operator=(ValueMesh&&) = default;

  /// The shape of the mesh that was called (decoded on first use).
  const Shape& shape() const {
    if (!shape_) {
      auto* h = h_.get();
      shape_ = std::make_unique<Shape>(detail::owned_shape(
          [h](std::uint8_t** b, std::size_t* n) { return monarch_value_mesh_shape(h, b, n); }));
    }
    return *shape_;
  }
  std::size_t size() const { return len_; }
  PointValue operator[](std::size_t rank) const { return at(rank); }
  PointValue at(std::size_t rank) const {
    PointValue p;
    bool err = false;
    const char* msg = nullptr;
    if (rank < len_) {
      // Every point described at once, on first use (monarch_value_mesh_points).
      if (infos_.empty()) {
        std::vector<monarch_point_info> infos(len_);
        std::size_t n = 0;
        detail::check(monarch_value_mesh_points(h_.get(), infos.data(), infos.size(), &n));
        infos.resize(std::min(n, len_));
        infos_ = std::move(infos);
      }
    }
    if (rank < infos_.size()) {
      const monarch_point_info& info = infos_[rank];
      err = info.is_error;
      msg = info.error;
      p.nparts_ = info.nparts;
      p.part0_ = info.part0;
      p.part0_len_ = info.part0_len;
      p.has_part0_ = info.nparts > 0;
    } else {
      // Out of range: the library's error.
      detail::check(monarch_value_mesh_point(h_.get(), rank, &err, &msg, &p.nparts_));
    }
    p.vm_ = h_.get();
    p.is_error_ = err;
    p.error_ = msg ? msg : "";
    p.point_.rank = rank;
    p.point_.coords = shape().coords(rank);
    p.point_.shape = &shape();
    return p;
  }
  /// Whether any point is an error.
  bool has_errors() const {
    for (std::size_t i = 0; i < len_; ++i)
      if (!at(i).ok()) return true;
    return false;
  }
  /// Throw the first error point as ActorError.
  const ValueMesh& check() const {
    for (std::size_t i = 0; i < len_; ++i) at(i).check();
    return *this;
  }
  /// Part `i` of every point decoded as T (throws ActorError on an error point).
  template <class T>
  std::vector<T> values(std::size_t i = 0) const {
    std::vector<T> out;
    out.reserve(len_);
    for (std::size_t r = 0; r < len_; ++r) out.push_back(at(r).as<T>(i));
    return out;
  }
  /// The only point's part `i` as T (for a call on one actor).
  template <class T>
  T item(std::size_t i = 0) const {
    if (len_ != 1)
      throw Error(MONARCH_ERR_INVALID_ARGUMENT,
                  "item() on a ValueMesh of " + std::to_string(len_) + " points");
    return at(0).as<T>(i);
  }

  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = PointValue;
    using difference_type = std::ptrdiff_t;
    using pointer = const PointValue*;
    using reference = const PointValue&;
    iterator(const ValueMesh* vm, std::size_t i) : vm_(vm), i_(i) { load(); }
    reference operator*() const { return cur_; }
    pointer operator->() const { return &cur_; }
    iterator& operator++() {
      ++i_;
      load();
      return *this;
    }
    bool operator==(const iterator& o) const { return i_ == o.i_; }
    bool operator!=(const iterator& o) const { return i_ != o.i_; }

   private:
    void load() {
      if (i_ < vm_->size()) cur_ = vm_->at(i_);
    }
    const ValueMesh* vm_;
    std::size_t i_;
    PointValue cur_;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, len_); }

  monarch_value_mesh* handle() const { return h_.get(); }

 private:
  detail::Handle<monarch_value_mesh, monarch_value_mesh_free> h_;
  // Heap-allocated so Points keep pointing at it when the ValueMesh moves.
  mutable std::unique_ptr<Shape> shape_;
  std::size_t len_ = 0;
  // monarch_value_mesh_points (pointers borrowed from the value mesh).
  mutable std::vector<monarch_point_info> infos_;
};

inline BytesView PointValue::part(std::size_t i) const {
  check();
  if (i == 0 && has_part0_) return BytesView(part0_, part0_len_);
  const std::uint8_t* d = nullptr;
  std::size_t n = 0;
  detail::check(monarch_value_mesh_part(vm_, point_.rank, i, &d, &n));
  return BytesView(d, n);
}

/// A pending ValueMesh. `get()` waits and takes it (once).
class Future {
 public:
  Future() = default;
  explicit Future(monarch_future* f) : h_(f) {}

  /// Whether the result is there (never waits).
  bool ready() const {
    bool r = false;
    detail::check(monarch_future_poll(h_.get(), &r));
    return r;
  }
  /// Wait up to `d`; true when complete.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    return wait_ms(detail::to_ms(std::chrono::duration_cast<std::chrono::nanoseconds>(d)));
  }
  /// Wait until complete.
  void wait() const { wait_ms(-1); }
  /// Wait and take the result; throws Error with the status of an
  /// operation that failed as a whole.
  ValueMesh get() {
    wait_ms(-1);
    return take();
  }
  /// Like get(), but throws Error(MONARCH_ERR_TIMEOUT) after `d` (the
  /// future stays usable: get() again later).
  template <class Rep, class Period>
  ValueMesh get(std::chrono::duration<Rep, Period> d) {
    if (!wait_for(d))
      throw Error(MONARCH_ERR_TIMEOUT, "future not complete after " +
                                           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) +
                                           " ms");
    return take();
  }
  monarch_future* handle() const { return h_.get(); }
  monarch_future* release() { return h_.release(); }

 private:
  bool wait_ms(std::int64_t ms) const {
    monarch_status s = monarch_future_wait(h_.get(), ms);
    if (s == MONARCH_ERR_TIMEOUT) return false;
    detail::check(s);
    return true;
  }
  ValueMesh take() {
    monarch_value_mesh* vm = nullptr;
    detail::check(monarch_future_take(h_.get(), &vm));
    return ValueMesh(vm);
  }
  detail::Handle<monarch_future, monarch_future_free> h_;
};

}  // namespace monarch

#endif  // MONARCH_VALUE_HPP
