// monarch/codec.hpp: how values become payload parts, and back.
//
// Each argument of a call is one payload part, each return value one part.
// Trivially copyable types are their object bytes (host byte order),
// std::string its UTF-8 bytes, std::vector<T> of a trivially copyable T its
// elements' bytes, Bytes and BytesView are raw. Other types get an encoding
// by specializing monarch::Codec<T> (monarch::Port and monarch::RdmaBuffer
// do). Does not use libmonarch.
#ifndef MONARCH_CODEC_HPP
#define MONARCH_CODEC_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace monarch {

using Bytes = std::vector<std::uint8_t>;
/// The payload parts of a reply (or of a call built by hand).
using Parts = std::vector<Bytes>;

/// A borrowed byte range (valid as long as what it was taken from).
struct BytesView {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;

  BytesView() = default;
  BytesView(const std::uint8_t* d, std::size_t n) : data(d), size(n) {}
  BytesView(const Bytes& b) : data(b.data()), size(b.size()) {}  // NOLINT
  BytesView(std::string_view s)                                   // NOLINT
      : data(reinterpret_cast<const std::uint8_t*>(s.data())), size(s.size()) {}

  Bytes to_bytes() const { return Bytes(data, data + size); }
  std::string_view str() const {
    return std::string_view(reinterpret_cast<const char*>(data), size);
  }
};

/// Raised for a payload that cannot be decoded or a malformed structure.
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class T, class = void>
struct Codec;  // no encoding for this type: specialize Codec<T>

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};

template <class T>
struct Codec<T, std::enable_if_t<std::is_trivially_copyable_v<T> &&
                                 !std::is_pointer_v<T>>> {
  static Bytes encode(const T& v) {
    Bytes b(sizeof(T));
    std::memcpy(b.data(), &v, sizeof(T));
    return b;
  }
  static T decode(BytesView b) {
    if (b.size != sizeof(T))
      throw DecodeError("expected a part of " + std::to_string(sizeof(T)) +
                        " bytes, got " + std::to_string(b.size));
    T v;
    std::memcpy(&v, b.data, sizeof(T));
    return v;
  }
};

template <>
struct Codec<std::string> {
  static Bytes encode(const std::string& s) { return Bytes(s.begin(), s.end()); }
  static std::string decode(BytesView b) { return std::string(b.str()); }
};

template <class T>
struct Codec<std::vector<T>, std::enable_if_t<std::is_trivially_copyable_v<T>>> {
  static Bytes encode(const std::vector<T>& v) {
    Bytes b(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
  }
  static std::vector<T> decode(BytesView b) {
    if (b.size % sizeof(T) != 0)
      throw DecodeError("part of " + std::to_string(b.size) +
                        " bytes is not a whole number of " +
                        std::to_string(sizeof(T)) + "-byte elements");
    std::vector<T> v(b.size / sizeof(T));
    if (b.size) std::memcpy(v.data(), b.data, b.size);
    return v;
  }
};

template <>
struct Codec<BytesView> {
  static Bytes encode(const BytesView& v) { return v.to_bytes(); }
  static BytesView decode(BytesView b) { return b; }
};

template <class T>
Bytes encode(const T& v) {
  return Codec<std::decay_t<T>>::encode(v);
}
inline Bytes encode(const char* s) { return Codec<std::string>::encode(s); }
template <class T>
T decode(BytesView b) {
  return Codec<T>::decode(b);
}

}  // namespace monarch

#endif  // MONARCH_CODEC_HPP
