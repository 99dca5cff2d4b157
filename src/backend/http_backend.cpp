#include "backend/http_backend.hpp"

namespace ollie::backend {

std::string HttpBackend::model() const {
  std::lock_guard lk(mu_);
  return model_;
}

void HttpBackend::set_model(std::string m) {
  std::lock_guard lk(mu_);
  model_ = std::move(m);
}

std::string HttpBackend::pick_model(const ChatRequest& req) const {
  return req.model.empty() ? model() : req.model;
}

StreamContext HttpBackend::context(std::string model, std::size_t request_bytes) const {
  StreamContext c;
  c.backend = s_.name;
  c.key_var = s_.key_var;
  c.model = std::move(model);
  c.secret = s_.key;
  c.request_bytes = request_bytes;
  return c;
}

Result<json> HttpBackend::fetch_json(HttpRequest req, const std::string& model) {
  const auto ctx = context(model);
  auto r = engine_.fetch(std::move(req));
  if (auto e = response_error(r, ctx)) return *e;
  auto j = parse_json(r.body);
  if (j.is_discarded()) return unparsable(s_.name, r.body, static_cast<int>(r.head.status));
  return j;
}

Result<std::vector<std::string>> HttpBackend::cached_models(
    const std::function<Result<std::vector<std::string>>()>& load) {
  {
    std::lock_guard lk(mu_);
    if (models_) return *models_;
  }
  auto r = load();
  if (r.ok()) {
    std::lock_guard lk(mu_);
    models_ = *r;
  }
  return r;
}

Result<std::unique_ptr<Backend>> make_backend(BackendSettings s, HttpEngine& e) {
  const std::string n = s.name;
  if (n == "openai" || n == "openrouter") return make_openai(std::move(s), e);
  if (n == "copilot") return make_copilot(std::move(s), e);
  if (n == "anthropic") return make_anthropic(std::move(s), e);
  if (n == "ollama") return make_ollama(std::move(s), e);
  if (n == "gemini") return make_gemini(std::move(s), e);
  if (n == "kiro") return make_kiro(std::move(s), e);
  return Error{ErrorClass::config, "unknown backend: " + n, 0, {}};
}

}  // namespace ollie::backend
