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

// What an ollama's model list (its /api/tags) says of the model an agent would ask for: an agent
// gets it only if it was pulled. The first model listed is named as one it has; a name that is
// not a plain model name is not repeated in the log.
struct Pulled {
  bool listed = false;  // a list of the expected shape
  bool want = false;    // the model asked for is in it
  std::optional<std::string> first;
};

Pulled pulled(const std::string& tags, const std::string& want) {
  Pulled p;
  const auto j = nlohmann::json::parse(tags, nullptr, false);
  const auto list = j.is_object() ? j.find("models") : j.end();
  if (list == j.end() || !list->is_array()) return p;
  p.listed = true;
  for (const auto& m : *list) {
    const auto n = m.is_object() ? m.find("name") : m.end();
    const std::string name = n != m.end() && n->is_string() ? n->get<std::string>() : "";
    p.want |= name == want || name == want + ":latest";
    const bool plain = !name.empty() && name.size() <= 128 && std::all_of(name.begin(), name.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '.' || c == '_' || c == ':' || c == '/' || c == '-';
    });
    if (plain && !p.first) p.first = name;
  }
  return p;
}

// An ollama's model list (GET /api/tags, a second at most): its body, or why nothing came.
p9::Result<std::string> ollama_tags(Hub& hub, const std::string& url) {
  backend::HttpRequest req;
  req.method = "GET";
  req.url = url + "/api/tags";
  req.connect_timeout = std::chrono::seconds(1);
  req.deadline = std::chrono::seconds(1);
  req.max_body = 1 << 20;
  auto r = hub.http.fetch(std::move(req));
  if (r.end.kind != backend::TransferEnd::Kind::complete) return p9::error(r.end.message);
  if (r.head.status != 200) return p9::error("HTTP " + std::to_string(r.head.status));
  return std::move(r.body);
}

// A default ollama is a local server, not a key: whether it answers, and has the model.
std::optional<std::string> ollama_unready(Hub& hub, const backend::BackendSettings& o) {
  auto tags = ollama_tags(hub, o.url);
  if (!tags)
    return "default backend ollama: nothing answers at " + o.url + " (" + tags.ename() +
           "): start it (`ollama serve`) or set another backend; see doc/backends.md";
  const auto p = pulled(*tags, o.model);
  if (!p.listed || p.want) return std::nullopt;
  return "default backend ollama at " + o.url + " has not pulled " + o.model + ": `ollama pull " + o.model + "`" +
         (p.first ? ", or `model = " + *p.first + "` in its [ollama] section" : std::string()) + "; see doc/backends.md";
}

std::optional<std::string> no_backend(Hub& hub) {
  const auto conf = hub.conf();
  // A default that cannot be used (a misspelt OLLIE_BACKEND, its key unset, an ollama that does
  // not answer) is said now too, in agent/new's words, rather than at the first agent.
  if (const auto name = backend::default_backend(conf, hub.env); !name.empty()) {
    std::string why;
    if (auto known = check_backend(name); !known) why = known.ename();
    else if (auto r = backend::resolve_backend(name, conf, hub.env); !r) why = r.error().message;
    else return name == "ollama" ? ollama_unready(hub, *r) : std::nullopt;
    return "default backend unusable: " + why + "; agents cannot be created without another backend=. See doc/backends.md";
  }
  // No default: an agent/new without backend= fails (§4.3). An ollama that answers is the
  // likeliest choice, so it is named when it does, with the model an agent would ask it for
  // when that one is not pulled there.
  const std::string conf_file = hub.config_root + "/backends.conf";
  const auto ollama = backend::resolve_backend("ollama", conf, hub.env);
  const auto tags = ollama ? ollama_tags(hub, ollama->url) : p9::Result<std::string>(p9::error("not configured"));
  if (tags) {
    std::string hint;
    if (const auto p = pulled(*tags, ollama->model); p.listed && !p.want)
      hint = p.first ? ", and a model it has, e.g. `model = " + *p.first + "` in its [ollama] section (" + ollama->model +
                           " is not pulled there)"
                     : "; it has no model yet: `ollama pull " + ollama->model + "`";
    return "no model backend: none is configured, so agents cannot be created without backend=. ollama answers at " +
           ollama->url + ": set `backend = ollama` in " + conf_file + " (or OLLIE_BACKEND=ollama)" + hint +
           "; see doc/backends.md";
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
