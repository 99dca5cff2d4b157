#include "backend/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <spdlog/spdlog.h>

#include "backend/text.hpp"

namespace ollie::backend {

namespace {

struct Defaults {
  const char* name;
  const char* url;
  const char* model;
  std::vector<const char*> key_vars;  // empty: no secret
};

const std::vector<Defaults>& defaults() {
  static const std::vector<Defaults> d{
      {"ollama", "http://localhost:11434", "qwen3:8b", {}},
      {"openai", "https://api.openai.com/v1", "gpt-4o", {"OLLIE_OPENAI_KEY", "OPENAI_API_KEY"}},
      {"openrouter", "https://openrouter.ai/api/v1", "anthropic/claude-sonnet-4",
       {"OLLIE_OPENROUTER_KEY", "OPENROUTER_API_KEY"}},
      {"anthropic", "https://api.anthropic.com", "claude-sonnet-4-5",
       {"OLLIE_ANTHROPIC_KEY", "ANTHROPIC_API_KEY"}},
      {"copilot", "https://api.githubcopilot.com", "gpt-4.1",
       {"OLLIE_COPILOT_TOKEN", "GH_TOKEN", "GITHUB_TOKEN"}},
      {"kiro", "https://codewhisperer.us-east-1.amazonaws.com", "claude-sonnet-4",
       {"OLLIE_KIRO_TOKEN"}},
      {"gemini", "https://generativelanguage.googleapis.com", "gemini-2.5-flash",
       {"OLLIE_GEMINI_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"}},
  };
  return d;
}

const Defaults* find_defaults(std::string_view name) {
  for (const auto& d : defaults())
    if (name == d.name) return &d;
  return nullptr;
}

std::string upper(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

const std::vector<std::string>& backend_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& d : defaults()) v.emplace_back(d.name);
    return v;
  }();
  return names;
}

namespace {

/// A whole number in [lo, hi], else nullopt.
std::optional<std::int64_t> bounded(const std::string& v, std::int64_t lo, std::int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || n < lo || n > hi) return std::nullopt;
  return n;
}

/// `Name: value` as an HTTP header line: the name a token (RFC 9110 §5.1: no blank, no
/// separator), the value free of control characters but TAB. Anything else is sent as nothing
/// a server would take for the header meant.
bool header_line(const std::string& h) {
  const auto colon = h.find(':');
  if (colon == 0 || colon == std::string::npos) return false;
  static constexpr std::string_view tchar_punct = "!#$%&'*+-.^_`|~";
  const bool name_ok = std::all_of(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(colon), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || tchar_punct.find(c) != std::string_view::npos;
  });
  return name_ok && std::none_of(h.begin() + static_cast<std::ptrdiff_t>(colon), h.end(), [](char c) {
           const auto u = static_cast<unsigned char>(c);
           return (u < 0x20 && c != '\t') || u == 0x7f;
         });
}

/// The keys before the first section: `backend` (§7.4) and the sub-agent limits.
template <class Warn>
void top_level(BackendsConf& conf, const std::string& key, const std::string& value, const Warn& warn) {
  struct Limit {
    const char* key;
    std::int64_t lo, hi;
    void (*set)(SubagentLimits&, std::int64_t);
  };
  static const Limit limits[] = {
      {"subagents", 1, 64, [](SubagentLimits& l, std::int64_t n) { l.running = static_cast<int>(n); }},
      {"subagent_depth", 1, 8, [](SubagentLimits& l, std::int64_t n) { l.depth = static_cast<int>(n); }},
      {"subagent_budget", 0, std::int64_t{1} << 40, [](SubagentLimits& l, std::int64_t n) { l.budget = n; }},
  };
  if (key == "backend") {
    // Kept all the same: an agent without a backend then fails naming it, rather than talking
    // to another provider than the one written here.
    if (!find_defaults(value)) warn("unknown backend '" + value + "'");
    conf.backend = value;
    return;
  }
  for (const auto& l : limits) {
    if (key != l.key) continue;
    if (auto n = bounded(value, l.lo, l.hi)) l.set(conf.subagents, *n);
    else warn(key + " must be a whole number from " + std::to_string(l.lo) + " to " + std::to_string(l.hi) + ", ignored");
    return;
  }
  warn("only backend, subagents, subagent_depth and subagent_budget are allowed before the first section, '" + key +
       "' ignored");
}

}  // namespace

namespace {

// Capitals, digits and underscores, as the environment's names are by convention (POSIX's for
// the utilities'): a token pasted in the name's place (ghp_…, gsk_…, sk-…) has small letters or a
// dash, and is not echoed by `missing key: set <key_env>`.
bool env_name(std::string_view v) {
  if (v.empty() || std::isdigit(static_cast<unsigned char>(v.front()))) return false;
  return std::all_of(v.begin(), v.end(), [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; });
}

}  // namespace

BackendsConf parse_backends_conf(std::string_view text, std::string_view file) {
  BackendsConf conf;
  BackendSection* section = nullptr;
  bool in_unknown = false;
  std::string section_name;
  int lineno = 0;
  const auto warn = [&](const std::string& what) {
    conf.warnings.push_back(std::string(file) + ":" + std::to_string(lineno) + ": " + what);
    spdlog::warn("{}", conf.warnings.back());
  };
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 BOM, as an editor may write one
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const auto line = trim(text.substr(pos, nl - pos));
    pos = nl + 1;
    ++lineno;
    if (line.empty() || line.front() == '#') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        // Its keys are ignored with it: kept under the section before, a key_env meant for one
        // provider would be sent to another.
        warn("malformed section header, its keys ignored");
        section = nullptr;
        in_unknown = true;
        continue;
      }
      section_name = std::string(trim(line.substr(1, line.size() - 2)));
      in_unknown = !find_defaults(section_name);
      if (!in_unknown && conf.sections.contains(section_name))
        warn("[" + section_name + "] again: its keys join the first [" + section_name + "]'s, a key given twice takes the later value");
      section = in_unknown ? nullptr : &conf.sections[section_name];
      if (in_unknown) warn("unknown backend [" + section_name + "], ignored");
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) { warn("expected key = value, ignored"); continue; }
    const std::string key(trim(line.substr(0, eq)));
    const std::string value(trim(line.substr(eq + 1)));
    if (in_unknown) continue;
    if (!section) {
      top_level(conf, key, value, warn);
      continue;
    }
    if (key == "url") section->url = value;
    else if (key == "model") section->model = value;
    else if (key == "key_env" && env_name(value)) section->key_env = value;
    // A key pasted where its variable's name goes: named in no warning, error or log (§7.4).
    else if (key == "key_env") warn("key_env must name an environment variable in capitals ([A-Z_][A-Z0-9_]*), ignored");
    else if (key == "header" && header_line(value) && (section_name == "openai" || section_name == "openrouter"))
      section->headers.push_back(value);
    else if (key == "header") warn("header needs 'Name: value' in an openai-compatible section, ignored");
    else if (key == "num_ctx" && section_name == "ollama") {
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end || n <= 0 || n > 10'000'000) warn("num_ctx must be a positive integer, ignored");
      else section->num_ctx = static_cast<int>(n);
    } else warn("unknown key '" + key + "' in [" + section_name + "], ignored");
  }
  return conf;
}

ReadStatus read_config_file(const std::string& path, std::size_t cap, std::string& out, std::string& err) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return ReadStatus::missing;
    err = std::strerror(errno);
    return ReadStatus::failed;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    err = S_ISDIR(st.st_mode) ? std::strerror(EISDIR) : "not a regular file";
    ::close(fd);
    return ReadStatus::failed;
  }
  out.clear();
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = std::strerror(errno);
      ::close(fd);
      return ReadStatus::failed;
    }
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > cap) {
      ::close(fd);
      return ReadStatus::too_large;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return ReadStatus::ok;
}

Result<BackendsConf> load_backends_conf(const std::string& path) {
  std::string text, err;
  switch (read_config_file(path, 1 << 20, text, err)) {
    case ReadStatus::ok: return parse_backends_conf(text, path);
    case ReadStatus::missing: return BackendsConf{};
    case ReadStatus::too_large: return Error{ErrorClass::config, path + ": cannot read: larger than 1 MiB", 0, {}};
    case ReadStatus::failed: break;
  }
  return Error{ErrorClass::config, path + ": cannot read: " + err, 0, {}};
}

std::string backends_conf_path(const Environment& env) { return p9::config_root(env) + "/backends.conf"; }

std::set<std::string> secret_variables(const BackendsConf& conf) {
  std::set<std::string> out;
  for (const auto& d : defaults()) out.insert(d.key_vars.begin(), d.key_vars.end());
  for (const auto& [name, section] : conf.sections)
    if (!section.key_env.empty()) out.insert(section.key_env);
  return out;
}

std::string default_backend(const BackendsConf& conf, const Environment& env) {
  if (!conf.backend.empty()) return conf.backend;
  return env("OLLIE_BACKEND").value_or("");
}

Result<BackendSettings> resolve_backend(std::string_view name, const BackendsConf& conf,
                                        const Environment& env) {
  const Defaults* d = find_defaults(name);
  if (!d) return Error{ErrorClass::config, "unknown backend: " + std::string(name), 0, {}};
  const BackendSection none;
  const auto it = conf.sections.find(name);
  const BackendSection& s = it == conf.sections.end() ? none : it->second;

  BackendSettings out;
  out.name = d->name;
  out.url = !s.url.empty() ? s.url : env("OLLIE_" + upper(name) + "_URL").value_or(d->url);
  while (!out.url.empty() && out.url.back() == '/') out.url.pop_back();
  out.model = !s.model.empty() ? s.model : env("OLLIE_MODEL").value_or(d->model);
  out.headers = s.headers;
  out.num_ctx = s.num_ctx;
  // GitHub's exchange serves the default URL; a URL of one's own (GitHub Enterprise's proxy, a
  // fake provider) serves it too.
  if (name == "copilot")
    out.token_url = (out.url == d->url ? "https://api.github.com" : out.url) + "/copilot_internal/v2/token";

  if (d->key_vars.empty()) return out;
  std::vector<std::string> vars;
  if (!s.key_env.empty()) vars.push_back(s.key_env);
  else for (const char* v : d->key_vars) vars.emplace_back(v);
  for (const auto& v : vars) {
    if (auto k = env(v)) {
      out.key = *k;
      out.key_var = v;
      return out;
    }
  }
  out.key_var = vars.front();
  if (name == "kiro") {
    if (auto db = find_kiro_token_db(env)) {
      out.key = "sqlite://" + *db;
      return out;
    }
  }
  return Error{ErrorClass::config, out.name + ": missing key: set " + out.key_var, 0, {}};
}

}  // namespace ollie::backend
