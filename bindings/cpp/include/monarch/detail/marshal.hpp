// monarch/detail/marshal.hpp: moving arguments and results across the C ABI:
// C arrays of views and strings, timeouts in milliseconds, owned out-buffers
// (copied or decoded, then freed at once).
#ifndef MONARCH_DETAIL_MARSHAL_HPP
#define MONARCH_DETAIL_MARSHAL_HPP

#include <monarch.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <monarch/codec.hpp>
#include <monarch/error.hpp>
#include <monarch/shape.hpp>

namespace monarch {

namespace detail {

// Call `f(&buf, &len)` (a *_shape function) and decode the owned buffer.
template <class F>
Shape owned_shape(F&& f) {
  std::uint8_t* buf = nullptr;
  std::size_t len = 0;
  check(f(&buf, &len));
  struct Guard {
    std::uint8_t* b;
    std::size_t n;
    ~Guard() { monarch_buffer_free(b, n); }
  } g{buf, len};
  return Shape::parse(buf, len);
}

inline std::vector<monarch_bytes> to_c(const std::vector<BytesView>& v) {
  std::vector<monarch_bytes> out;
  out.reserve(v.size());
  for (auto& b : v) out.push_back(monarch_bytes{b.data, b.size});
  return out;
}

inline std::int64_t to_ms(std::chrono::nanoseconds d) {
  if (d.count() < 0) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
  return static_cast<std::int64_t>(ms);
}

/// Take an owned `out`/`out_len` buffer as Bytes (and free it).
template <class F>
Bytes owned_bytes(F&& f) {
  std::uint8_t* buf = nullptr;
  std::size_t len = 0;
  check(f(&buf, &len));
  Bytes out(buf, buf + len);
  monarch_buffer_free(buf, len);
  return out;
}

inline std::vector<const char*> c_strs(const std::vector<std::string>& v) {
  std::vector<const char*> out;
  out.reserve(v.size());
  for (auto& s : v) out.push_back(s.c_str());
  return out;
}

}  // namespace detail

}  // namespace monarch

#endif  // MONARCH_DETAIL_MARSHAL_HPP
