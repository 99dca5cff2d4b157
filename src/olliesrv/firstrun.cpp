#include "firstrun.hpp"

#include <chrono>

namespace ollie {

std::optional<std::string> first_run_warning(Hub& hub) {
  const auto conf = hub.conf();
  if (!backend::default_backend(conf, hub.env).empty()) return std::nullopt;
  // No default: an agent/new without backend= fails (§4.3). An ollama that answers is the
  // likeliest choice, so it is named when it does.
  const std::string conf_file = hub.config_root + "/backends.conf";
  if (auto ollama = backend::resolve_backend("ollama", conf, hub.env)) {
    backend::HttpRequest req;
    req.method = "GET";
    req.url = ollama->url + "/api/tags";
    req.connect_timeout = std::chrono::seconds(1);
    req.deadline = std::chrono::seconds(1);
    req.max_body = 1 << 20;
    auto r = hub.http.fetch(std::move(req));
    if (r.end.kind == backend::TransferEnd::Kind::complete && r.head.status == 200)
      return "no model backend: none is configured, so agents cannot be created without backend=. ollama answers at " +
             ollama->url + ": set `backend = ollama` in " + conf_file + " (or OLLIE_BACKEND=ollama); see doc/backends.md";
  }
  return "no model backend: none is configured, so agents cannot be created without backend=. Set one: "
         "OLLIE_BACKEND=anthropic OLLIE_ANTHROPIC_KEY=... (or openai, openrouter, gemini, copilot, kiro, ollama), or "
         "`backend=` in " + conf_file + "; see doc/backends.md";
}

}  // namespace ollie
