// monarch/server.hpp: hosting this binary's C++ actors (monarch/actor.hpp)
// over the pull API: monarch::Event (one event for them),
// monarch::ActorServer (the worker loop) and monarch::serve_if_worker (the
// first line of main() of a binary whose procs re-run it).
#ifndef MONARCH_SERVER_HPP
#define MONARCH_SERVER_HPP

#include <monarch.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <monarch/actor.hpp>
#include <monarch/call.hpp>
#include <monarch/codec.hpp>
#include <monarch/error.hpp>
#include <monarch/handle.hpp>
#include <monarch/port.hpp>
#include <monarch/process.hpp>
#include <monarch/supervision.hpp>

namespace monarch {

/// An event for the actors of this process (pull API).
class Event {
 public:
  explicit Event(monarch_event* ev) : h_(ev) {
    const char *actor = nullptr, *method = nullptr, *type = nullptr;
    detail::check(monarch_event_info(h_.get(), &kind_, &actor, &method, &type));
    actor_ = actor;
    method_ = method;
    type_ = type;
  }
  /// An event with the header monarch_runtime_next_event_header wrote
  /// (which saves the info / nparts / part 0 / wants_reply calls).
  Event(monarch_event* ev, const monarch_event_header& h)
      : h_(ev),
        kind_(h.kind),
        actor_(h.actor ? h.actor : ""),
        method_(h.method ? h.method : ""),
        type_(h.type_name ? h.type_name : ""),
        header_(true),
        header_wants_reply_(h.wants_reply),
        nparts_(h.nparts),
        part0_(h.part0),
        part0_len_(h.part0_len) {}
  /// Wait up to `timeout_ms` (-1: forever) for the next event of this
  /// process's actors; std::nullopt on timeout. Throws
  /// Error(MONARCH_ERR_STOPPED) once the runtime was shut down.
  static std::optional<Event> next(monarch_runtime* rt, std::int64_t timeout_ms) {
    monarch_event* raw = nullptr;
    monarch_event_header h{};
    monarch_status s = monarch_runtime_next_event_header(rt, timeout_ms, &raw, &h);
    if (s == MONARCH_ERR_TIMEOUT) return std::nullopt;
    detail::check(s);
    return std::optional<Event>(std::in_place, raw, h);
  }
  std::uint32_t kind() const { return kind_; }
  const char* actor() const { return actor_; }
  const char* method() const { return method_; }
  const char* type_name() const { return type_; }
  /// The event's payload, rank and shape as a Call (borrows the event).
  Call call() const {
    std::size_t n = nparts_;
    if (!header_) detail::check(monarch_event_nparts(h_.get(), &n));
    std::vector<BytesView> parts;
    parts.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (i == 0 && header_) {
        parts.emplace_back(part0_, part0_len_);
        continue;
      }
      const std::uint8_t* d = nullptr;
      std::size_t len = 0;
      detail::check(monarch_event_part(h_.get(), i, &d, &len));
      parts.emplace_back(d, len);
    }
    std::uint64_t rank = 0;
    const std::uint8_t* shape = nullptr;
    std::size_t shape_len = 0;
    detail::check(monarch_event_rank(h_.get(), &rank, &shape, &shape_len));
    return Call(std::move(parts), rank, shape, shape_len, method_, actor_);
  }
  bool wants_reply() const {
    if (header_ && !answered_) return header_wants_reply_;
    bool w = false;
    detail::check(monarch_event_wants_reply(h_.get(), &w));
    return w;
  }
  void reply(const Parts& parts = {}) {
    answered_ = true;
    std::vector<monarch_bytes> c;
    c.reserve(parts.size());
    for (auto& p : parts) c.push_back(monarch_bytes{p.data(), p.size()});
    detail::check(monarch_event_reply(h_.get(), c.data(), c.size()));
  }
  /// Answer and free the event (one call for a one-part answer:
  /// monarch_event_reply_one_and_free). Everything borrowed from the event
  /// (its Call's parts) is invalid afterwards.
  void reply_and_free(const Parts& parts) {
    answered_ = true;
    if (parts.size() == 1) {
      detail::check(monarch_event_reply_one_and_free(h_.release(), parts[0].data(), parts[0].size()));
      return;
    }
    reply(parts);
    h_.reset();
  }
  void reply_error(const std::string& message) {
    answered_ = true;
    detail::check(monarch_event_reply_error(h_.get(), message.c_str(), nullptr, 0));
  }
  /// The event's actor failed while handling it (monarch_event_fail): it
  /// is marked failed, its owner hears of it once, and the waiting sender
  /// gets the failure report.
  void fail(const std::string& message) {
    answered_ = true;
    detail::check(monarch_event_fail(h_.get(), message.c_str(), nullptr, 0));
  }
  /// Take over answering (monarch_event_take_port): the reply port its
  /// sender waits on, or std::nullopt when nobody waits. The event then
  /// counts as answered; send the answer to the port later.
  std::optional<Port> take_port() {
    answered_ = true;
    std::uint8_t* buf = nullptr;
    std::size_t len = 0;
    detail::check(monarch_event_take_port(h_.get(), &buf, &len));
    if (!buf) return std::nullopt;
    Bytes ref(buf, buf + len);
    monarch_buffer_free(buf, len);
    return Port(std::move(ref));
  }
  monarch_event* handle() const { return h_.get(); }

 private:
  detail::Handle<monarch_event, monarch_event_free> h_;
  std::uint32_t kind_ = 0;
  const char* actor_ = "";
  const char* method_ = "";
  const char* type_ = "";
  // From monarch_runtime_next_event_header (valid while `header_`).
  bool header_ = false;
  bool header_wants_reply_ = false;
  bool answered_ = false;
  std::size_t nparts_ = 0;
  const std::uint8_t* part0_ = nullptr;
  std::size_t part0_len_ = 0;
};

/// Hosts this binary's registered actors (actor_registry) for a runtime:
/// turns events into constructor / endpoint calls and answers them.
class ActorServer {
 public:
  /// Handle one event. Returns false for STOP_PROC (leave the loop).
  bool handle(Event& ev) {
    std::uint32_t kind = ev.kind();
    if (kind == MONARCH_EVENT_STOP_PROC) return false;
    Parts out;
    std::string error;
    bool failed = false;
    bool killed = false;  // an endpoint threw ActorFailure
    // Set when the endpoint took the reply port (defer_reply).
    std::optional<Port> deferred;
    bool taken = false;
    try {
      switch (kind) {
        case MONARCH_EVENT_SPAWN:
          host_.spawn(ev.actor(), ev.type_name(), ev.call());
          break;
        case MONARCH_EVENT_MESSAGE: {
          Call call = ev.call();
          call.set_reply_port_taker([&ev, &deferred, &taken]() -> Bytes {
            if (taken) throw std::logic_error("the reply port was already taken");
            deferred = ev.take_port();
            taken = true;
            return deferred ? deferred->bytes() : Bytes{};
          });
          out = host_.message(ev.actor(), call);
          break;
        }
        case MONARCH_EVENT_STOP_ACTOR:
          host_.stop(ev.actor());
          break;
        case MONARCH_EVENT_SUPERVISE: {
          Call call = ev.call();
          BytesView fb = call.part(0);
          SupervisionEvent se = SupervisionEvent::parse(fb.data, fb.size);
          if (!host_.supervise(ev.actor(), se))
            throw std::runtime_error("actor '" + std::string(ev.actor()) +
                                     "' did not handle the failure: " + se.report);
          break;
        }
        default:
          throw std::runtime_error("unknown event kind " + std::to_string(kind));
      }
    } catch (const ActorFailure& e) {
      failed = killed = true;
      error = e.what();
    } catch (const std::exception& e) {
      failed = true;
      error = e.what();
    } catch (...) {
      failed = true;
      error = "unknown C++ exception";
    }
    // An answer that cannot be delivered (typically its caller's proc is
    // gone) is logged, and this proc serves on: a dead caller must not
    // take a healthy proc down with it.
    try {
      if (killed) {
        ev.fail(error);
      } else if (taken) {
        // The endpoint answers through the port; an error after deferring
        // goes there too, so the caller does not wait forever.
        if (failed && deferred) deferred->send_error(error);
      } else if (ev.wants_reply()) {
        if (failed)
          ev.reply_error(error);
        else
          ev.reply_and_free(out);
      } else if (failed && kind == MONARCH_EVENT_MESSAGE) {
        // Nobody waits (broadcast): the runtime fails the actor and reports
        // the error to the mesh's owner.
        ev.reply_error(error);
      }
    } catch (const std::exception& e) {
      std::cerr << "monarch: cannot deliver a reply: " << e.what() << "\n";
    }
    return true;
  }
  /// Serve until the proc is stopped (or `timeout_ms` passes with no
  /// event, if not -1). Returns false once the runtime stopped / STOP_PROC.
  ///
  /// With `timeout_ms` -1 (a worker proc's loop), each actor is its own
  /// sequential worker: its events run one at a time, in order, on one
  /// thread, while the proc's other actors go on independently (an
  /// endpoint may block on another actor of its own proc). At most one
  /// thread at a time waits for the next event; it runs the event itself
  /// when it is for one of its own actors (waking an idle thread to wait
  /// meanwhile), else hands it to the actor's thread. The first actor
  /// lives on the calling thread, so a proc with one actor hands nothing
  /// over. With a finite timeout (a controller pumping its own actors,
  /// Runtime::serve_events) events run on the calling thread, in order.
  bool serve(monarch_runtime* rt, std::int64_t timeout_ms = -1) {
    if (timeout_ms == -1) return serve_workers(rt);
    for (;;) {
      monarch_event* raw = nullptr;
      monarch_event_header h{};
      monarch_status s = monarch_runtime_next_event_header(rt, timeout_ms, &raw, &h);
      if (s == MONARCH_ERR_TIMEOUT) return true;
      if (s == MONARCH_ERR_STOPPED) return false;
      detail::check(s);
      Event ev(raw, h);
      if (!handle(ev)) return false;
    }
  }
  ActorHost& host() { return host_; }

 private:
  // A thread with a queue, running the events of the actors whose home it is.
  struct Worker {
    std::deque<Event> queue;
    std::condition_variable cv;
    std::size_t actors = 0;
    std::thread thread;
  };
  // The workers of one serve_workers call; `mu` guards all of it.
  struct Pool {
    monarch_runtime* rt = nullptr;
    std::mutex mu;
    std::unordered_map<std::string, Worker*> homes;
    std::vector<Worker*> idle;
    std::vector<std::unique_ptr<Worker>> workers;  // [0]: the calling thread's
    bool leading = false;
    bool stopping = false;
  };

  bool serve_workers(monarch_runtime* rt) {
    Pool p;
    p.rt = rt;
    p.workers.push_back(std::make_unique<Worker>());
    run_worker(p, *p.workers[0]);
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lk(p.mu);
      for (std::size_t i = 1; i < p.workers.size(); ++i) threads.push_back(std::move(p.workers[i]->thread));
    }
    for (auto& t : threads)
      if (t.joinable()) t.join();
    return false;
  }

  // While nobody waits for events, an idle worker must: wake one.
  static void hand_off(Pool& p) {
    if (!p.leading && !p.idle.empty()) {
      Worker* w = p.idle.back();
      p.idle.pop_back();
      w->cv.notify_one();
    }
  }

  static void stop_all(Pool& p) {
    p.stopping = true;
    for (Worker* w : p.idle) w->cv.notify_one();
    p.idle.clear();
  }

  void run_worker(Pool& p, Worker& w) {
    std::unique_lock<std::mutex> lk(p.mu);
    for (;;) {
      if (!w.queue.empty()) {
        Event ev = std::move(w.queue.front());
        w.queue.pop_front();
        hand_off(p);
        lk.unlock();
        // Meshes its handler spawns are owned by the event's actor.
        if (ev.kind() != MONARCH_EVENT_STOP_ACTOR) monarch_runtime_set_owner(p.rt, ev.actor());
        run_event(p, w, ev);
        lk.lock();
        continue;
      }
      if (p.stopping) return;
      if (!p.leading) {
        p.leading = true;
        lk.unlock();
        lead(p, w);
        lk.lock();
        continue;
      }
      if (&w != p.workers[0].get() && w.actors == 0) return;  // its actors are gone
      p.idle.push_back(&w);
      w.cv.wait(lk);
      auto it = std::find(p.idle.begin(), p.idle.end(), &w);
      if (it != p.idle.end()) p.idle.erase(it);
    }
  }

  // Take events until one is ours (run here) or the proc stops.
  void lead(Pool& p, Worker& w) {
    for (;;) {
      monarch_event* raw = nullptr;
      monarch_event_header h{};
      monarch_status s = monarch_runtime_next_event_header(p.rt, -1, &raw, &h);
      std::unique_lock<std::mutex> lk(p.mu);
      if (s != MONARCH_OK) {
        // Stopped, or the runtime handle is gone.
        p.leading = false;
        stop_all(p);
        return;
      }
      Event ev(raw, h);
      if (ev.kind() == MONARCH_EVENT_STOP_PROC) {
        p.leading = false;
        stop_all(p);
        return;
      }
      std::string key = ev.actor();
      auto it = p.homes.find(key);
      Worker* home = it == p.homes.end() ? nullptr : it->second;
      if (!home && ev.kind() == MONARCH_EVENT_SPAWN) {
        Worker* main = p.workers[0].get();
        if (main->actors == 0) {
          home = main;
        } else {
          p.workers.push_back(std::make_unique<Worker>());
          home = p.workers.back().get();
          home->thread = std::thread([this, &p, home] { run_worker(p, *home); });
        }
        home->actors++;
        p.homes[key] = home;
      }
      if (!home || home == &w) {
        p.leading = false;
        hand_off(p);
        lk.unlock();
        run_event(p, w, ev);
        return;
      }
      home->queue.push_back(std::move(ev));
      auto idle = std::find(p.idle.begin(), p.idle.end(), home);
      if (idle != p.idle.end()) {
        p.idle.erase(idle);
        home->cv.notify_one();
      }
    }
  }

  void run_event(Pool& p, Worker& w, Event& ev) {
    bool stop = ev.kind() == MONARCH_EVENT_STOP_ACTOR;
    std::string key = stop ? ev.actor() : std::string();
    handle(ev);
    if (stop) {
      std::lock_guard<std::mutex> lk(p.mu);
      auto it = p.homes.find(key);
      if (it != p.homes.end() && it->second == &w) {
        p.homes.erase(it);
        w.actors--;
      }
    }
  }

  ActorHost host_;
};

/// First line of main(): when this process was started by a controller as
/// a proc, serve its registered actors (MONARCH_ACTOR) until the proc is
/// stopped, then exit(0); otherwise return (the runtime made here is
/// adopted by the next monarch::Runtime).
inline void serve_if_worker(int argc, char** argv) {
  (void)argc;
  (void)argv;
  monarch_runtime* rt = nullptr;
  monarch_status s = monarch_runtime_new(&rt);
  if (s != MONARCH_OK) {
    std::cerr << "monarch: cannot start the runtime: " << monarch_last_error() << "\n";
    std::exit(1);
  }
  bool worker = false;
  monarch_runtime_is_worker(rt, &worker);
  if (!worker) {
    detail::adopted_runtime() = rt;
    return;
  }
  int code = 0;
  detail::process_runtime() = rt;
  try {
    ActorServer server;
    server.serve(rt);
  } catch (const std::exception& e) {
    std::cerr << "monarch worker: " << e.what() << "\n";
    code = 1;
  }
  detail::process_runtime() = nullptr;
  monarch_runtime_free(rt);
  std::exit(code);
}

}  // namespace monarch

#endif  // MONARCH_SERVER_HPP
