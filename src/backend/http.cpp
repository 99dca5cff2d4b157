#include "backend/http.hpp"

#include <cstdlib>
#include <future>

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

HttpEngine::HttpEngine() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  multi_ = curl_multi_init();
  thread_ = std::thread([this] { run(); });
}

HttpEngine::~HttpEngine() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  curl_multi_wakeup(static_cast<CURLM*>(multi_));
  thread_.join();
  for (auto& [id, t] : active_) curl_multi_remove_handle(static_cast<CURLM*>(multi_), t->easy);
  active_.clear();
  to_add_.clear();
  curl_multi_cleanup(static_cast<CURLM*>(multi_));
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
  TransferId id;
  {
    std::lock_guard lk(mu_);
    id = t->id = next_id_++;
    to_add_.push_back(std::move(t));
  }
  curl_multi_wakeup(static_cast<CURLM*>(multi_));
  return id;
}

void HttpEngine::cancel(TransferId id) {
  if (on_engine_thread()) {
    if (auto it = active_.find(id); it != active_.end()) it->second->cancelled = true;
    std::lock_guard lk(mu_);
    to_cancel_.push_back(id);
    return;
  }
  std::unique_lock lk(mu_);
  if (stopping_) return;
  to_cancel_.push_back(id);
  const auto seen = pass_;
  curl_multi_wakeup(static_cast<CURLM*>(multi_));
  cv_.wait(lk, [&] { return pass_ > seen || stopping_; });
}

HttpResponse HttpEngine::fetch(HttpRequest req) {
  auto out = std::make_shared<HttpResponse>();
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  start(std::move(req), collect([out, done](HttpResponse r) {
          *out = std::move(r);
          done->set_value();
        }));
  fut.wait();  // also returns when the engine stops first: the response is then empty
  return std::move(*out);
}

void HttpEngine::remove(TransferId id) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  curl_multi_remove_handle(static_cast<CURLM*>(multi_), it->second->easy);
  active_.erase(it);
}

void HttpEngine::finish(Transfer& t, TransferEnd end) {
  if (t.cancelled) return;
  if (end.kind == TransferEnd::Kind::complete && !t.guarded([&] { t.deliver_head(); }))
    end = TransferEnd{TransferEnd::Kind::handler, "response handler failed: " + t.handler_error};
  if (!t.h.on_end || t.cancelled) return;
  if (!t.guarded([&] { t.h.on_end(end); }))
    spdlog::error("http: the end handler of {} failed: {}", t.req.url, t.handler_error);
}

void HttpEngine::run() {
  auto* multi = static_cast<CURLM*>(multi_);
  for (;;) {
    std::vector<std::unique_ptr<Transfer>> adds;
    std::vector<TransferId> cancels;
    bool stop;
    {
      std::lock_guard lk(mu_);
      adds.swap(to_add_);
      cancels.swap(to_cancel_);
      stop = stopping_;
      ++pass_;
    }
    cv_.notify_all();
    for (auto id : cancels) {
      std::erase_if(adds, [id](const auto& t) { return t->id == id; });
      remove(id);
    }
    if (stop) return;
    for (auto& t : adds) {
      t->started = t->last_activity = Clock::now();
      curl_multi_add_handle(multi, t->easy);
      active_.emplace(t->id, std::move(t));
    }

    int running = 0;
    curl_multi_perform(multi, &running);
    int queued = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &queued)) {
      if (m->msg != CURLMSG_DONE) continue;
      Transfer* raw = nullptr;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&raw));
      const CURLcode rc = m->data.result;
      auto it = active_.find(raw->id);
      if (it == active_.end()) continue;
      std::unique_ptr<Transfer> t = std::move(it->second);
      active_.erase(it);
      curl_multi_remove_handle(multi, t->easy);
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
    }

    const auto now = Clock::now();
    auto wait = std::chrono::milliseconds(1000);
    std::vector<std::pair<TransferId, TransferEnd>> expired;
    for (auto& [id, t] : active_) {
      if (t->cancelled) continue;
      const auto idle = t->last_activity + t->req.idle_timeout;
      const bool has_deadline = t->req.deadline.count() > 0;
      const auto deadline = t->started + t->req.deadline;
      if (has_deadline && deadline <= now) {
        expired.emplace_back(id, TransferEnd{TransferEnd::Kind::deadline,
                                             "deadline: no complete response within " +
                                                 std::to_string(t->req.deadline.count()) + " ms"});
      } else if (idle <= now) {
        expired.emplace_back(id, TransferEnd{TransferEnd::Kind::idle_timeout,
                                             "idle timeout: no byte for " + std::to_string(t->req.idle_timeout.count()) + " ms"});
      } else {
        wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(idle - now));
        if (has_deadline) wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(deadline - now));
      }
    }
    for (auto& [id, end] : expired) {
      auto it = active_.find(id);
      std::unique_ptr<Transfer> t = std::move(it->second);
      active_.erase(it);
      curl_multi_remove_handle(multi, t->easy);
      finish(*t, std::move(end));
    }
    if (!expired.empty()) continue;
    curl_multi_poll(multi, nullptr, 0, static_cast<int>(std::max<long>(wait.count(), 0)), nullptr);
  }
}

}  // namespace ollie::backend
