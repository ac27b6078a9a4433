// monarch/error.hpp: failures of libmonarch calls as exceptions
// (monarch::Error, monarch::ActorError) and status names.
#ifndef MONARCH_ERROR_HPP
#define MONARCH_ERROR_HPP

#include <monarch.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace monarch {

/// A libmonarch call failed: `status()` is its monarch_status, `what()`
/// the library's message (monarch_last_error at the time).
class Error : public std::runtime_error {
 public:
  Error(monarch_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  monarch_status status() const { return status_; }
  bool is_timeout() const { return status_ == MONARCH_ERR_TIMEOUT; }

 private:
  monarch_status status_;
};

/// Status of an ActorError: not a libmonarch status; an endpoint or
/// constructor failed (or its proc died) at the point `rank()`.
constexpr monarch_status kEndpointFailed = -1;

/// An endpoint (or constructor) failed at one point of a call.
class ActorError : public Error {
 public:
  ActorError(std::size_t rank, const std::string& message)
      : Error(kEndpointFailed, "rank " + std::to_string(rank) + ": " + message),
        rank_(rank),
        remote_(message) {}
  std::size_t rank() const { return rank_; }
  /// The remote error message alone.
  const std::string& remote_message() const { return remote_; }

 private:
  std::size_t rank_;
  std::string remote_;
};

/// Thrown by an endpoint to fail its actor (as a Python endpoint raising a
/// BaseException does): the caller gets the failure report, later calls
/// to the actor fail, and the actor's owner hears of it once (a
/// supervision event). Any other exception only fails the call.
class ActorFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
inline void check(monarch_status s) {
  if (s != MONARCH_OK) throw Error(s, monarch_last_error());
}
// The library's name without its "MONARCH_" / "MONARCH_ERR_" prefix.
inline const char* status_name(monarch_status s) {
  const char* name = monarch_status_name(s);
  const char* prefix = s == MONARCH_OK ? "MONARCH_" : "MONARCH_ERR_";
  std::size_t n = std::char_traits<char>::length(prefix);
  return std::char_traits<char>::compare(name, prefix, n) == 0 ? name + n : name;
}
}  // namespace detail

/// Status name ("TIMEOUT", ...) for messages.
inline const char* status_name(monarch_status s) { return detail::status_name(s); }

}  // namespace monarch

#endif  // MONARCH_ERROR_HPP
