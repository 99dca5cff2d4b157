#pragma once
// Internal: what every provider adapter shares: settings, current model, caches, the
// blocking JSON fetch used for model lists and metadata.

#include <map>
#include <mutex>
#include <optional>

#include "backend/backend.hpp"
#include "backend/stream.hpp"
#include "backend/wire.hpp"

namespace ollie::backend {

class HttpBackend : public Backend {
 public:
  HttpBackend(BackendSettings s, HttpEngine& e) : s_(std::move(s)), engine_(e), model_(s_.model) {}
  const std::string& name() const override { return s_.name; }
  std::string model() const override;
  void set_model(std::string m) override;

 protected:
  /// The request's model, else the current one.
  std::string pick_model(const ChatRequest& req) const;
  /// Classification context for a request to `model`.
  StreamContext context(std::string model, std::size_t request_bytes = 0) const;
  std::shared_ptr<StreamControl> control(EventSink sink) {
    return std::make_shared<StreamControl>(engine_, std::move(sink));
  }
  /// Fetches and parses a JSON document, classifying failures (blocking).
  Result<json> fetch_json(HttpRequest req, const std::string& model = {});
  /// Cached model list, filled by `load` on first use.
  Result<std::vector<std::string>> cached_models(
      const std::function<Result<std::vector<std::string>>()>& load);

  BackendSettings s_;
  HttpEngine& engine_;
  mutable std::mutex mu_;
  std::string model_;
  std::map<std::string, int, std::less<>> ctx_cache_;
  std::optional<std::vector<std::string>> models_;
};

/// Builders of each provider (one file each).
std::unique_ptr<Backend> make_openai(BackendSettings s, HttpEngine& e);
std::unique_ptr<Backend> make_copilot(BackendSettings s, HttpEngine& e);
std::unique_ptr<Backend> make_anthropic(BackendSettings s, HttpEngine& e);
std::unique_ptr<Backend> make_ollama(BackendSettings s, HttpEngine& e);
std::unique_ptr<Backend> make_gemini(BackendSettings s, HttpEngine& e);
std::unique_ptr<Backend> make_kiro(BackendSettings s, HttpEngine& e);

}  // namespace ollie::backend
