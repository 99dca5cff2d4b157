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
    auto body = std::make_shared<std::string>();
    auto head = std::make_shared<HttpHead>();
    TransferHandler h;
    h.on_head = [head](const HttpHead& hd) { *head = hd; };
    h.on_body = [body](std::string_view b) { if (body->size() < (1u << 20)) body->append(b); };
    h.on_end = [this, c, req = std::move(req), d, ctx, body, head](const TransferEnd& end) mutable {
      auto t = accept_token(HttpResponse{*head, std::move(*body), end});
      if (!t.ok()) return c->fail(t.error());
      ctx.session_secret = *t;
      add_headers(req.headers, *t);
      start_stream(c, std::move(req), std::move(d), std::move(ctx));
    };
    c->start(exchange_request(), std::move(h));
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
    auto r = json_request(s_, "GET", s_.token_url, "");
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

  Result<std::string> accept_token(const HttpResponse& r) {
    if (auto e = response_error(r, context(""))) return *e;
    auto j = parse_json(r.body);
    auto t = str_field(j, "token");
    if (t.empty()) return Error{ErrorClass::client, "copilot: token exchange gave no token", static_cast<int>(r.head.status), {}};
    std::lock_guard lk(tok_mu_);
    token_ = t;
    const auto exp = j.is_object() && j.contains("expires_at") && j["expires_at"].is_number_integer()
                         ? j["expires_at"].get<std::int64_t>()
                         : 0;
    expires_ = exp ? Clock::time_point(std::chrono::seconds(exp)) : Clock::now() + std::chrono::minutes(10);
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
