// monarch/detail/schema.hpp: reading the flatbuffers of core/schema/monarch.fbs
// (shapes, supervision events) with flatc's generated C++ code
// (monarch/generated/monarch_generated.h, namespace monarch::schema).
#ifndef MONARCH_DETAIL_SCHEMA_HPP
#define MONARCH_DETAIL_SCHEMA_HPP

#include <cstddef>
#include <cstdint>
#include <string>

#include <monarch/codec.hpp>
#include <monarch/generated/monarch_generated.h>

namespace monarch {
namespace detail {

/// The root table `T` of the flatbuffer `buf[0..len)`, after the flatbuffers
/// verifier checked every offset, length and nesting of it; throws
/// DecodeError("malformed <what> flatbuffer") otherwise. The result points
/// into `buf`.
template <class T>
const T& verified_root(const std::uint8_t* buf, std::size_t len, const char* what) {
  if (!buf) throw DecodeError(std::string("malformed ") + what + " flatbuffer");
  ::flatbuffers::Verifier::Options opts;
  // Deep enough for any SupervisionEvent chain that SupervisionEvent::parse
  // accepts (it refuses longer ones with its own message).
  opts.max_depth = 128;
  ::flatbuffers::Verifier v(buf, len, opts);
  if (!v.VerifyBuffer<T>(nullptr))
    throw DecodeError(std::string("malformed ") + what + " flatbuffer");
  return *::flatbuffers::GetRoot<T>(buf);
}

/// A string field ("" when absent).
inline std::string str(const ::flatbuffers::String* s) {
  return s ? std::string(s->data(), s->size()) : std::string();
}

}  // namespace detail
}  // namespace monarch

#endif  // MONARCH_DETAIL_SCHEMA_HPP
