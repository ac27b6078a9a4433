// Actor classes shared by the C++ tests: hosted by the test binary itself
// (serve_if_worker) and, as a plugin, by `monarch worker --plugin`.
#pragma once

#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <monarch/actor.hpp>

namespace test_actors {

class Counter : public monarch::Actor {
 public:
  explicit Counter(const monarch::Call& args) {
    if (args.size() > 0) value_ = args.get<std::int64_t>(0);
    if (value_ < 0) throw std::invalid_argument("Counter start must be >= 0");
    endpoint("incr", &Counter::incr);
    endpoint("get", &Counter::get);
    endpoint("add_all", [this](std::vector<std::int64_t> xs) {
      for (auto x : xs) value_ += x;
      return value_;
    });
  }
  std::int64_t incr(std::int64_t by) { return value_ += by; }
  std::int64_t get() const { return value_; }

 private:
  std::int64_t value_ = 0;
};

class Echo : public monarch::Actor {
 public:
  Echo() {
    // Raw: parts in, the same parts out.
    endpoint("echo", [](const monarch::Call& c) {
      monarch::Parts out;
      for (auto& p : c.parts()) out.push_back(p.to_bytes());
      return out;
    });
    endpoint("greet", [](std::string who, std::int32_t n) {
      std::string s;
      for (int i = 0; i < n; ++i) s += "hello " + who + ";";
      return s;
    });
    endpoint("sum", [](std::vector<double> xs) {
      double s = 0;
      for (double x : xs) s += x;
      return s;
    });
    endpoint("rank", [](const monarch::Call& c) { return c.rank(); });
    endpoint("labels", [](const monarch::Call& c) {
      std::string s;
      monarch::Shape shape = c.shape();
      for (auto& l : shape.labels()) s += l + ",";
      return s;
    });
    endpoint("fail", [](const monarch::Call& c) -> std::int64_t {
      throw std::runtime_error("fail on rank " + std::to_string(c.rank()));
    });
    endpoint("exit", [](const monarch::Call&) { ::_exit(3); });
    endpoint("sleep_ms", [](std::int64_t ms) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    });
    endpoint("nothing", []() {});
  }
};

}  // namespace test_actors
