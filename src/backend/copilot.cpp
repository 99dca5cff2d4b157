// GitHub Copilot: the GitHub token is exchanged for a short-lived Copilot token, then the
// openai dialect is spoken to the Copilot API.
#include <chrono>

#include "backend/openai.hpp"

namespace ollie::backend {

namespace {

class CopilotBackend : public OpenAiBackend {
 public:
  using OpenAiBackend::OpenAiBackend;

 protected:
  void send(std::shared_ptr<StreamControl> c, HttpRequest req, std::shared_ptr<Decoder> d,
            StreamContext ctx) override {
    if (auto t = cached_token()) {
      ctx.session_secret = *t;
      add_headers(req.headers, *t);
      start_stream(c, std::move(req), std::move(d), std::move(ctx));
      return;
    }
    c->start(exchange_request(), collect([this, c, req = std::move(req), d, ctx](HttpResponse r) mutable {
      auto t = accept_token(r);
      if (!t.ok()) return c->fail(t.error());
      ctx.session_secret = *t;
      add_headers(req.headers, *t);
      start_stream(c, std::move(req), std::move(d), std::move(ctx));
    }));
  }

  Result<std::vector<std::string>> auth_headers() override {
    auto t = cached_token();
    if (!t) {
      auto r = accept_token(engine_.fetch(exchange_request()));
      if (!r.ok()) return r.error();
      t = *r;
    }
    std::vector<std::string> h;
    add_headers(h, *t);
    return h;
  }

 private:
  using Clock = std::chrono::system_clock;

  HttpRequest exchange_request() const {
    auto r = fetch_request(s_, "GET", s_.token_url);
    r.headers.push_back("Authorization: token " + s_.key);
    return r;
  }

  static void add_headers(std::vector<std::string>& h, const std::string& token) {
    h.push_back("Authorization: Bearer " + token);
    h.push_back("Copilot-Integration-Id: vscode-chat");
    h.push_back("Editor-Version: ollie/0.1");
    h.push_back("Openai-Intent: conversation-panel");
  }

  std::optional<std::string> cached_token() {
    std::lock_guard lk(tok_mu_);
    if (!token_.empty() && Clock::now() + std::chrono::seconds(60) < expires_) return token_;
    return std::nullopt;
  }

  // A token that is not a string is no token; an expiry of the wrong type or out of range
  // (before 2001 or after 2286) is ignored: the token is then kept 10 minutes.
  Result<std::string> accept_token(const HttpResponse& r) {
    if (auto e = response_error(r, context(""))) return *e;
    auto j = parse_json(r.body);
    auto t = str_field(j, "token");
    if (t.empty()) return Error{ErrorClass::client, "copilot: token exchange gave no token", static_cast<int>(r.head.status), {}};
    std::lock_guard lk(tok_mu_);
    token_ = t;
    const auto exp = int_field(j, "expires_at").value_or(0);
    const bool sane = exp > 1'000'000'000 && exp < 10'000'000'000;
    expires_ = sane ? Clock::time_point(std::chrono::seconds(exp)) : Clock::now() + std::chrono::minutes(10);
    return t;
  }

  std::mutex tok_mu_;
  std::string token_;
  Clock::time_point expires_{};
};

}  // namespace

std::unique_ptr<Backend> make_copilot(BackendSettings s, HttpEngine& e) {
  return std::make_unique<CopilotBackend>(std::move(s), e);
}

}  // namespace ollie::backend
