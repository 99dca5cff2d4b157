#include "firstrun.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "settings.hpp"
#include "toolsrv/catalog.hpp"

namespace ollie {

namespace {

// The model an agent would ask ollama for is only there if it was pulled: the hint names one that
// is (the first of its /api/tags), or says to pull one. A name that is not a plain model name is
// not repeated in the log.
std::string model_hint(const std::string& tags, const std::string& want) {
  const auto j = nlohmann::json::parse(tags, nullptr, false);
  const auto list = j.is_object() ? j.find("models") : j.end();
  if (list == j.end() || !list->is_array()) return "";
  std::optional<std::string> first;
  for (const auto& m : *list) {
    const auto n = m.is_object() ? m.find("name") : m.end();
    const std::string name = n != m.end() && n->is_string() ? n->get<std::string>() : "";
    if (name == want || name == want + ":latest") return "";
    const bool plain = !name.empty() && name.size() <= 128 && std::all_of(name.begin(), name.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '.' || c == '_' || c == ':' || c == '/' || c == '-';
    });
    if (plain && !first) first = name;
  }
  if (!first) return "; it has no model yet: `ollama pull " + want + "`";
  return ", and a model it has, e.g. `model = " + *first + "` in its [ollama] section (" + want + " is not pulled there)";
}

std::optional<std::string> no_backend(Hub& hub) {
  const auto conf = hub.conf();
  // A default that cannot be used (a misspelt OLLIE_BACKEND, its key unset) is said now too, in
  // agent/new's words, rather than at the first agent.
  if (const auto name = backend::default_backend(conf, hub.env); !name.empty()) {
    std::string why;
    if (auto known = check_backend(name); !known) why = known.ename();
    else if (auto r = backend::resolve_backend(name, conf, hub.env); !r) why = r.error().message;
    else return std::nullopt;
    return "default backend unusable: " + why + "; agents cannot be created without another backend=. See doc/backends.md";
  }
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
             ollama->url + ": set `backend = ollama` in " + conf_file + " (or OLLIE_BACKEND=ollama)" +
             model_hint(r.body, ollama->model) + "; see doc/backends.md";
  }
  return "no model backend: none is configured, so agents cannot be created without backend=. Set one: "
         "OLLIE_BACKEND=anthropic OLLIE_ANTHROPIC_KEY=... (or openai, openrouter, gemini, copilot, kiro, ollama), or "
         "`backend=` in " + conf_file + "; see doc/backends.md";
}

// Programs run from a build tree without `./dev.sh install` find an empty config root: the
// agents would be made, and have no tools, with nothing said.
std::optional<std::string> no_tools(const Hub& hub) {
  const auto path = hub.env("OLLIE_TOOLS_PATH").value_or("");
  for (const auto& dir : toolsrv::tool_dirs(path, hub.config_root, nullptr)) {
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".meta") return std::nullopt;
  }
  return "no tools in " + (path.empty() ? hub.config_root + "/tools" : path) +
         ": agents will have none; `./dev.sh install` installs the shipped tools, profiles and prompts (doc/data.md)";
}

}  // namespace

std::vector<std::string> first_run_warnings(Hub& hub) {
  std::vector<std::string> out;
  for (auto w : {no_backend(hub), no_tools(hub)})
    if (w) out.push_back(std::move(*w));
  return out;
}

}  // namespace ollie
