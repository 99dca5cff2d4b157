#include "dispatch.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "backend/json.hpp"
#include "bypass_policy.hpp"

namespace ollie {

using json = nlohmann::json;

namespace {

const ToolInfo* find_tool(const std::vector<ToolInfo>& tools, const std::string& name) {
  for (const auto& t : tools)
    if (t.name == name) return &t;
  return nullptr;
}

/// A flag's value as the model wrote it, for the error (`"x"` → x).
std::string shown(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string normalized(std::string s) {
  std::string out;
  for (char c : s)
    if (c != '-' && c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Levenshtein distance: the edits (insert, delete, replace a byte) from a to b.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); j++) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); i++) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); j++) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::set<std::string> words(const std::string& s) {
  std::set<std::string> out;
  std::string w;
  for (char c : s + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      if (w.size() > 2) out.insert(w);
      w.clear();
    }
  }
  return out;
}

}  // namespace

std::string clean_path(const std::string& path, const std::string& cwd) {
  std::string joined = !path.empty() && path[0] == '/' ? path : cwd + "/" + path;
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i <= joined.size()) {
    auto j = joined.find('/', i);
    if (j == std::string::npos) j = joined.size();
    std::string part = joined.substr(i, j - i);
    i = j + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(std::move(part));
  }
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

Call make_call(const backend::ToolCall& tc, const std::string& cwd, const std::vector<ToolInfo>& tools) {
  Call c;
  c.id = tc.id;
  c.name = tc.name;
  // Bounded in depth: the arguments are dumped below, and dumping recurses once per level.
  json args = backend::parse_json(tc.arguments.empty() ? std::string_view("{}") : std::string_view(tc.arguments));
  c.args_json = !args.is_discarded();
  c.args_ok = c.args_json && args.is_object();
  c.block_args = args.is_discarded() ? tc.arguments : args.dump();
  const ToolInfo* t = find_tool(tools, c.name);
  if (!t) {
    c.unknown = true;  // the message needs the catalog: the turn fills it in
  } else {
    c.scope = t->scope;
    c.tier = t->tier;
    c.format = t->output_format;
  }
  // §8.3.1: the batch a call joins depends only on its tool's scope and its path, whatever its
  // result will be; an unknown tool counts as a read (Call's default scope).
  if (c.args_ok)
    if (auto it = args.find("path"); it != args.end() && it->is_string()) c.path = clean_path(it->get<std::string>(), cwd);
  if (c.scope == "write" && c.path.empty()) c.scope = "global";
  // A read without a path reads the cwd (file_grep and file_glob default to it): a write below it
  // makes its cached result stale (§8.3.3 speaks only of calls that name one).
  c.within = c.path.empty() ? clean_path(".", cwd) : c.path;
  if (c.name.empty()) {
    c.preset = "error: empty tool name";
    return c;
  }
  if (!c.args_ok) {
    std::string why = "not JSON";
    if (!args.is_discarded()) why = "not a JSON object";
    else if (backend::too_deep(tc.arguments)) why = "nested deeper than " + std::to_string(backend::limits::json_depth) + " levels";
    c.preset = "error: invalid arguments: " + why;
    return c;
  }
  if (c.unknown) return c;
  // The dispatch flags of §6.8: removed from what the tool gets, kept in the call block.
  if (auto it = args.find("timeout"); it != args.end()) {
    // An integer ≥ 0 as JSON Schema counts them (`1000.0` is one); a year at most, as `.meta`'s.
    const double t = it->is_number() ? it->get<double>() : -1;
    if (!(t >= 0) || t != std::floor(t)) {
      c.preset = "error: invalid timeout: " + shown(*it);
      return c;
    }
    c.timeout = static_cast<int>(std::min(t, 86400.0 * 365));
    args.erase(it);
  }
  for (const char* flag : {"background", "bypass"}) {
    auto it = args.find(flag);
    if (it == args.end()) continue;
    if (!it->is_boolean()) {
      c.preset = std::string("error: invalid ") + flag + ": " + shown(*it);
      return c;
    }
    const bool on = it->get<bool>();
    args.erase(it);
    (std::string_view(flag) == "background" ? c.background : c.bypass) = on;
  }
  if (auto it = args.find("sandbox"); it != args.end()) {
    if (!it->is_string()) {
      c.preset = "error: invalid sandbox: " + shown(*it);
      return c;
    }
    args.erase(it);  // accepted and ignored (§6.8)
  }
  c.args = args.dump();
  return c;
}

std::string unknown_tool(const std::string& name, const std::vector<ToolInfo>& catalog) {
  // The model's name as it wrote it, but what a terminal would obey escaped: the result shows in
  // chat and log (§2.8.7), as its call line does.
  std::string out = "error: unknown tool: " + bypass::escape(name);
  for (const auto& t : catalog)
    if (t.name == name) return out + "; it exists but is not loaded: call tool_load with " + name + " first";
  std::vector<std::string> near;
  const auto n = normalized(name);
  for (const auto& t : catalog)
    if (t.error.empty() && normalized(t.name) == n && near.size() < 3) near.push_back(t.name);
  if (near.size() < 3) {
    // By word overlap: the most words shared first, then the name closest to the one written
    // (`file_reed` → file_read before file_edit and file_glob, which share `file` too).
    struct Near {
      std::size_t shared, distance;
      const std::string* name;
    };
    std::vector<Near> ranked;
    const auto mine = words(name);
    for (const auto& t : catalog) {
      if (!t.error.empty() || std::find(near.begin(), near.end(), t.name) != near.end()) continue;
      const auto theirs = words(t.name + " " + t.description);
      const auto shared = static_cast<std::size_t>(
          std::count_if(mine.begin(), mine.end(), [&](const std::string& w) { return theirs.count(w) > 0; }));
      if (shared) ranked.push_back({shared, edit_distance(normalized(t.name), n), &t.name});
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const Near& a, const Near& b) {
      return a.shared != b.shared ? a.shared > b.shared : a.distance < b.distance;
    });
    for (std::size_t i = 0; i < ranked.size() && near.size() < 3; i++) near.push_back(*ranked[i].name);
  }
  if (near.empty()) return out;
  out += "; did you mean: ";
  for (std::size_t i = 0; i < near.size(); i++) out += (i ? ", " : "") + near[i];
  return out + "?";
}

std::vector<std::vector<Call>> split_batches(std::vector<Call> calls) {
  std::vector<std::vector<Call>> out;
  std::vector<Call> cur;
  std::set<std::string> written;  // paths the current batch writes
  auto close = [&] {
    if (!cur.empty()) out.push_back(std::move(cur));
    cur.clear();
    written.clear();
  };
  for (auto& c : calls) {
    const std::string& scope = c.scope;
    if (scope == "global") {
      close();
      cur.push_back(std::move(c));
      close();
      continue;
    }
    if (!c.path.empty() && written.count(c.path)) close();
    if (scope == "write" && !c.path.empty()) written.insert(c.path);
    cur.push_back(std::move(c));
  }
  close();
  return out;
}

std::string with_dispatch_flags(const std::string& parameters) {
  json p = json::parse(parameters, nullptr, false);
  if (p.is_discarded() || !p.is_object()) p = json{{"type", "object"}, {"properties", json::object()}};
  if (!p.contains("properties") || !p["properties"].is_object()) p["properties"] = json::object();
  auto& props = p["properties"];
  // Bare types: the system prompt says once what the flags do (data/prompts/system.md), where a
  // description in each schema repeated it for every tool of every request (§6.8).
  props["timeout"] = {{"type", "integer"}, {"minimum", 0}};
  props["background"] = {{"type", "boolean"}};
  props["bypass"] = {{"type", "boolean"}};
  props["sandbox"] = {{"type", "string"}};
  return p.dump();
}

}  // namespace ollie
