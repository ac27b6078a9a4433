// cpp_test case `rdma` (also run as `rdma_tcp`): registered buffers read
// and written by the controller and by actors of other procs.
#include <monarch/monarch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "suites.hpp"

using namespace std::chrono_literals;

// Actors of the data-plane test.
namespace {

std::uint8_t pattern(std::size_t i, unsigned seed) {
  return static_cast<std::uint8_t>((i * 131 + seed * 7 + (i >> 11)) & 0xff);
}

// Owns `n` bytes (a pattern) registered as an RDMA buffer.
class Store : public monarch::Actor {
 public:
  explicit Store(const monarch::Call& args) : data_(args.get<std::uint64_t>(0)) {
    bool read_only = args.size() > 1 && args.get<std::uint8_t>(1) != 0;
    for (std::size_t i = 0; i < data_.size(); ++i) data_[i] = pattern(i, 1);
    buf_ = monarch::RdmaBuffer::register_memory(
        data_, read_only ? monarch::RdmaAccess::ReadOnly : monarch::RdmaAccess::ReadWrite);
    endpoint("buffer", [this]() { return buf_.to_bytes(); });
    endpoint("contents", [this]() { return data_; });
    endpoint("registered", [this]() { return buf_.is_registered(); });
    endpoint("drop", [this]() { buf_.drop(); });
  }

 private:
  std::vector<std::uint8_t> data_;  // before buf_: unregistered first
  monarch::RdmaBuffer buf_;
};

// Reads and writes other procs' buffers (handles rebuilt from descriptors).
class Peer : public monarch::Actor {
 public:
  Peer() {
    endpoint("pull", [](monarch::RdmaBuffer b) {
      std::vector<std::uint8_t> dst(b.size());
      b.read_into(dst).get(std::chrono::seconds(60));
      return dst;
    });
    endpoint("push", [](monarch::RdmaBuffer b, std::vector<std::uint8_t> src, std::uint64_t at) {
      return b.write_from(src, at).get(std::chrono::seconds(60));
    });
  }
};

}  // namespace

MONARCH_ACTOR(Store, "Store");
MONARCH_ACTOR(Peer, "Peer");

namespace cpp_test {

using monarch::ActorError;
using monarch::Error;

void test_rdma() {
  monarch::Runtime rt;
  std::cout << "default backend: " << monarch::default_rdma_backend() << "\n";
  auto ib = monarch::ibverbs_status();
  CHECK(ib.available || !ib.reason.empty());
  auto procs = rt.spawn_procs({{"procs", 2}});
  // An odd size over a few MiB: pieces, stripes and tails all matter.
  const std::size_t n = (3u << 20) + 13;
  auto store = procs.slice("procs", 0).spawn("store", "Store", std::uint64_t{n});
  auto peer = procs.slice("procs", 1).spawn("peer", "Peer");
  auto desc = store.call_one("buffer").get(30s).item<monarch::Bytes>();
  // The controller (another proc) reads it, byte-exact.
  auto buf = monarch::RdmaBuffer::from_bytes(desc);
  CHECK(buf.size() == n);
  CHECK(buf.is_registered());
  std::vector<std::uint8_t> dst(n, 0);
  std::string backend = buf.read_into(dst).get(60s);
  std::cout << "controller read: " << backend << "\n";
  CHECK(backend == buf.backend());
  bool exact = true;
  for (std::size_t i = 0; i < n; ++i) exact = exact && dst[i] == pattern(i, 1);
  CHECK(exact);
  // A range at an offset.
  std::vector<std::uint8_t> tail(100);
  buf.read_into(tail, n - 100).get(60s);
  for (std::size_t i = 0; i < 100; ++i) exact = exact && tail[i] == pattern(n - 100 + i, 1);
  CHECK(exact);
  // The controller writes into it; the owner sees exactly that.
  std::vector<std::uint8_t> src(70000);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = pattern(i, 2);
  buf.write_from(src, 5000).get(60s);
  auto contents = store.call_one("contents").get(30s).item<std::vector<std::uint8_t>>();
  CHECK(contents.size() == n);
  std::vector<std::uint8_t> expect(n);
  for (std::size_t i = 0; i < n; ++i) expect[i] = pattern(i, 1);
  std::copy(src.begin(), src.end(), expect.begin() + 5000);
  CHECK(contents == expect);
  // An actor in a third proc reads and writes it through the descriptor
  // it got in a message.
  CHECK(peer.call_one("pull", buf).get(60s).item<std::vector<std::uint8_t>>() == expect);
  std::vector<std::uint8_t> head(4096, 0xab);
  CHECK(!peer.call_one("push", buf, head, std::uint64_t{0}).get(60s).item<std::string>().empty());
  std::copy(head.begin(), head.end(), expect.begin());
  CHECK(store.call_one("contents").get(30s).item<std::vector<std::uint8_t>>() == expect);
  // A Transfer destroyed before completing waits for it: the bytes are there.
  std::vector<std::uint8_t> waited(n, 0);
  { auto t = buf.read_into(waited); }
  CHECK(waited == expect);
  // Size mismatches throw monarch::Error with the sizes in the message.
  std::vector<std::uint8_t> big(n + 1);
  auto e = THROWS(Error, buf.read_into(big));
  if (e) {
    std::cout << "oversized read: " << e->what() << "\n";
    CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT);
    CHECK(contains(e->what(), std::to_string(n)));
  }
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, buf.write_from(src, n - 10));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, buf.read_into(nullptr, 10));
  // A read-only buffer refuses writes.
  auto ro = procs.slice("procs", 1).spawn("ro", "Store", std::uint64_t{64}, std::uint8_t{1});
  auto robuf = monarch::RdmaBuffer::from_bytes(ro.call_one("buffer").get(30s).item<monarch::Bytes>());
  std::vector<std::uint8_t> small(64);
  robuf.read_into(small).get(60s);
  CHECK(small[63] == pattern(63, 1));
  THROWS(Error, robuf.write_from(small).get(60s));
  // Malformed descriptors.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::RdmaBuffer::from_bytes(monarch::BytesView("nope")));
  // Use after drop: this handle refuses everything; the owner released it
  // (one reader), so a fresh handle's transfers fail too.
  buf.drop();
  CHECK(!buf.is_registered());
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, buf.read_into(dst).get(60s));
  THROWS(Error, buf.to_bytes());
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, buf.drop());
  bool released = false;
  for (int i = 0; i < 300 && !released; ++i) {
    released = !store.call_one("registered").get(30s).item<bool>();
    if (!released) std::this_thread::sleep_for(100ms);
  }
  CHECK(released);
  auto again = monarch::RdmaBuffer::from_bytes(desc);
  e = THROWS(Error, again.read_into(small).get(60s));
  if (e) {
    std::cout << "read of a released buffer: " << e->what() << "\n";
    CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT);
  }
  // The owner drops its own buffer: readers are refused.
  ro.call_one("drop").get(30s).check();
  THROWS(Error, robuf.read_into(small).get(60s));
  // Buffers this process owns: read in place; freed handles are rejected.
  std::vector<std::uint64_t> mine{1, 2, 3, 4};
  {
    auto own = monarch::RdmaBuffer::register_memory(mine);
    auto local = monarch::RdmaBuffer::from_bytes(own.to_bytes());
    std::vector<std::uint64_t> out(4);
    local.read_into(out).get(60s);
    CHECK(out == mine);
    check_freed_handle<monarch::RdmaBuffer>(local.release(), monarch_rdma_buffer_free,
                                            [](monarch::RdmaBuffer& b) { b.size(); });
    monarch::RdmaBuffer moved = std::move(own);
    THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE, own.read_into(out));
    CHECK(moved.is_registered());
  }
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::RdmaBuffer::register_memory(nullptr, 0));
  procs.stop().get(30s);
}

}  // namespace cpp_test
