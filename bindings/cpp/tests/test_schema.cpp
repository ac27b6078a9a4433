// cpp_test case `schema`: Shape and SupervisionEvent decoded from
// flatbuffers built with flatc's generated code (monarch::schema), and
// malformed buffers refused with DecodeError. Needs no procs.
#include <monarch/monarch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "check.hpp"
#include "suites.hpp"

namespace cpp_test {

namespace {
namespace fb = monarch::schema;

std::vector<std::uint8_t> finished(::flatbuffers::FlatBufferBuilder& b) {
  return std::vector<std::uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

std::vector<std::uint8_t> shape_buffer(const std::vector<std::string>& labels,
                                       std::vector<std::uint64_t> sizes,
                                       std::vector<std::uint64_t> strides, std::uint64_t offset) {
  ::flatbuffers::FlatBufferBuilder b;
  std::vector<::flatbuffers::Offset<::flatbuffers::String>> l;
  for (auto& s : labels) l.push_back(b.CreateString(s));
  b.Finish(fb::CreateShapeDirect(b, &l, offset, &sizes, &strides));
  return finished(b);
}
}  // namespace

void test_schema() {
  using monarch::DecodeError;
  auto buf = shape_buffer({"hosts", "gpus"}, {2, 3}, {3, 1}, 6);
  monarch::Shape s = monarch::Shape::parse(buf.data(), buf.size());
  CHECK(s.labels() == (std::vector<std::string>{"hosts", "gpus"}));
  CHECK(s.sizes() == (std::vector<std::uint64_t>{2, 3}));
  CHECK(s.strides() == (std::vector<std::uint64_t>{3, 1}));
  CHECK(s.offset() == 6);
  CHECK(s.numel() == 6 && s.size("gpus") == 3);
  CHECK(s.coords(4) == (std::vector<std::size_t>{1, 1}));
  // No bytes: no dimensions. Labels and sizes of different lengths, a
  // truncated buffer and garbage are refused.
  CHECK(monarch::Shape::parse(nullptr, 0).ndim() == 0);
  auto bad = shape_buffer({"a"}, {1, 2}, {}, 0);
  auto e = THROWS(DecodeError, monarch::Shape::parse(bad.data(), bad.size()));
  if (e) CHECK(contains(e->what(), "labels and sizes differ"));
  e = THROWS(DecodeError, monarch::Shape::parse(buf.data(), buf.size() / 2));
  if (e) CHECK(contains(e->what(), "malformed Shape flatbuffer"));
  std::vector<std::uint8_t> garbage(64, 0xff);
  THROWS(DecodeError, monarch::Shape::parse(garbage.data(), garbage.size()));

  // A supervision event with the event it was caused by.
  ::flatbuffers::FlatBufferBuilder b;
  std::vector<std::uint64_t> ranks{1, 3};
  std::vector<std::uint8_t> payload{7, 8, 9};
  auto cause = fb::CreateSupervisionEventDirect(b, 1, "kids", "kid", &ranks, "127.0.0.1:1", "kid",
                                                "watcher", fb::FailureCause_Signal, 9, "killed");
  b.Finish(fb::CreateSupervisionEventDirect(b, 2, "watcher", "w", nullptr, "127.0.0.1:2", "w", "",
                                            fb::FailureCause_SupervisorFailed, 0, "did not handle",
                                            cause, &payload));
  auto ev_buf = finished(b);
  auto ev = monarch::SupervisionEvent::parse(ev_buf.data(), ev_buf.size());
  CHECK(ev.id == 2 && ev.mesh == "watcher" && ev.mesh_key == "w" && ev.ranks.empty());
  CHECK(ev.proc == "127.0.0.1:2" && ev.actor == "w" && ev.owner.empty());
  CHECK(ev.cause == monarch::SupervisionEvent::SupervisorFailed && ev.code == 0);
  CHECK(ev.report == "did not handle" && ev.payload == payload);
  CHECK(ev.caused_by != nullptr);
  if (ev.caused_by) {
    const auto& c = *ev.caused_by;
    CHECK(c.id == 1 && c.mesh == "kids" && c.ranks == ranks && c.owner == "watcher");
    CHECK(c.cause == monarch::SupervisionEvent::Signal && c.code == 9 && c.report == "killed");
    CHECK(c.caused_by == nullptr && c.payload.empty());
  }
  THROWS(DecodeError, monarch::SupervisionEvent::parse(nullptr, 0));
  THROWS(DecodeError, monarch::SupervisionEvent::parse(ev_buf.data(), ev_buf.size() - 8));
  THROWS(DecodeError, monarch::SupervisionEvent::parse(garbage.data(), garbage.size()));
}

}  // namespace cpp_test
