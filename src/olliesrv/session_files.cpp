#include "session_files.hpp"

#include <algorithm>
#include <array>
#include <map>

#include "hub.hpp"
#include "lib9p/utf8.hpp"
#include "session.hpp"
#include "virtfs/tokenize.hpp"

namespace ollie {

namespace {

/// What olliesrv sets for every tool itself (§2.5, §6.6).
constexpr std::array<std::string_view, 5> reserved_vars = {"OLLIE_SESSION_ID", "OLLIE_ADDR", "OLLIE_AGENT_ID",
                                                           "OLLIE_UNAME", "OLLIE_AUTH"};

using virtfs::blank;  // the grammar's blanks (§1.3)

}  // namespace

bool valid_env_name(const std::string& k) {
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (k.empty() || k.size() > 256 || !alpha(k[0])) return false;
  return std::all_of(k.begin(), k.end(), [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); });
}

std::optional<std::string> env_entry_error(const std::string& key, const std::string& value) {
  if (!valid_env_name(key)) return "invalid env name: " + key;
  if (std::find(reserved_vars.begin(), reserved_vars.end(), key) != reserved_vars.end()) return "reserved: " + key;
  // toolsrv takes the value as the rest of one ctl line, and execve as a C string; session.json
  // keeps UTF-8 only (§1.2): other bytes would come back from a restart as U+FFFD.
  if (value.size() > MAX_ENV_VALUE || value.find_first_of(std::string_view("\n\0", 2)) != std::string::npos ||
      !p9::is_utf8(value))
    return "invalid env value: " + key;
  return std::nullopt;
}

std::string read_env(const Session& s) {
  std::map<std::string, std::string> all;
  {
    std::lock_guard lock(s.mu);
    all = s.env;
  }
  all["OLLIE_SESSION_ID"] = s.id;
  all["OLLIE_ADDR"] = s.remote.empty() ? s.hub.addr : s.host->forward_addr();
  std::string out;
  for (const auto& [k, v] : all) out += k + "=" + v + "\n";
  return out;
}

p9::Status write_env(Session& s, const std::string& request) {
  auto toks = virtfs::tokenize(request);
  if (!toks) return toks.error();
  std::map<std::string, std::string> changes;  // "" unsets
  for (const auto& tok : *toks) {
    const auto eq = tok.find('=');
    if (eq == std::string::npos) return p9::error("bad token: " + tok);
    std::string key = tok.substr(0, eq), value = tok.substr(eq + 1);
    if (auto why = env_entry_error(key, value)) return p9::error(*why);
    if (changes.count(key)) return p9::error("duplicate key: " + key);
    changes.emplace(std::move(key), std::move(value));
  }
  {
    std::lock_guard lock(s.mu);
    if (s.killed) return p9::error("session killed");
    auto next = s.env;
    for (const auto& [k, v] : changes) {
      if (v.empty()) next.erase(k);
      else next[k] = v;
    }
    if (next.size() > MAX_ENV_VARS)
      return p9::error("env: too many variables (limit " + std::to_string(MAX_ENV_VARS) + ")");
    if (next != s.env) s.env_changed = std::time(nullptr);
    s.env = std::move(next);
  }
  for (const auto& [k, v] : changes) s.host->set_env(k, v);
  return {};
}

std::string read_goal(const Session& s) {
  std::lock_guard lock(s.mu);
  return s.goal;
}

p9::Status check_goal(const std::string& text) {
  if (std::all_of(text.begin(), text.end(), blank)) return p9::error("empty goal");
  if (text.size() > MAX_GOAL) return p9::error("goal too long (limit " + std::to_string(MAX_GOAL) + " bytes)");
  return {};
}

p9::Status write_goal(Session& s, std::string text) {
  text = p9::valid_utf8(text);  // what is read back is what session.json keeps (§1.2)
  if (auto st = check_goal(text); !st) return st;
  {
    std::lock_guard lock(s.mu);
    if (s.killed) return p9::error("session killed");
    s.goal = std::move(text);
    s.goal_changed = std::time(nullptr);
  }
  return {};
}

}  // namespace ollie
