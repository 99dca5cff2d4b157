#include "backend/stream.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>

#include "backend/limits.hpp"
#include "backend/text.hpp"

namespace ollie::backend {

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    cancel();
    c_ = std::move(o.c_);
  }
  return *this;
}

Stream::~Stream() { cancel(); }

void Stream::cancel() {
  if (c_) c_->cancel();
  c_.reset();
}

bool StreamControl::start(HttpRequest req, TransferHandler h) {
  std::lock_guard lk(mu_);
  if (closed_) return false;
  // The end handler runs once the engine has dropped the transfer (on its thread, after this
  // returns: it takes mu_ first), so a cancel after it has nothing to ask of the engine.
  h.on_end = [self = weak_from_this(), seq = ++starts_, end = std::move(h.on_end)](const TransferEnd& e) {
    if (auto c = self.lock()) {
      std::lock_guard lk(c->mu_);
      if (c->starts_ == seq) c->current_ = 0;
    }
    if (end) end(e);
  };
  current_ = engine_.start(std::move(req), std::move(h));
  return true;
}

void StreamControl::cancel() {
  TransferId id;
  {
    std::lock_guard lk(mu_);
    closed_ = true;
    id = current_;
  }
  if (id) engine_.cancel(id);
}

void StreamControl::emit(StreamEvent ev) {
  const bool terminal = ev.kind == StreamEvent::Kind::done || ev.kind == StreamEvent::Kind::error;
  {
    std::lock_guard lk(mu_);
    if (closed_) return;
    if (terminal) closed_ = true;
  }
  sink_(std::move(ev));
}

void StreamControl::fail(Error e) {
  StreamEvent ev;
  ev.kind = StreamEvent::Kind::error;
  ev.error = std::move(e);
  emit(std::move(ev));
}

bool Decoder::past_output(std::size_t more) {
  out_bytes += more;
  if (out_bytes <= limits::response_output) return false;
  fail(Error{ErrorClass::client, backend_ + ": response exceeds " + byte_size(limits::response_output), 200, {}});
  return true;
}

void Decoder::text(std::string_view s) {
  if (s.empty() || past_output(s.size())) return;
  StreamEvent ev;
  ev.kind = StreamEvent::Kind::content;
  ev.text.assign(s);
  c_->emit(std::move(ev));
}

void Decoder::reasoning(std::string_view s) {
  if (s.empty() || past_output(s.size())) return;
  StreamEvent ev;
  ev.kind = StreamEvent::Kind::reasoning;
  ev.text.assign(s);
  c_->emit(std::move(ev));
}

Decoder::Decoder(std::shared_ptr<StreamControl> c, std::string backend) : c_(std::move(c)), backend_(std::move(backend)) {
  // Numbered from the start time in ms: distinct within a run and from the ids of earlier runs
  // that a restored history holds.
  static std::atomic<std::uint64_t> responses{static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count())};
  id_prefix_ = "call_" + std::to_string(responses++) + "_";
}

std::string Decoder::generated_id() const { return id_prefix_ + std::to_string(calls); }

void Decoder::call(ToolCall tc) {
  if (past_output(tc.name.size() + tc.arguments.size())) return;
  // An id given twice in one response would pair one result with two calls, which providers
  // refuse at the next request: the repeat gets an id of its own, as a call without one does.
  if (tc.id.empty() || !ids_.insert(tc.id).second) tc.id = generated_id();
  ++calls;
  StreamEvent ev;
  ev.kind = StreamEvent::Kind::tool_call;
  ev.call = std::move(tc);
  c_->emit(std::move(ev));
}

bool Decoder::malformed(const Strict& f) {
  if (f.ok()) return false;
  fail(ollie::backend::malformed(backend_, f.problem()));
  return true;
}

bool Decoder::too_long(std::size_t size, std::string_view what) {
  if (size <= limits::tool_call) return false;
  fail(Error{ErrorClass::client, backend_ + ": " + std::string(what) + " exceed " + byte_size(limits::tool_call), 200, {}});
  return true;
}

void Decoder::event_too_long() {
  fail(Error{ErrorClass::client, backend_ + ": response event exceeds " + byte_size(limits::event_data), 200, {}});
}

Error transport_error(std::string_view backend, const TransferEnd& end) {
  // An answer too large to hold, or one our handler could not take, is no network accident.
  const bool answer = end.kind == TransferEnd::Kind::too_large || end.kind == TransferEnd::Kind::handler;
  return Error{answer ? ErrorClass::client : ErrorClass::transient, std::string(backend) + ": " + end.message, 0, {}};
}

namespace {

std::string redact_all(std::string text, const StreamContext& ctx) {
  return redact(redact(std::move(text), ctx.secret), ctx.session_secret);
}

// A provider's text as it leaves the library (a message, a stop reason): no secret (redacted
// before the cut, so no piece of one survives it), one line (§8.2's blocks), valid UTF-8, at
// most limits::error_text bytes.
std::string outward(std::string text, const StreamContext& ctx) {
  return clip(one_line(redact_all(std::move(text), ctx)), limits::error_text);
}

}  // namespace

std::optional<Error> response_error(const HttpResponse& r, const StreamContext& ctx) {
  if (r.end.kind != TransferEnd::Kind::complete) {
    auto e = transport_error(ctx.backend, r.end);
    e.message = outward(std::move(e.message), ctx);
    return e;
  }
  if (r.head.status >= 200 && r.head.status < 300) return std::nullopt;
  const std::string body = redact_all(r.body, ctx);
  spdlog::debug("{}: HTTP {}: {}", ctx.backend, r.head.status, body.substr(0, 2000));
  std::optional<Error> e;
  if (ctx.classify) e = ctx.classify(static_cast<int>(r.head.status), body);
  if (!e)
    e = classify_http(HttpFailure{ctx.backend, ctx.key_var, ctx.model, static_cast<int>(r.head.status),
                                  body, r.head.header("retry-after"), ctx.secret});
  e->message = outward(std::move(e->message), ctx);
  return e;
}

namespace {

struct Run {
  std::shared_ptr<StreamControl> c;
  std::shared_ptr<Decoder> dec;
  StreamContext ctx;
  long status = 0;
  std::string retry_after;
  std::string content_type;
  std::string error_body;
  bool stopped = false;  // the decoder failed; ignore the rest
};

/// `text/html; charset=utf-8` → `text/html`.
std::string media_type(std::string_view content_type) { return lower(trim(content_type.substr(0, content_type.find(';')))); }

/// The request failed with an HTTP status (§8.2), classified from the error body kept.
void fail_status(Run& r) {
  HttpResponse resp;
  resp.head.status = r.status;
  resp.head.headers.emplace_back("retry-after", r.retry_after);
  resp.body = std::move(r.error_body);
  auto e = *response_error(resp, r.ctx);
  spdlog::warn("{} ({})", e.message, class_name(e.cls));
  r.c->fail(std::move(e));
}

void finish(Run& r, const TransferEnd& end) {
  if (r.stopped) return;
  auto& d = *r.dec;
  if (r.status == 0 || (end.kind != TransferEnd::Kind::complete && end.kind != TransferEnd::Kind::network)) {
    auto e = transport_error(r.ctx.backend, end);
    e.message = outward(std::move(e.message), r.ctx);
    spdlog::warn("{}", e.message);
    r.c->fail(std::move(e));
    return;
  }
  if (r.status < 200 || r.status >= 300) {
    fail_status(r);
    return;
  }
  d.end(end.kind == TransferEnd::Kind::complete);
  if (d.failure) {
    d.failure->message = outward(d.failure->message, r.ctx);
    spdlog::warn("{} ({})", d.failure->message, class_name(d.failure->cls));
    r.c->fail(*d.failure);
    return;
  }
  if (!d.done && d.out_bytes == 0 && d.calls == 0) {
    // A page or one JSON object (a proxy's, a server that ignored `stream`) is no stream that
    // dropped, to be tried again: an unparsable response (§8.2).
    const std::string type = media_type(r.content_type);
    if (type == "text/html" || type == "application/json") {
      Error e{ErrorClass::client, r.ctx.backend + ": unparsable response: " + type + ", not a stream",
              static_cast<int>(r.status), {}};
      spdlog::warn("{}", e.message);
      r.c->fail(std::move(e));
      return;
    }
  }
  if (!d.done) {
    Error e{ErrorClass::stream_drop,
            r.ctx.backend + ": stream dropped: " +
                (end.kind == TransferEnd::Kind::complete ? std::string("ended without the done marker")
                                                         : end.message),
            static_cast<int>(r.status), {}};
    spdlog::warn("{}", e.message);
    r.c->fail(std::move(e));
    return;
  }
  StreamEvent ev;
  ev.kind = StreamEvent::Kind::done;
  ev.usage = d.usage;
  if (!d.has_usage) {
    ev.usage = Usage{};
    ev.usage.input = static_cast<std::int64_t>(r.ctx.request_bytes / 4);
    ev.usage.output = static_cast<std::int64_t>(d.out_bytes / 4);
    ev.usage.estimated = true;
  }
  ev.stop = d.stop_raw.empty() ? (d.calls ? StopReason::tool_calls : StopReason::end)
                               : map_stop_reason(d.stop_raw);
  ev.stop_raw = outward(std::move(d.stop_raw), r.ctx);  // shown in an error block (`stopped: <raw>`)
  ev.reasoning_items = std::move(d.reasoning_items);
  r.c->emit(std::move(ev));
}

}  // namespace

bool start_stream(const std::shared_ptr<StreamControl>& c, HttpRequest req,
                  std::shared_ptr<Decoder> dec, StreamContext ctx) {
  auto run = std::make_shared<Run>(Run{c, std::move(dec), std::move(ctx)});
  spdlog::debug("{}: {} {}", run->ctx.backend, req.method, req.url);
  TransferHandler h;
  h.on_head = [run](const HttpHead& head) {
    run->status = head.status;
    run->retry_after = std::string(head.header("retry-after"));
    run->content_type = std::string(head.header("content-type"));
  };
  h.on_body = [run](std::string_view b) {
    if (run->stopped) return;
    if (run->status < 200 || run->status >= 300) {
      // Enough of an error body to classify it; one that goes on past that (never ending, for
      // all we know) ends the transfer now, as its end would.
      run->error_body.append(b.substr(0, limits::response_body - run->error_body.size()));
      if (run->error_body.size() < limits::response_body) return;
      run->stopped = true;
      fail_status(*run);
      run->c->cancel();
      return;
    }
    run->dec->feed(b);
    if (run->dec->failure) {
      // A provider error inside the stream ends it now; the transfer is no longer wanted.
      run->stopped = true;
      run->dec->failure->message = outward(run->dec->failure->message, run->ctx);
      spdlog::warn("{} ({})", run->dec->failure->message, class_name(run->dec->failure->cls));
      run->c->fail(*run->dec->failure);
      run->c->cancel();
    }
  };
  h.on_end = [run](const TransferEnd& end) { finish(*run, end); };
  return c->start(std::move(req), std::move(h));
}

}  // namespace ollie::backend
