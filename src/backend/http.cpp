#include "backend/http.hpp"

#include <cstdlib>
#include <future>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include "backend/text.hpp"

namespace ollie::backend {

using Clock = std::chrono::steady_clock;

struct HttpEngine::Transfer {
  TransferId id = 0;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  HttpRequest req;
  TransferHandler h;
  HttpHead head;
  bool head_done = false;
  bool cancelled = false;
  bool too_large = false;
  std::string handler_error;  // what a handler threw; the transfer is being aborted
  std::size_t received = 0;
  Clock::time_point started = Clock::now();
  Clock::time_point last_activity = started;
  char errbuf[CURL_ERROR_SIZE] = {};

  ~Transfer() {
    curl_slist_free_all(headers);
    curl_easy_cleanup(easy);
  }

  void deliver_head() {
    if (head_done) return;
    head_done = true;
    if (h.on_head && !cancelled) h.on_head(head);
  }

  // Runs handler code: whatever it throws stops here, never in libcurl or the engine loop.
  template <class F>
  bool guarded(F&& f) noexcept {
    try {
      f();
      return true;
    } catch (const std::exception& e) {
      handler_error = e.what();
    } catch (...) {
      handler_error = "unknown exception";
    }
    if (handler_error.empty()) handler_error = "exception";
    return false;
  }
};

namespace {

std::string no_proxy() {
  // Loopback never goes through a proxy; the user's own NO_PROXY list is kept.
  std::string list = "127.0.0.1,localhost,::1";
  for (const char* v : {"no_proxy", "NO_PROXY"})
    if (const char* s = std::getenv(v); s && *s) return std::string(s) + "," + list;
  return list;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<HttpEngine::Transfer*>(user);
  const size_t len = size * n;
  t->last_activity = Clock::now();
  std::string_view line(data, len);
  if (line.substr(0, 5) == "HTTP/") {
    const auto sp = line.find(' ');
    t->head = HttpHead{};
    t->head.status = sp == std::string_view::npos ? 0 : std::atol(std::string(line.substr(sp + 1, 3)).c_str());
    return len;
  }
  line = trim(line);
  if (line.empty()) {
    if (t->head.status >= 200 && !t->guarded([t] { t->deliver_head(); })) return 0;
    return len;
  }
  if (const auto colon = line.find(':'); colon != std::string_view::npos)
    t->head.headers.emplace_back(lower(trim(line.substr(0, colon))), std::string(trim(line.substr(colon + 1))));
  return len;
}

size_t on_write(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<HttpEngine::Transfer*>(user);
  const size_t len = size * n;
  t->last_activity = Clock::now();
  if (t->cancelled) return 0;  // aborts the transfer
  t->received += len;
  if (t->req.max_body && t->received > t->req.max_body) {
    t->too_large = true;
    return 0;
  }
  const bool ok = t->guarded([&] {
    t->deliver_head();
    if (t->h.on_body && !t->cancelled) t->h.on_body(std::string_view(data, len));
  });
  return ok ? len : 0;
}

/// The end of a transfer that left the multi: its handlers, unless it was cancelled.
void finish(HttpEngine::Transfer& t, TransferEnd end) {
  if (t.cancelled) return;
  if (end.kind == TransferEnd::Kind::complete && !t.guarded([&] { t.deliver_head(); }))
    end = TransferEnd{TransferEnd::Kind::handler, "response handler failed: " + t.handler_error};
  if (!t.h.on_end || t.cancelled) return;
  if (!t.guarded([&] { t.h.on_end(end); }))
    spdlog::error("http: the end handler of {} failed: {}", t.req.url, t.handler_error);
}

}  // namespace

TransferHandler collect(std::function<void(HttpResponse)> done) {
  auto out = std::make_shared<HttpResponse>();
  return TransferHandler{
      [out](const HttpHead& h) { out->head = h; },
      [out](std::string_view b) { out->body.append(b); },
      [out, done = std::move(done)](const TransferEnd& e) {
        out->end = e;
        done(std::move(*out));
      },
  };
}

std::string_view HttpHead::header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return v;
  return {};
}

/// One curl multi on one io_context: its sockets watched by the context's reactor, its timeout a
/// steady_timer, the idle and deadline limits of its transfers another. Everything but the
/// `starting` set is touched on the context's thread only.
struct HttpEngine::Loop {
  /// A socket libcurl asked to be watched. The descriptor is curl's: released, never closed.
  struct Watch {
    Watch(asio::io_context& io, curl_socket_t s) : sd(io, s) {}
    asio::posix::stream_descriptor sd;
    int want = 0;
    bool reading = false, writing = false, gone = false;
  };

  Loop(asio::io_context& ctx, std::size_t i) : io(ctx), index(i), timer(std::in_place, ctx), watchdog(std::in_place, ctx) {
    multi = curl_multi_init();
    curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(multi, CURLMOPT_TIMERDATA, this);
  }
  ~Loop() {  // after close(): closes the connections it keeps
    *self = nullptr;
    curl_multi_cleanup(multi);
  }

  bool on_thread() const { return io.get_executor().running_in_this_thread(); }

  /// A transfer queued by start() joins the multi, unless it was cancelled first.
  void add(std::unique_ptr<Transfer> t) {
    {
      std::lock_guard lk(mu);
      if (!starting.erase(t->id) || stopped) return;
    }
    t->started = t->last_activity = Clock::now();
    // Calls on_timer: the transfer starts from there.
    if (const CURLMcode rc = curl_multi_add_handle(multi, t->easy); rc != CURLM_OK)
      return finish(*t, {TransferEnd::Kind::network, std::string("http: ") + curl_multi_strerror(rc)});
    active.emplace(t->id, std::move(t));
    arm_watchdog();
  }

  /// Takes a transfer out of the multi and of `active`.
  std::unique_ptr<Transfer> take(std::unordered_map<TransferId, std::unique_ptr<Transfer>>::iterator it) {
    std::unique_ptr<Transfer> t = std::move(it->second);
    active.erase(it);
    curl_multi_remove_handle(multi, t->easy);
    return t;
  }

  void remove(TransferId id) {
    auto it = active.find(id);
    if (it == active.end()) return;
    take(it);
    arm_watchdog();
  }

  void action(curl_socket_t s, int events) {
    if (stopped) return;
    int running = 0;
    curl_multi_socket_action(multi, s, events, &running);
    reap();
  }

  /// Ends the transfers curl has finished.
  void reap() {
    int queued = 0;
    bool ended = false;
    while (CURLMsg* m = curl_multi_info_read(multi, &queued)) {
      if (m->msg != CURLMSG_DONE) continue;
      Transfer* raw = nullptr;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&raw));
      const CURLcode rc = m->data.result;
      auto it = active.find(raw->id);
      if (it == active.end()) continue;
      std::unique_ptr<Transfer> t = take(it);
      TransferEnd end;
      if (!t->handler_error.empty()) {
        end.kind = TransferEnd::Kind::handler;
        end.message = "response handler failed: " + t->handler_error;
      } else if (t->too_large) {
        end.kind = TransferEnd::Kind::too_large;
        end.message = "response body exceeds " + byte_size(t->req.max_body);
      } else if (rc == CURLE_OPERATION_TIMEDOUT && !t->head_done) {
        end.kind = TransferEnd::Kind::connect_timeout;
        end.message = "connect timeout after " + std::to_string(t->req.connect_timeout.count()) + " ms";
      } else if (rc != CURLE_OK) {
        end.kind = TransferEnd::Kind::network;
        end.message = t->errbuf[0] ? t->errbuf : curl_easy_strerror(rc);
      }
      finish(*t, std::move(end));
      ended = true;
    }
    if (ended) arm_watchdog();  // the last transfer gone, nothing is left waiting on the context
  }

  /// The idle and deadline limits: ends the transfers past theirs, then waits for the next one.
  void expire() {
    const auto now = Clock::now();
    std::vector<std::pair<TransferId, TransferEnd>> expired;
    for (auto& [id, t] : active) {
      if (t->cancelled) continue;
      if (t->req.deadline.count() > 0 && t->started + t->req.deadline <= now) {
        expired.emplace_back(id, TransferEnd{TransferEnd::Kind::deadline, "deadline: no complete response within " +
                                                                              std::to_string(t->req.deadline.count()) + " ms"});
      } else if (t->last_activity + t->req.idle_timeout <= now) {
        expired.emplace_back(id, TransferEnd{TransferEnd::Kind::idle_timeout,
                                             "idle timeout: no byte for " + std::to_string(t->req.idle_timeout.count()) + " ms"});
      }
    }
    for (auto& [id, end] : expired) {
      auto it = active.find(id);
      if (it == active.end()) continue;  // a handler before it cancelled it
      finish(*take(it), std::move(end));
    }
    arm_watchdog();
  }

  void arm_watchdog() {
    if (stopped || !watchdog) return;
    std::optional<Clock::time_point> next;
    for (auto& [id, t] : active) {
      if (t->cancelled) continue;
      auto at = t->last_activity + t->req.idle_timeout;
      if (t->req.deadline.count() > 0) at = std::min(at, t->started + t->req.deadline);
      if (!next || at < *next) next = at;
    }
    if (!next) {
      watchdog->cancel();
      return;
    }
    watchdog->expires_at(*next);
    watchdog->async_wait([this](const std::error_code& ec) {
      if (!ec) expire();
    });
  }

  void arm(const std::shared_ptr<Watch>& w, curl_socket_t s) {
    using sd = asio::posix::stream_descriptor;
    auto wait = [this, w, s](sd::wait_type type, bool Watch::*busy, int event) {
      (*w).*busy = true;
      w->sd.async_wait(type, [this, w, s, busy, event](const std::error_code& ec) {
        (*w).*busy = false;
        if (ec || w->gone) return;
        action(s, event);
        if (!w->gone) arm(w, s);
      });
    };
    if ((w->want & CURL_POLL_IN) && !w->reading) wait(sd::wait_read, &Watch::reading, CURL_CSELECT_IN);
    if ((w->want & CURL_POLL_OUT) && !w->writing) wait(sd::wait_write, &Watch::writing, CURL_CSELECT_OUT);
  }

  // libcurl's callbacks: nothing thrown may cross its C frames (a descriptor the reactor cannot
  // register, an allocation): -1 fails the transfers on that socket instead.
  static int on_socket(CURL* e, curl_socket_t s, int what, void* user, void* sp) noexcept {
    try {
      return watch(e, s, what, user, sp);
    } catch (const std::exception& ex) {
      spdlog::error("http: watching a socket: {}", ex.what());
      return -1;
    }
  }

  static int on_timer(CURLM* m, long ms, void* user) noexcept {
    try {
      return set_timer(m, ms, user);
    } catch (const std::exception& ex) {
      spdlog::error("http: setting curl's timer: {}", ex.what());
      return -1;
    }
  }

  static int watch(CURL*, curl_socket_t s, int what, void* user, void*) {
    auto* l = static_cast<Loop*>(user);
    if (what == CURL_POLL_REMOVE) {
      if (auto it = l->sockets.find(s); it != l->sockets.end()) l->forget(*it->second);
      l->sockets.erase(s);
      return 0;
    }
    if (l->stopped) return 0;
    auto it = l->sockets.find(s);
    // Made before it is entered: a Watch that cannot be made (the reactor refused the descriptor)
    // must leave no empty entry for CURL_POLL_REMOVE to dereference.
    if (it == l->sockets.end()) it = l->sockets.emplace(s, std::make_shared<Watch>(l->io, s)).first;
    auto w = it->second;
    w->want = what;
    l->arm(w, s);
    return 0;
  }

  static int set_timer(CURLM*, long ms, void* user) {
    auto* l = static_cast<Loop*>(user);
    if (l->stopped || !l->timer) return 0;
    if (ms < 0) {
      l->timer->cancel();
      return 0;
    }
    if (ms == 0) {
      // "At once" (a transfer added, a response read): a post. A timer would cost the reactor two
      // timerfd_settime and a pass; one still waiting fires later, a spare call curl ignores.
      asio::post(l->io, [self = l->self] {
        if (*self) (*self)->action(CURL_SOCKET_TIMEOUT, 0);
      });
      return 0;
    }
    l->timer->expires_after(std::chrono::milliseconds(ms));
    l->timer->async_wait([l](const std::error_code& ec) {
      if (!ec) l->action(CURL_SOCKET_TIMEOUT, 0);
    });
    return 0;
  }

  static void forget(Watch& w) {
    w.gone = true;
    std::error_code ec;
    w.sd.cancel(ec);
    (void)w.sd.release();  // curl closes its socket
  }

  /// On the loop's thread, or once no thread runs the context: every transfer dropped without
  /// callbacks, the sockets and timers let go. The multi itself goes with the Loop.
  void close() {
    if (closed) return;
    stop_taking();
    for (auto& [id, t] : active) curl_multi_remove_handle(multi, t->easy);
    active.clear();
    for (auto& [s, w] : sockets) forget(*w);
    sockets.clear();
    timer.reset();
    watchdog.reset();
    *self = nullptr;
    closed = true;
  }

  /// From any thread: no transfer starts or waits for this loop any more.
  void stop_taking() {
    std::lock_guard lk(mu);
    stopped = true;
    starting.clear();
  }

  asio::io_context& io;
  std::size_t index;
  CURLM* multi = nullptr;
  std::optional<asio::steady_timer> timer, watchdog;
  std::shared_ptr<Loop*> self = std::make_shared<Loop*>(this);  // emptied by close(): posted work finds nobody
  std::unordered_map<TransferId, std::unique_ptr<Transfer>> active;
  std::unordered_map<curl_socket_t, std::shared_ptr<Watch>> sockets;
  std::mutex mu;
  std::unordered_set<TransferId> starting;  // started, not yet added (a cancel takes it out)
  std::atomic<bool> stopped = false;        // set under mu (with `starting`), read anywhere
  std::atomic<bool> closed = false;         // its sockets and timers let go
};

HttpEngine::HttpEngine() : own_io_(std::make_unique<asio::io_context>(1)) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  loops_.push_back(std::make_unique<Loop>(*own_io_, 0));
  own_thread_ = std::make_unique<std::thread>([io = own_io_.get()] {
    auto work = asio::make_work_guard(*io);
    io->run();
  });
}

HttpEngine::HttpEngine(const std::vector<asio::io_context*>& contexts) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  for (std::size_t i = 0; i < contexts.size(); i++) loops_.push_back(std::make_unique<Loop>(*contexts[i], i));
}

HttpEngine::~HttpEngine() { shutdown(); }

HttpEngine::Loop* HttpEngine::here() const {
  for (auto& l : loops_)
    if (l->on_thread()) return l.get();
  return nullptr;
}

void HttpEngine::shutdown() {
  if (own_thread_) {
    if (!own_thread_->joinable()) return;
    loops_.front()->stop_taking();
    asio::post(*own_io_, [l = loops_.front().get(), io = own_io_.get()] {
      l->close();
      io->stop();
    });
    own_thread_->join();
    return;
  }
  for (auto& l : loops_) {
    if (l->closed) continue;
    l->stop_taking();
    // On its own thread while that runs (its sockets and timers are the context's last work),
    // here once no thread runs the context any more.
    if (l->io.stopped()) l->close();
    else asio::post(l->io, [l = l.get()] { l->close(); });
  }
}

TransferId HttpEngine::start(HttpRequest req, TransferHandler handler) {
  auto t = std::make_unique<Transfer>();
  t->req = std::move(req);
  t->h = std::move(handler);
  CURL* e = curl_easy_init();
  t->easy = e;
  const auto& r = t->req;
  curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(r.connect_timeout.count()));
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  // A proxy's `200 Connection established` is not the response's head.
  curl_easy_setopt(e, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
  // Removing a transfer still resolving its host does not wait for the resolver's thread (the
  // removal runs on an I/O thread).
  curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);
  static const std::string noproxy = no_proxy();
  curl_easy_setopt(e, CURLOPT_NOPROXY, noproxy.c_str());
  if (r.method == "POST") {
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  } else if (r.method != "GET") {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  for (const auto& h : r.headers) t->headers = curl_slist_append(t->headers, h.c_str());
  t->headers = curl_slist_append(t->headers, "Expect:");
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
  // The loop of this thread, so the handlers run where the caller does; else the next one.
  Loop* l = here();
  if (!l) l = loops_[next_loop_++ % loops_.size()].get();
  const TransferId id = t->id = (next_id_++ << 8) | l->index;
  {
    std::lock_guard lk(l->mu);
    if (l->stopped) return id;  // never runs: dropped without callbacks
    l->starting.insert(id);
  }
  // Added from the loop, never inside one of curl's callbacks.
  asio::post(l->io, [l, t = std::move(t)]() mutable { l->add(std::move(t)); });
  return id;
}

void HttpEngine::cancel(TransferId id) {
  const std::size_t index = id & 0xff;
  if (index >= loops_.size()) return;
  Loop* l = loops_[index].get();
  {
    std::lock_guard lk(l->mu);
    if (l->stopped || l->starting.erase(id)) return;  // not added yet: it never will be
  }
  if (l->on_thread()) {
    auto it = l->active.find(id);
    if (it == l->active.end()) return;
    // Every callback asks first; the handle leaves the multi outside curl's callbacks.
    it->second->cancelled = true;
    asio::post(l->io, [l, id] { l->remove(id); });
    return;
  }
  auto removed = std::make_shared<std::promise<void>>();
  auto done = removed->get_future();
  asio::post(l->io, [l, id, removed] {
    l->remove(id);
    removed->set_value();
  });
  // Another loop's thread does not wait: two loops cancelling each other's transfers would wait
  // for ever (a stream stops delivering at its own cancel anyway, StreamControl::cancel).
  if (here()) return;
  while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready)
    if (l->closed) return;  // shut down meanwhile: the removal will never run
}
HttpResponse HttpEngine::fetch(HttpRequest req) {
  if (here())  // the transfer would be queued behind the wait itself
    return {{}, {}, {TransferEnd::Kind::network, "http: fetch on an HTTP loop's thread"}};
  const HttpResponse stopped{{}, {}, {TransferEnd::Kind::network, "http: shutting down"}};
  auto out = std::make_shared<HttpResponse>(stopped);
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  std::unique_lock lock(fetches_mu_);
  if (fetches_stopped_) return stopped;
  // The handler alone holds the promise: a transfer dropped unrun (a shut-down engine, a
  // cancelled fetch) breaks it.
  const TransferId id = start(std::move(req), collect([out, done = std::move(done)](HttpResponse r) {
                                *out = std::move(r);
                                done->set_value();
                              }));
  fetches_.insert(id);
  lock.unlock();
  fut.wait();  // also returns when the engine stops first or the fetch is stopped: `stopped` then
  lock.lock();
  fetches_.erase(id);
  return std::move(*out);
}

void HttpEngine::stop_fetches() {
  std::set<TransferId> now;
  {
    std::lock_guard lock(fetches_mu_);
    fetches_stopped_ = true;
    now = fetches_;
  }
  for (const auto id : now) cancel(id);
}

}  // namespace ollie::backend
