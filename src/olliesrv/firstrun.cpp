#include "firstrun.hpp"

#include <chrono>

namespace ollie {

std::optional<std::string> first_run_warning(Hub& hub) {
  const auto conf = hub.conf();
  if (!backend::default_backend(conf, hub.env).empty()) return std::nullopt;
  // No default: new agents get ollama (§4.3). Is one there?
  auto ollama = backend::resolve_backend("ollama", conf, hub.env);
  if (!ollama) return std::nullopt;  // its own error is clearer, at the first prompt
  backend::HttpRequest req;
  req.method = "GET";
  req.url = ollama->url + "/api/version";
  req.connect_timeout = std::chrono::seconds(1);
  req.deadline = std::chrono::seconds(1);
  req.max_body = 4096;
  auto r = hub.http.fetch(std::move(req));
  if (r.end.kind == backend::TransferEnd::Kind::complete && r.head.status == 200) return std::nullopt;
  return "no model backend: none is configured and no ollama answers at " + ollama->url +
         ". Start ollama, or set one: OLLIE_BACKEND=anthropic OLLIE_ANTHROPIC_KEY=... (or openai, "
         "openrouter, gemini, copilot, kiro), or `backend=` in " + hub.config_root +
         "/backends.conf; see doc/backends.md";
}

}  // namespace ollie
