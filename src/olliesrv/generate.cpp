#include "generate.hpp"

#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <memory>
#include <mutex>
#include <optional>

#include "backend/backend.hpp"
#include "backend/text.hpp"
#include "hub.hpp"
#include "olliesrv.hpp"
#include "profile.hpp"
#include "request.hpp"
#include "settings.hpp"
#include "virtfs/signal.hpp"
#include "virtfs/tokenize.hpp"

namespace ollie {

namespace detail {
extern const unsigned char complete_prompt_data[];  // generated from data/prompts/complete.md
extern const std::size_t complete_prompt_size;
}  // namespace detail

namespace {

using D = virtfs::Dsl<Ctx>;
using Text = p9::Result<std::string>;
using Reply = asio::awaitable<Text>;

constexpr std::string_view cursor = "{{CURSOR}}";
/// The longest answer kept; a provider that streams more fails the request.
constexpr std::size_t max_answer = 16u << 20;

// ---- the request (§2.2) ------------------------------------------------------------------------

struct Request {
  KeyValues header;
  std::string body;
};

/// True when `line` is entirely `key=value` tokens with keys from `keys` (§1.3 quoting).
bool header_line(std::string_view line, std::initializer_list<std::string_view> keys) {
  auto toks = virtfs::tokenize(line);
  if (!toks) return false;
  for (const auto& t : *toks) {
    const auto eq = t.find('=');
    if (eq == std::string::npos || eq == 0) return false;
    if (std::find(keys.begin(), keys.end(), std::string_view(t).substr(0, eq)) == keys.end()) return false;
  }
  return true;
}

/// Header lines up to the first empty line (blanks only: a CRLF or a stray space ends it as well,
/// §1.3) when every one is key=value tokens with known keys; otherwise the whole request is the
/// body. A key given twice is `duplicate key: <k>`.
p9::Result<Request> split_header(const std::string& text, std::initializer_list<std::string_view> keys) {
  Request r;
  const auto blank = [](std::string_view l) { return l.find_first_not_of(" \t\r") == std::string_view::npos; };
  for (std::size_t at = 0;;) {
    const auto nl = text.find('\n', at);
    const std::string_view line = std::string_view(text).substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (nl == std::string::npos || !(blank(line) || header_line(line, keys))) {
      r.body = text;
      return r;
    }
    if (blank(line)) {
      auto kv = parse_request(std::string_view(text).substr(0, at), keys);
      if (!kv) return kv.error();
      r.header = std::move(*kv);
      r.body = text.substr(nl + 1);
      return r;
    }
    at = nl + 1;
  }
}

/// A completion without the Markdown fence a model may wrap it in despite its prompt.
std::string strip_fences(std::string reply) {
  const std::string t(backend::trim(reply));
  if (t.size() < 6 || t.rfind("```", 0) != 0 || t.compare(t.size() - 3, 3, "```") != 0) return reply;
  const auto nl = t.find('\n');
  if (nl == std::string::npos || nl + 1 > t.size() - 3) return reply;
  std::string inner = t.substr(nl + 1, t.size() - 3 - (nl + 1));
  if (!inner.empty() && inner.back() == '\n') inner.pop_back();
  return inner;
}

// Braced lists of literals stay out of coroutines (a GCC 12 bug): the keys are parsed here.
p9::Result<Request> generate_request(const std::string& text) { return split_header(text, {"backend", "model", "system"}); }
p9::Result<Request> complete_request(const std::string& text) { return split_header(text, {"backend", "model", "lang"}); }

// ---- one LLM request ---------------------------------------------------------------------------

struct Answer {
  std::mutex mu;
  bool finished = false;
  std::optional<backend::Error> error;
  std::string text;
  virtfs::Signal signal;
};

/// A backend, or why there is none (co_spawn needs a default-constructible result).
struct Built {
  std::shared_ptr<backend::Backend> backend;
  std::string error;
};

/// The backend for a choice, built on the blocking pool (resolution may read the Kiro token
/// database).
asio::awaitable<Built> make(Hub& hub, BackendChoice choice) {
  auto build = [&hub, choice]() -> asio::awaitable<Built> {
    Built out;
    auto settings = backend::resolve_backend(choice.backend, hub.conf(), hub.env);
    if (!settings) {
      out.error = settings.error().message;
      co_return out;
    }
    if (!choice.model.empty()) settings->model = choice.model;
    auto made = backend::make_backend(std::move(*settings), hub.http);
    if (!made) out.error = made.error().message;
    else out.backend = std::move(*made);
    co_return out;
  };
  co_return co_await asio::co_spawn(hub.blocking, build, asio::use_awaitable);
}

/// One of a principal's `generate`/`complete` requests under way, or none left: an agent that
/// opened a thousand of them took every descriptor olliesrv had, and locked everyone out.
constexpr int max_asking = 16;
class Asking {
 public:
  Asking(Hub& hub, std::string who) : hub_(hub), who_(std::move(who)) {
    std::lock_guard lock(hub_.asking_mu);
    int& n = hub_.asking[who_];
    ok_ = n < max_asking;
    if (ok_) n++;
    else if (n == 0) hub_.asking.erase(who_);
  }
  ~Asking() {
    if (!ok_) return;
    std::lock_guard lock(hub_.asking_mu);
    if (--hub_.asking[who_] == 0) hub_.asking.erase(who_);
  }
  Asking(const Asking&) = delete;
  Asking& operator=(const Asking&) = delete;
  bool ok() const { return ok_; }

 private:
  Hub& hub_;
  std::string who_;
  bool ok_ = false;
};

const std::string too_many = "too many requests at once (limit " + std::to_string(max_asking) + ")";

/// Sends `req` and waits for the whole answer. A cancelled wait (Tflush) destroys the stream,
/// which aborts the HTTP transfer.
Reply ask(Hub& hub, BackendChoice choice, backend::ChatRequest req) {
  auto built = co_await make(hub, choice);
  if (!built.backend) co_return p9::error(built.error);
  auto& be = built.backend;
  auto answer = std::make_shared<Answer>();
  auto sink = [answer](backend::StreamEvent ev) {
    using K = backend::StreamEvent::Kind;
    {
      std::lock_guard lock(answer->mu);
      if (answer->finished) return;
      switch (ev.kind) {
        case K::content:
          if (answer->text.size() + ev.text.size() > max_answer) {
            answer->error = backend::Error{backend::ErrorClass::client, "answer too large", 0, {}};
            answer->finished = true;
            break;
          }
          answer->text += ev.text;
          return;
        case K::reasoning:
        case K::tool_call:
          return;
        case K::done:
          answer->finished = true;
          break;
        case K::error:
          answer->error = std::move(ev.error);
          answer->finished = true;
          break;
      }
    }
    answer->signal.notify();
  };
  req.model = be->model();
  auto started = be->stream(req, sink);
  if (!started) co_return p9::error(started.error().message);
  backend::Stream transfer = std::move(*started);
  for (;;) {
    const auto seen = answer->signal.version();
    {
      std::lock_guard lock(answer->mu);
      if (answer->finished) break;
    }
    co_await answer->signal.wait(seen);
  }
  transfer.cancel();
  std::lock_guard lock(answer->mu);
  if (answer->error) co_return p9::error(answer->error->message);
  co_return std::move(answer->text);
}

backend::ChatRequest chat(std::string system, std::string prompt) {
  backend::ChatRequest req;
  req.system = std::move(system);
  backend::Message m;
  m.role = backend::Role::user;
  m.content = std::move(prompt);
  req.messages.push_back(std::move(m));
  return req;
}

/// Backend and model as for a new agent without a profile (§4.3).
p9::Result<BackendChoice> choose(Hub& hub, const std::string& backend, const std::string& model) {
  const Profile none;
  SettingsInput in;
  in.backend = backend;
  in.model = model;
  in.profile = &none;
  return resolve_backend_choice(in, hub.conf(), hub.env);
}

// ---- the files ---------------------------------------------------------------------------------

Reply generate(Ctx& c, std::string request) {
  auto& hub = c.srv->hub();
  auto r = generate_request(request);
  if (!r) co_return r.error();
  if (backend::trim(r->body).empty()) co_return p9::error("empty prompt");
  auto choice = choose(hub, r->header.get("backend"), r->header.get("model"));
  if (!choice) co_return choice.error();
  Asking slot(hub, c.who.uname);
  if (!slot.ok()) co_return p9::error(too_many);
  co_return co_await ask(hub, *choice, chat(r->header.get("system"), std::move(r->body)));
}

std::string complete_prompt() {
  return std::string(reinterpret_cast<const char*>(detail::complete_prompt_data), detail::complete_prompt_size);
}

Reply complete(Ctx& c, std::string request) {
  auto& hub = c.srv->hub();
  auto r = complete_request(request);
  if (!r) co_return r.error();
  const auto first = r->body.find(cursor);
  if (first == std::string::npos) co_return p9::error("missing cursor marker");
  if (r->body.find(cursor, first + cursor.size()) != std::string::npos) co_return p9::error("more than one cursor marker");
  // OLLIE_COMPLETE_MODEL belongs to OLLIE_COMPLETE_BACKEND: it is not sent to another backend.
  const std::string env_backend = hub.env("OLLIE_COMPLETE_BACKEND").value_or("");
  std::string backend = r->header.get("backend"), model = r->header.get("model");
  if (model.empty() && (backend.empty() || backend == env_backend)) model = hub.env("OLLIE_COMPLETE_MODEL").value_or("");
  if (backend.empty()) backend = env_backend;
  auto choice = choose(hub, backend, model);
  if (!choice) co_return choice.error();
  std::string system = complete_prompt();
  while (!system.empty() && system.back() == '\n') system.pop_back();  // the file's last newline
  if (const auto lang = r->header.get("lang"); !lang.empty()) system += "\n\nThe code is " + lang + ".";
  Asking slot(hub, c.who.uname);
  if (!slot.ok()) co_return p9::error(too_many);
  auto answer = co_await ask(hub, *choice, chat(std::move(system), std::move(r->body)));
  if (!answer) co_return answer.error();
  co_return strip_fences(std::move(*answer));
}

}  // namespace

std::vector<virtfs::Node<Ctx>> generate_files() {
  using namespace virtfs;
  std::vector<Node<Ctx>> files;
  files.push_back(D::Leaf("complete", Mode{0666},
                          Doc{"code completion: [backend= model= lang= header, empty line] code with one {{CURSOR}}; reply: the insertion"},
                          Rdwr(complete)));
  files.push_back(D::Leaf("generate", Mode{0666},
                          Doc{"one LLM request: [backend= model= system= header, empty line] prompt; reply: the answer"},
                          Rdwr(generate)));
  return files;
}

}  // namespace ollie
