// monarch/shape.hpp: the named dimensions of a mesh (monarch::Shape).
// Does not use libmonarch.
#ifndef MONARCH_SHAPE_HPP
#define MONARCH_SHAPE_HPP

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <monarch/codec.hpp>
#include <monarch/detail/schema.hpp>

namespace monarch {

/// A mesh's named dimensions (decoded from the `monarch.schema.Shape`
/// flatbuffer the ABI hands out). Ranks are row-major over `sizes`.
class Shape {
 public:
  Shape() = default;
  Shape(std::vector<std::string> labels, std::vector<std::uint64_t> sizes)
      : labels_(std::move(labels)), sizes_(std::move(sizes)) {}

  /// Decode a Shape flatbuffer (verified; throws DecodeError). No bytes:
  /// the shape with no dimensions.
  static Shape parse(const std::uint8_t* buf, std::size_t len) {
    Shape s;
    if (!buf || len == 0) return s;
    const schema::Shape& fb = detail::verified_root<schema::Shape>(buf, len, "Shape");
    if (const auto* labels = fb.labels())
      for (const ::flatbuffers::String* l : *labels) s.labels_.push_back(detail::str(l));
    s.offset_ = fb.offset();
    if (const auto* sizes = fb.sizes()) s.sizes_.assign(sizes->begin(), sizes->end());
    if (const auto* strides = fb.strides()) s.strides_.assign(strides->begin(), strides->end());
    if (s.sizes_.size() != s.labels_.size())
      throw DecodeError("Shape flatbuffer: labels and sizes differ in length");
    return s;
  }

  const std::vector<std::string>& labels() const { return labels_; }
  const std::vector<std::uint64_t>& sizes() const { return sizes_; }
  const std::vector<std::uint64_t>& strides() const { return strides_; }
  std::uint64_t offset() const { return offset_; }
  std::size_t ndim() const { return labels_.size(); }
  std::size_t numel() const {
    std::size_t n = 1;
    for (auto s : sizes_) n *= static_cast<std::size_t>(s);
    return n;
  }
  /// Size of dimension `label` (throws std::out_of_range if absent).
  std::size_t size(std::string_view label) const {
    return static_cast<std::size_t>(sizes_[index_of(label)]);
  }
  std::size_t index_of(std::string_view label) const {
    for (std::size_t i = 0; i < labels_.size(); ++i)
      if (labels_[i] == label) return i;
    throw std::out_of_range("no dimension '" + std::string(label) + "'");
  }
  /// Coordinates of row-major `rank`.
  std::vector<std::size_t> coords(std::size_t rank) const {
    std::vector<std::size_t> c(sizes_.size());
    for (std::size_t i = sizes_.size(); i-- > 0;) {
      std::size_t s = static_cast<std::size_t>(sizes_[i]);
      c[i] = s ? rank % s : 0;
      rank = s ? rank / s : 0;
    }
    return c;
  }
  std::string to_string() const {
    std::string s = "{";
    for (std::size_t i = 0; i < labels_.size(); ++i) {
      if (i) s += ", ";
      s += "'" + labels_[i] + "': " + std::to_string(sizes_[i]);
    }
    return s + "}";
  }

 private:
  std::vector<std::string> labels_;
  std::vector<std::uint64_t> sizes_;
  std::vector<std::uint64_t> strides_;
  std::uint64_t offset_ = 0;
};

}  // namespace monarch

#endif  // MONARCH_SHAPE_HPP
