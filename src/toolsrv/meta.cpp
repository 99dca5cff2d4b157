#include "toolsrv/meta.hpp"

#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <array>

namespace toolsrv {
namespace {

using json = nlohmann::json;

constexpr std::array reserved_args = {"timeout", "background", "bypass", "sandbox"};
constexpr std::array override_fields = {"description", "prompt", "args", "tier", "scope", "outputFormat", "cmd", "timeout"};
constexpr std::array condition_keys = {"binary", "file", "os", "arch", "env", "nenv"};

Result<std::vector<std::string>> string_list(const json& v, std::string_view key) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
    return out;
  }
  if (v.is_array()) {
    for (const auto& item : v) {
      if (!item.is_string()) break;
      out.push_back(item.get<std::string>());
    }
    if (out.size() == v.size()) return out;
  }
  return p9::error("condition " + std::string(key) + ": expected a string or an array of strings");
}

bool executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0;
}

bool binary_found(const std::string& name, const HostFacts& host) {
  if (name.find('/') != std::string::npos) return executable_file(name);
  return std::any_of(host.path.begin(), host.path.end(),
                     [&](const std::string& dir) { return executable_file(dir + "/" + name); });
}

bool name_char(char c, bool first) {
  return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (!first && c >= '0' && c <= '9');
}

/// `path` with a leading `~` or `~/` and every `$NAME` or `${NAME}` replaced from the tools'
/// environment, nothing else (no word splitting, quotes or globs: the rest is literal). nullopt
/// when a variable named is unset.
std::optional<std::string> expand_path(const std::string& path, const HostFacts& host) {
  const auto get = [&](const std::string& name) -> std::optional<std::string> {
    const auto it = host.env.find(name);
    if (it == host.env.end()) return std::nullopt;
    return it->second;
  };
  std::string out;
  std::size_t i = 0;
  if (path == "~" || path.starts_with("~/")) {
    auto home = get("HOME");
    if (!home || home->empty()) return std::nullopt;
    out = *home;
    i = 1;
  }
  while (i < path.size()) {
    if (path[i] != '$') {
      out += path[i++];
      continue;
    }
    const bool braced = i + 1 < path.size() && path[i + 1] == '{';
    std::size_t j = i + (braced ? 2 : 1), start = j;
    while (j < path.size() && name_char(path[j], j == start)) j++;
    if (j == start || (braced && (j == path.size() || path[j] != '}'))) {  // not a variable: a literal `$`
      out += path[i++];
      continue;
    }
    auto value = get(path.substr(start, j - start));
    if (!value) return std::nullopt;
    out += *value;
    i = braced ? j + 1 : j;
  }
  return out;
}

bool file_exists(const std::string& path, const HostFacts& host) {
  const auto expanded = expand_path(path, host);
  struct stat st {};
  return expanded && !expanded->empty() && ::stat(expanded->c_str(), &st) == 0;
}

bool env_holds(const std::string& cond, const HostFacts& host) {
  const auto eq = cond.find('=');
  const auto it = host.env.find(cond.substr(0, eq));
  if (eq == std::string::npos) return it != host.env.end() && !it->second.empty();
  return it != host.env.end() && it->second == cond.substr(eq + 1);
}

// Validates a `when` object; returns whether it holds on this host.
Result<bool> evaluate_when(const json& when, const HostFacts& host) {
  if (!when.is_object()) return p9::error("variant when must be an object");
  bool holds = true;
  for (const auto& [key, value] : when.items()) {
    if (std::find(condition_keys.begin(), condition_keys.end(), key) == condition_keys.end()) {
      return p9::error("unknown condition: " + key);
    }
    auto values = string_list(value, key);
    if (!values) return values.error();
    if (key == "os" || key == "arch") {
      const auto& mine = key == "os" ? host.os : host.arch;
      if (std::find(values->begin(), values->end(), mine) == values->end()) holds = false;
      continue;
    }
    for (const auto& v : *values) {
      bool ok = true;
      if (key == "binary") ok = binary_found(v, host);
      else if (key == "file") ok = file_exists(v, host);
      else if (key == "env") ok = env_holds(v, host);
      else ok = !env_holds(v, host);  // nenv
      if (!ok) holds = false;
    }
  }
  return holds;
}

// Type checks of the fields that both the top level and variants may carry.
Result<void> check_fields(const json& obj, std::string_view where) {
  auto err = [&](const std::string& text) {
    return p9::error(where.empty() ? text : std::string(where) + ": " + text);
  };
  if (obj.contains("description")) {
    const auto& d = obj["description"];
    if (!d.is_string()) return err("description must be a string");
    // Listed in tables and sent as the function's description: a blank one says nothing.
    if (d.get_ref<const std::string&>().find_first_not_of(" \t\r\n") == std::string::npos) return err("description is empty");
  }
  if (obj.contains("prompt") && !obj["prompt"].is_string()) return err("prompt must be a string");
  if (obj.contains("outputFormat") && !obj["outputFormat"].is_string()) return err("outputFormat must be a string");
  if (obj.contains("cmd") && !obj["cmd"].is_string()) return err("cmd must be a string");
  if (obj.contains("tier")) {
    const auto& t = obj["tier"];
    if (!t.is_string() || (t != "hot" && t != "warm" && t != "cold")) return err("tier must be hot, warm or cold");
  }
  if (obj.contains("scope")) {
    const auto& s = obj["scope"];
    if (!s.is_string() || (s != "read" && s != "write" && s != "global")) return err("scope must be read, write or global");
  }
  if (obj.contains("timeout")) {
    // An integer as JSON Schema counts them (`10.0` is one), as the call's `timeout` flag takes it.
    const auto& t = obj["timeout"];
    const double v = t.is_number() ? t.get<double>() : -1;
    if (!(v >= 0) || v > 86400 * 365 || v != std::floor(v)) return err("timeout must be an integer from 0 to 31536000 (a year)");
  }
  if (obj.contains("args")) {
    const auto& a = obj["args"];
    if (!a.is_object() || !a.contains("type") || a["type"] != "object") return err("args must be a JSON Schema object");
    if (a.contains("properties")) {
      if (!a["properties"].is_object()) return err("args.properties must be an object");
      for (const auto& r : reserved_args) {
        if (a["properties"].contains(r)) return err(std::string("reserved argument name: ") + r);
      }
      for (const auto& [name, schema] : a["properties"].items())
        if (!schema.is_object()) return err("args.properties." + name + " must be an object");
    }
    // Sent to the provider as it is: a schema it refuses fails every request of the agent.
    if (a.contains("required")) {
      const auto& r = a["required"];
      if (!r.is_array() || !std::all_of(r.begin(), r.end(), [](const json& n) { return n.is_string(); }))
        return err("args.required must be an array of names");
    }
  }
  return {};
}

}  // namespace

std::string parse_error_text(std::string_view what) {
  if (const auto colon = what.find("] "); what.rfind("[json.exception.", 0) == 0 && colon != std::string_view::npos)
    what.remove_prefix(colon + 2);
  std::string text;
  const auto read = what.find("; last read: '");
  if (read == std::string_view::npos) {
    text = what;
  } else {
    const auto expected = what.rfind("; expected ");
    text = std::string(what.substr(0, read)) + std::string(expected > read && expected != std::string_view::npos ? what.substr(expected) : "");
  }
  // "syntax error while parsing value - " says nothing the line and column do not, and pushed
  // the reason past what an Rerror holds (127 bytes).
  constexpr std::string_view syntax = "syntax error while parsing ";
  if (const auto at = text.find(syntax); at != std::string::npos)
    if (const auto dash = text.find(" - ", at); dash != std::string::npos) text.erase(at, dash + 3 - at);
  return text;
}

std::string_view scope_name(Scope s) {
  switch (s) {
    case Scope::read: return "read";
    case Scope::write: return "write";
    case Scope::global: return "global";
  }
  return "global";
}

std::pair<std::string, std::string> host_os_arch() {
  struct utsname u {};
  ::uname(&u);
  std::string os = u.sysname;
  std::transform(os.begin(), os.end(), os.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string arch = u.machine;
  if (arch == "x86_64") arch = "amd64";
  else if (arch == "aarch64") arch = "arm64";
  else if (arch == "i686" || arch == "i386") arch = "386";
  else if (arch == "armv7l") arch = "arm";
  return {os, arch};
}

Result<Tool> parse_meta(std::string_view name, std::string_view dir, std::string_view text,
                        bool has_executable, const HostFacts& host) {
  json doc;
  bool too_deep = false;
  try {
    // Copying or dumping a value recurses once per level: a file nested a million deep (the model
    // may write into a tool directory, §7.2.2) is refused while parsing, which does not recurse.
    doc = json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > max_meta_depth) too_deep = true;
      return !too_deep;
    });
  } catch (const json::parse_error& e) {
    return p9::error("invalid JSON: " + parse_error_text(e.what()));
  }
  if (too_deep) return p9::error("nested deeper than " + std::to_string(max_meta_depth) + " levels");
  if (!doc.is_object()) return p9::error("a .meta must be a JSON object");
  if (!doc.contains("description")) return p9::error("description is required");
  if (auto ok = check_fields(doc, ""); !ok) return ok.error();

  json effective = doc;
  if (doc.contains("variants")) {
    const auto& variants = doc["variants"];
    if (!variants.is_array()) return p9::error("variants must be an array");
    std::optional<std::size_t> chosen;
    for (std::size_t i = 0; i < variants.size(); ++i) {
      const auto& v = variants[i];
      const auto where = "variant " + std::to_string(i + 1);
      if (!v.is_object()) return p9::error(where + ": must be an object");
      if (auto ok = check_fields(v, where); !ok) return ok.error();
      bool holds = true;
      if (v.contains("when")) {
        auto r = evaluate_when(v["when"], host);
        if (!r) return p9::error(where + ": " + r.ename());
        holds = *r;
      }
      if (holds && !chosen) chosen = i;  // keep validating the rest: an invalid later variant is an error
    }
    if (!chosen) return p9::error(std::string(not_available_error));
    // Its fields of §7.2.3 override; any other is ignored, as at the top level (§7.2.1).
    for (const auto& [key, value] : variants[*chosen].items())
      if (std::find(override_fields.begin(), override_fields.end(), key) != override_fields.end()) effective[key] = value;
  }

  Tool t;
  t.name = name;
  t.dir = dir;
  t.meta_path = std::string(dir) + "/" + std::string(name) + ".meta";
  t.description = effective["description"].get<std::string>();
  t.prompt = effective.value("prompt", t.description);
  t.args = effective.value("args", json{{"type", "object"}, {"properties", json::object()}});
  t.tier = effective.value("tier", "hot");
  const auto scope = effective.value("scope", "global");
  t.scope = scope == "read" ? Scope::read : scope == "write" ? Scope::write : Scope::global;
  if (effective.contains("outputFormat")) t.output_format = effective["outputFormat"].get<std::string>();
  if (effective.contains("cmd")) t.cmd = effective["cmd"].get<std::string>();
  t.timeout = effective.contains("timeout") ? static_cast<int>(effective["timeout"].get<double>()) : 30;
  if (!t.cmd) {
    if (!has_executable) return p9::error("no executable and no cmd: " + std::string(dir) + "/" + std::string(name) + " is not an executable file");
    t.exe_path = std::string(dir) + "/" + std::string(name);
  }
  return t;
}

nlohmann::ordered_json tool_json(const Tool& tool) {  // the members in §6.4's order
  nlohmann::ordered_json j = {{"name", tool.name},         {"description", tool.description},
            {"prompt", tool.prompt},     {"parameters", tool.args},
            {"scope", scope_name(tool.scope)}, {"tier", tool.tier}};
  if (tool.output_format) j["outputFormat"] = *tool.output_format;
  j["timeout"] = tool.timeout;
  return j;
}

}  // namespace toolsrv
