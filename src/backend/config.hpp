#pragma once
/// backends.conf (spec §7.4) and the environment fallbacks that resolve one backend's URL,
/// model and secret.

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "backend/limits.hpp"
#include "backend/result.hpp"
#include "lib9p/dirs.hpp"

namespace ollie::backend {

/// The names of the supported backends, in the order of spec §8.16.
const std::vector<std::string>& backend_names();

/// One `[name]` section of backends.conf.
struct BackendSection {
  std::string url;
  std::string model;
  std::string key_env;               ///< the *name* of the variable holding the secret
  std::vector<std::string> headers;  ///< "Name: value" (openai-compatible backends only)
  std::optional<int> num_ctx;        ///< ollama only
};

/// The bounds of sub-agent fan-out, per session (backends.conf's top-level `subagents`,
/// `subagent_depth` and `subagent_budget`; doc/engine.md says why these defaults).
struct SubagentLimits {
  int running = 4;            ///< sub-agents running at once at each depth; more wait in line
  int depth = 2;              ///< nesting: 1 = sub-agents cannot start sub-agents
  std::int64_t budget = 0;    ///< tokens (input + output) per turn tree; 0 = no budget
};

/// A parsed backends.conf. Unknown sections or keys and malformed lines become warnings
/// (also logged) and are otherwise ignored, as spec §7.4 says.
struct BackendsConf {
  std::string backend;  ///< top-level default backend, "" when unset
  SubagentLimits subagents;
  std::map<std::string, BackendSection, std::less<>> sections;
  std::vector<std::string> warnings;  ///< "<file>:<line>: <what>"
};

/// Parses the text of a backends.conf; `file` names it in warnings.
BackendsConf parse_backends_conf(std::string_view text, std::string_view file = "backends.conf");

/// Reads `path`; a missing file is an empty configuration, an unreadable one an error.
Result<BackendsConf> load_backends_conf(const std::string& path);

enum class ReadStatus { ok, missing, too_large, failed };

/// Reads a configuration file the model may have replaced (a cwd holding ~/.config is writable):
/// a regular file of at most `cap` bytes, opened without blocking (a FIFO cannot hang the
/// reader, a link to /dev/zero cannot fill its memory); `err` gets the reason on failure.
ReadStatus read_config_file(const std::string& path, std::size_t cap, std::string& out, std::string& err);

/// Looks up an environment variable; nullopt when unset or empty (p9::process_env() is the
/// process's).
using Environment = p9::Env;

/// `<config root>/backends.conf`: `$XDG_CONFIG_HOME/ollie/backends.conf` (default
/// `~/.config/ollie/backends.conf`).
std::string backends_conf_path(const Environment& env);

/// Everything a backend needs, resolved. `key` is a secret: never log or print it.
struct BackendSettings {
  std::string name;
  std::string url;
  std::string model;
  std::string key;       ///< the secret ("" for ollama); kiro: a token or sqlite://<path>
  std::string key_var;   ///< the variable named in errors
  std::vector<std::string> headers;
  std::optional<int> num_ctx;
  std::string token_url;  ///< copilot: the GitHub token-exchange endpoint
  std::chrono::milliseconds connect_timeout{30'000};
  std::chrono::milliseconds idle_timeout{300'000};
  std::chrono::milliseconds fetch_timeout = limits::fetch_deadline;  ///< non-streamed answers
};

/// Resolves backend `name`: URL (section → OLLIE_<NAME>_URL → default), model (section →
/// OLLIE_MODEL → built-in default) and secret (key_env, else OLLIE_ variable, else the
/// provider's usual ones). A missing secret is `<backend>: missing key: set <VAR>`.
Result<BackendSettings> resolve_backend(std::string_view name, const BackendsConf& conf,
                                        const Environment& env);

/// The variables that hold backend secrets (§6.1, §7.4): each backend's default ones and every
/// `key_env` of `conf`. Nothing olliesrv starts gets them.
std::set<std::string> secret_variables(const BackendsConf& conf);

/// The default backend: top-level `backend` → OLLIE_BACKEND → "" (spec §7.4).
std::string default_backend(const BackendsConf& conf, const Environment& env);

/// Reads the Kiro CLI's access token from its SQLite database; nullopt when absent.
std::optional<std::string> read_kiro_token_db(const std::string& path);

/// The Kiro CLI's token database when one exists on this machine.
std::optional<std::string> find_kiro_token_db(const Environment& env);

}  // namespace ollie::backend
