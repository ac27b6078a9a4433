// Checks shared by the test files of cpp_test: CHECK / THROWS count
// failures (the test fails at the end instead of stopping at the first).
#ifndef MONARCH_CPP_TEST_CHECK_HPP
#define MONARCH_CPP_TEST_CHECK_HPP

#include <monarch/monarch.hpp>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>

namespace cpp_test {

/// Failed checks of the running test.
inline int failures = 0;

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond "\n"; \
      ++::cpp_test::failures;                                                   \
    }                                                                           \
  } while (0)

// Run `f`, expecting it to throw E; returns the exception (or a default).
template <class E, class F>
std::optional<E> throws(F&& f, const char* file, int line) {
  try {
    f();
  } catch (const E& e) {
    return e;
  } catch (const std::exception& e) {
    std::cerr << file << ":" << line << ": wrong exception: " << e.what() << "\n";
    ++failures;
    return std::nullopt;
  }
  std::cerr << file << ":" << line << ": expected an exception\n";
  ++failures;
  return std::nullopt;
}
#define THROWS(E, expr) ::cpp_test::throws<E>([&] { expr; }, __FILE__, __LINE__)

// `expr` throws monarch::Error with status `st`.
#define THROWS_STATUS(st, expr)                          \
  do {                                                   \
    auto err_ = THROWS(monarch::Error, expr);            \
    if (err_) CHECK(err_->status() == (st));             \
  } while (0)

// `raw` was released from a live W: free it (with `free_fn`, the C function
// that frees it), then check that freeing it again and using a W that
// adopts it are rejected (invalid handle).
template <class W, class Raw, class Free, class Use>
void check_freed_handle(Raw* raw, Free free_fn, Use use) {
  CHECK(free_fn(raw) == MONARCH_OK);
  CHECK(free_fn(raw) == MONARCH_ERR_INVALID_HANDLE);
  W stale(raw);  // adopts a freed handle
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, use(stale));
  stale.release();
}

inline bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// ctest's SKIP_RETURN_CODE.
constexpr int kSkip = 77;

inline std::string setting(const char* env, const char* configured) {
  const char* v = std::getenv(env);
  return (v && *v) ? v : configured;
}

}  // namespace cpp_test

#endif  // MONARCH_CPP_TEST_CHECK_HPP
