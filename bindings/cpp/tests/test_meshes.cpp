// cpp_test cases of meshes and calls: lifecycle, calls, slicing, views,
// errors, crashed procs, actors hosted by the controller itself.
#include <monarch/monarch.hpp>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "check.hpp"
#include "suites.hpp"

using namespace std::chrono_literals;

namespace cpp_test {

using monarch::ActorError;
using monarch::Error;

void test_lifecycle() {
  monarch::Runtime rt;
  CHECK(!rt.is_worker());
  CHECK(rt.fd() >= 0);
  auto procs = rt.spawn_procs({{"hosts", 2}, {"gpus", 2}});
  auto shape = procs.shape();
  CHECK(shape.labels() == (std::vector<std::string>{"hosts", "gpus"}));
  CHECK(shape.numel() == 4);
  auto counters = procs.spawn("c", "Counter", std::int64_t{10});
  CHECK(counters.shape().numel() == 4);
  auto vm = counters.call("incr", std::int64_t{5}).get(30s);
  CHECK(vm.size() == 4);
  for (auto v : vm.values<std::int64_t>()) CHECK(v == 15);
  // Stop the actors: later calls fail per point, procs keep running.
  counters.stop().get(30s);
  auto after = counters.call("get").get(30s);
  CHECK(after.has_errors());
  // A new actor on the same procs still works.
  auto c2 = procs.spawn("c2", "Counter");
  CHECK(c2.call("get").get(30s).values<std::int64_t>() == std::vector<std::int64_t>(4, 0));
  procs.stop().get(30s);
  // Calls after the procs stopped do not hang.
  auto f = c2.call("get");
  CHECK(f.wait_for(30s));
  try {
    auto r = f.get();
    CHECK(r.has_errors());
  } catch (const Error& e) {
    CHECK(e.status() != MONARCH_OK);
  }
}

void test_calls() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"procs", 3}});
  auto echo = procs.spawn("e", "Echo");
  // Typed arguments and results.
  auto greet = echo.call("greet", std::string("bob"), std::int32_t{2}).get(30s);
  for (auto& p : greet) CHECK(p.as<std::string>() == "hello bob;hello bob;");
  CHECK(echo.call("sum", std::vector<double>{1, 2, 3.5}).get(30s).values<double>() ==
        std::vector<double>(3, 6.5));
  // Raw parts, several of them, including an empty one.
  monarch::Bytes big(1 << 20, 7);
  auto raw = echo.slice("procs", 1)
                 .call_parts("echo", std::vector<monarch::BytesView>{monarch::BytesView("ab"),
                                                                      monarch::BytesView(),
                                                                      big},
                             monarch::CallMode::One)
                 .get(30s);
  CHECK(raw.size() == 1);
  CHECK(raw[0].size() == 3);
  CHECK(raw[0].part(0).str() == "ab");
  CHECK(raw[0].part(1).size == 0);
  CHECK(raw[0].part(2).size == big.size() && raw[0].part(2).data[12345] == 7);
  // Ranks and points.
  auto ranks = echo.call("rank").get(30s);
  std::size_t i = 0;
  for (auto& p : ranks) {
    CHECK(p.ok());
    CHECK(p.rank() == i);
    CHECK(p.point()["procs"] == i);
    CHECK(p.as<std::uint64_t>() == i);
    ++i;
  }
  CHECK(i == 3);
  // choose: one answer.
  auto one = echo.choose("rank").get(30s);
  CHECK(one.size() == 1);
  // call_one on one actor.
  CHECK(echo.slice("procs", 2).call_one("rank").get(30s).item<std::uint64_t>() == 0);
  // broadcast then a call: FIFO per sender, so the broadcast went first.
  auto counter = procs.spawn("c", "Counter");
  counter.broadcast("incr", std::int64_t{4});
  CHECK(counter.call("get").get(30s).values<std::int64_t>() == std::vector<std::int64_t>(3, 4));
  // void endpoint: zero parts.
  auto nothing = echo.call("nothing").get(30s);
  for (auto& p : nothing) CHECK(p.ok() && p.size() == 0);
  // Pipelined futures complete in any order of get().
  std::vector<monarch::Future> fs;
  for (int k = 0; k < 50; ++k) fs.push_back(counter.slice("procs", 0).call_one("incr", std::int64_t{1}));
  for (int k = 49; k >= 0; --k) CHECK(fs[k].get(30s).item<std::int64_t>() == 4 + k + 1);
  // ready()/wait_for on a slow call.
  auto slow = echo.slice("procs", 0).call_one("sleep_ms", std::int64_t{300});
  CHECK(!slow.ready());
  CHECK(!slow.wait_for(10ms));
  CHECK(slow.wait_for(30s));
  CHECK(slow.ready());
  slow.get();
  // A reference round trip.
  auto ref = counter.to_ref();
  auto again = monarch::ActorMesh::from_ref(rt, ref);
  CHECK(again.call("get").get(30s).size() == 3);
  // A proc mesh reference (of a slice): actors spawn on its procs; only
  // the owner can stop them.
  auto pref = procs.slice("procs", 1, monarch::kEnd).to_ref();
  auto procs_again = monarch::ProcMesh::from_ref(rt, pref);
  CHECK(procs_again.shape().sizes() == std::vector<std::uint64_t>{2});
  auto echo2 = procs_again.spawn("e2", "Echo");
  CHECK(echo2.call("rank").get(30s).values<std::uint64_t>() == (std::vector<std::uint64_t>{0, 1}));
  bool refused = false;
  try {
    procs_again.stop().get(30s);
  } catch (const monarch::Error&) {
    refused = true;
  }
  CHECK(refused);
  bool wrong_kind = false;
  try {
    monarch::ProcMesh::from_ref(rt, ref);
  } catch (const monarch::Error&) {
    wrong_kind = true;
  }
  CHECK(wrong_kind);
}

void test_slicing() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"hosts", 2}, {"gpus", 3}});
  auto echo = procs.spawn("e", "Echo");
  auto host1 = echo.slice("hosts", 1);
  auto s = host1.shape();
  CHECK(s.labels() == std::vector<std::string>{"gpus"});
  CHECK(s.sizes() == std::vector<std::uint64_t>{3});
  // Ranks are relative to the mesh called.
  CHECK(host1.call("rank").get(30s).values<std::uint64_t>() ==
        (std::vector<std::uint64_t>{0, 1, 2}));
  CHECK(host1.call("labels").get(30s)[0].as<std::string>() == "gpus,");
  auto tail = echo.slice("gpus", 1, monarch::kEnd);
  CHECK(tail.shape().sizes() == (std::vector<std::uint64_t>{2, 2}));
  auto vm = tail.call("rank").get(30s);
  CHECK(vm.shape().labels() == (std::vector<std::string>{"hosts", "gpus"}));
  for (auto& p : vm) {
    CHECK(p.point().coords.size() == 2);
    CHECK(p.point()["hosts"] * 2 + p.point()["gpus"] == p.rank());
  }
  auto stepped = echo.slice("gpus", 0, 3, 2).slice("hosts", -1, monarch::kEnd);
  CHECK(stepped.shape().sizes() == (std::vector<std::uint64_t>{1, 2}));
  // Proc mesh slices: spawn on a slice only.
  auto sub = procs.slice("hosts", 0);
  auto c = sub.spawn("c", "Counter", std::int64_t{1});
  CHECK(c.shape().numel() == 3);
  CHECK(c.call("get").get(30s).values<std::int64_t>() == std::vector<std::int64_t>(3, 1));
  // Bad slices are errors thrown across the boundary.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.slice("nope", 0));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.slice("hosts", 7));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.slice("hosts", 0, 2, 0));
}

void test_errors() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"procs", 2}});
  auto echo = procs.spawn("e", "Echo");
  // An endpoint that throws: an error point per rank; the actor lives on.
  auto vm = echo.call("fail").get(30s);
  CHECK(vm.has_errors());
  CHECK(!vm[1].ok() && contains(vm[1].error(), "fail on rank 1"));
  auto ae = THROWS(ActorError, vm.check());
  if (ae) {
    CHECK(ae->rank() == 0);
    CHECK(ae->status() == monarch::kEndpointFailed);
    CHECK(contains(ae->what(), "fail on rank 0"));
  }
  THROWS(ActorError, vm.values<std::int64_t>());
  THROWS(ActorError, vm[0].as<std::int64_t>());
  CHECK(echo.call("rank").get(30s).values<std::uint64_t>().size() == 2);
  // Unknown endpoint, wrong argument count and sizes.
  auto u = echo.call("nope").get(30s);
  CHECK(contains(u[0].error(), "no endpoint 'nope'"));
  auto w = echo.call("greet", std::string("x")).get(30s);
  CHECK(contains(w[0].error(), "takes 2 parts, got 1"));
  auto z = echo.call("greet", std::string("x"), std::int64_t{1}).get(30s);
  CHECK(contains(z[0].error(), "expected a part of 4 bytes"));
  // Decoding a reply as the wrong type throws locally.
  THROWS(monarch::DecodeError, echo.call("rank").get(30s)[0].as<std::int32_t>());
  // Constructors: unknown type, throwing constructor.
  auto ce = THROWS(ActorError, procs.spawn("x", "NoSuchType"));
  if (ce) CHECK(contains(ce->what(), "unknown actor type 'NoSuchType'"));
  ce = THROWS(ActorError, procs.spawn("y", "Counter", std::int64_t{-1}));
  if (ce) CHECK(contains(ce->what(), "start must be >= 0"));
  // call_one on a mesh of two actors is an invalid argument.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.call_one("rank"));
  // get(timeout) throws a timeout; the future stays usable.
  auto slow = echo.slice("procs", 0).call_one("sleep_ms", std::int64_t{500});
  auto e = THROWS(Error, slow.get(1ms));
  if (e) {
    CHECK(e->status() == MONARCH_ERR_TIMEOUT);
    CHECK(e->is_timeout());
  }
  CHECK(slow.get(30s).size() == 1);
  // Taking a result twice.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, slow.get());
  // Bad bootstrap environment.
  monarch::ProcOptions bad;
  bad.env = {"NOEQUALS"};
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, rt.spawn_procs({{"p", 1}}, bad));
}

void test_crash() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"procs", 3}});
  auto echo = procs.spawn("e", "Echo");
  // The proc of rank 2 exits while its call is in flight: that point fails
  // (promptly), the other ranks answer.
  auto vm = echo.slice("procs", 2).call_one("exit").get(30s);
  CHECK(!vm[0].ok());
  CHECK(contains(vm[0].error(), "code 3"));
  // The crash is a supervision event for this controller (the owner).
  auto ev = rt.next_supervision_event(30s);
  CHECK(ev.has_value());
  if (ev) {
    CHECK(ev->cause == monarch::SupervisionEvent::ExitCode);
    CHECK(ev->code == 3);
    CHECK(ev->ranks == std::vector<std::uint64_t>{2});
    CHECK(contains(ev->report, "exited with code 3"));
    CHECK(contains(ev->report, "'e'"));  // the actor mesh on the proc
    CHECK(ev->caused_by == nullptr);
  }
  CHECK(!rt.next_supervision_event(100ms).has_value());
  // Later calls to a view holding the dead rank fail at once.
  auto e = THROWS(Error, echo.call("rank"));
  if (e) {
    CHECK(e->status() == MONARCH_ERR_PROC_FAILED);
    CHECK(contains(e->what(), "rank 2"));
  }
  // Disjoint slices keep working.
  CHECK(echo.slice("procs", 0, 2).call("rank").get(30s).values<std::uint64_t>().size() == 2);
  // An endpoint failing under broadcast (nobody waits) fails that actor and
  // is reported too.
  auto fine = procs.slice("procs", 0, 2).spawn("f", "Echo");
  fine.slice("procs", 1).broadcast("fail");
  auto ev2 = rt.next_supervision_event(30s);
  CHECK(ev2.has_value());
  if (ev2) {
    CHECK(ev2->cause == monarch::SupervisionEvent::EndpointError);
    CHECK(ev2->mesh == "f");
    CHECK(ev2->ranks == std::vector<std::uint64_t>{1});
  }
  // Bad handles are rejected.
  std::uint8_t* b = nullptr;
  std::size_t n = 0;
  CHECK(monarch_supervision_next(nullptr, 0, &b, &n) == MONARCH_ERR_INVALID_HANDLE);
  CHECK(monarch_supervision_next(rt.handle(), 0, nullptr, &n) == MONARCH_ERR_INVALID_ARGUMENT);
}

void test_local_actors() {
  // Actors in the controller process itself, served while we wait.
  monarch::Runtime rt;
  auto me = rt.this_proc();
  auto [counter, ready] = me.spawn_async("local", "Counter",
                                         {monarch::encode(std::int64_t{7})});
  while (!ready.ready()) rt.serve_events(10);
  ready.get().check();
  auto f = counter.call("incr", std::int64_t{3});
  while (!f.ready()) rt.serve_events(10);
  auto vm = f.get();
  CHECK(vm.item<std::int64_t>() == 10);
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, vm.at(1));
  // The pull API by hand: Event::next (the event's header in one call),
  // then reply_and_free (one call for a one-part answer).
  auto f2 = counter.call("incr", std::int64_t{5});
  std::optional<monarch::Event> ev;
  for (int i = 0; i < 3000 && !ev; ++i) ev = monarch::Event::next(rt.handle(), 10);
  CHECK(ev.has_value());
  if (ev) {
    CHECK(ev->kind() == MONARCH_EVENT_MESSAGE);
    CHECK(std::string(ev->method()) == "incr");
    CHECK(ev->wants_reply());
    auto call = ev->call();
    CHECK(call.size() == 1 && call.get<std::int64_t>(0) == 5);
    ev->reply_and_free({monarch::encode(std::int64_t{99})});
    CHECK(ev->handle() == nullptr);
  }
  CHECK(f2.get(30s).item<std::int64_t>() == 99);
}

void test_views() {
  monarch::Runtime rt;
  auto procs = rt.spawn_procs({{"hosts", 2}, {"gpus", 3}});
  auto echo = procs.spawn("e", "Echo");
  // flatten: one dimension, rank r stays rank r.
  auto flat = echo.flatten("all");
  CHECK(flat.shape().labels() == std::vector<std::string>{"all"});
  CHECK(flat.shape().sizes() == std::vector<std::uint64_t>{6});
  CHECK(flat.call("rank").get(30s).values<std::uint64_t>() ==
        (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5}));
  // rename, all at once (a swap).
  auto swapped = echo.rename({{"hosts", "gpus"}, {"gpus", "hosts"}});
  CHECK(swapped.shape().labels() == (std::vector<std::string>{"gpus", "hosts"}));
  CHECK(swapped.call("labels").get(30s)[0].as<std::string>() == "gpus,hosts,");
  // split, with one inferred size; views compose.
  auto split = flat.split("all", {{"a", 3}, {"b", monarch::kInfer}});
  CHECK(split.shape().labels() == (std::vector<std::string>{"a", "b"}));
  CHECK(split.shape().sizes() == (std::vector<std::uint64_t>{3, 2}));
  auto col = split.slice("b", 1);
  CHECK(col.call("rank").get(30s).values<std::uint64_t>() == (std::vector<std::uint64_t>{0, 1, 2}));
  // Proc meshes: the same views; spawning on one.
  auto pflat = procs.flatten("p");
  CHECK(pflat.shape().sizes() == std::vector<std::uint64_t>{6});
  auto psplit = procs.split("gpus", {{"x", 1}, {"y", 3}});
  CHECK(psplit.shape().labels() == (std::vector<std::string>{"hosts", "x", "y"}));
  CHECK(procs.rename({{"gpus", "cpus"}}).shape().labels() ==
        (std::vector<std::string>{"hosts", "cpus"}));
  auto c = pflat.slice("p", 4, monarch::kEnd).spawn("c", "Counter", std::int64_t{2});
  CHECK(c.call("get").get(30s).values<std::int64_t>() == std::vector<std::int64_t>(2, 2));
  // Bad views throw with the library's message.
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, flat.split("all", {{"a", 4}, {"b", 2}}));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.rename({{"hosts", "gpus"}}));
  auto e = THROWS(Error, procs.split("nope", {{"a", 1}}));
  if (e) CHECK(e->status() == MONARCH_ERR_INVALID_ARGUMENT && contains(e->what(), "nope"));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, echo.slice("gpus", 1, 3).flatten("x"));
}

}  // namespace cpp_test
