#include "olliesrv/settings.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "lib9p/utf8.hpp"
#include "olliesrv/bypass_policy.hpp"
#include "olliesrv/request.hpp"

namespace ollie {

namespace {

using nlohmann::json;

enum class Kind { uint, sint, number, effort, boolean, string, strings };

Kind kind_of(const std::string& key) {
  if (key == "maxTokens" || key == "maxCompletionTokens" || key == "reasoning") return Kind::uint;
  if (key == "topK") return Kind::sint;
  if (key == "reasoningEffort") return Kind::effort;
  if (key == "includeReasoning") return Kind::boolean;
  if (key == "responseFormat" || key == "verbosity") return Kind::string;
  if (key == "stop") return Kind::strings;
  return Kind::number;
}

bool is_param_key(std::string_view k) {
  for (const auto& p : param_keys())
    if (p == k) return true;
  return false;
}

/// A decimal integer in int's range; `allow_negative` for topK.
std::optional<long> parse_int(const std::string& v, bool allow_negative) {
  std::size_t i = 0;
  if (allow_negative && !v.empty() && v[0] == '-') i = 1;
  if (i == v.size() || v.size() - i > 10) return std::nullopt;
  for (std::size_t j = i; j < v.size(); j++)
    if (v[j] < '0' || v[j] > '9') return std::nullopt;
  const long n = std::strtol(v.c_str(), nullptr, 10);
  if (n > INT_MAX || n < INT_MIN) return std::nullopt;
  return n;
}

std::optional<double> parse_number(const std::string& v) {
  if (v.empty() || v.size() > 64) return std::nullopt;
  for (char c : v)
    if (!((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E'))
      return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v.c_str(), &end);
  if (*end || errno == ERANGE || !std::isfinite(d)) return std::nullopt;
  return d;
}

bool has_control(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

json parse_object(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  return j.is_object() ? j : json::object();
}

std::string known_backends() {
  std::string s;
  for (const auto& b : backend::backend_names()) s += (s.empty() ? "" : ", ") + b;
  return s;
}

bool is_backend(const std::string& b) {
  for (const auto& n : backend::backend_names())
    if (n == b) return true;
  return false;
}

}  // namespace

p9::Status check_backend(const std::string& name) {
  if (name.empty() || is_backend(name)) return {};
  return unknown_backend(name);
}

p9::Status check_model(const std::string& name) {
  // A model name is one field of idx tables and one value of cfg: no TAB, newline or control;
  // UTF-8 (§1.2), as session.json keeps it; and a name, not a document.
  if (name.size() > max_model) return p9::error("invalid model: longer than " + std::to_string(max_model) + " bytes");
  const bool ok = std::none_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }) &&
                  p9::is_utf8(name);
  if (ok) return {};
  return p9::error("invalid model: " + bypass::shown(name));
}

p9::Error unknown_backend(const std::string& name) { return p9::error("unknown backend: " + name + " (" + known_backends() + ")"); }

namespace {

/// Section `model` → OLLIE_MODEL → the built-in default, as backend::resolve_backend resolves
/// it, but without needing the backend's secret (a missing key is the backend's error later).
std::string backend_model(const std::string& name, const backend::BackendsConf& conf, const p9::Env& env) {
  static constexpr std::string_view kProbe = "OLLIE_SETTINGS_MODEL_PROBE";
  backend::BackendsConf probe;
  auto it = conf.sections.find(name);
  backend::BackendSection s = it == conf.sections.end() ? backend::BackendSection{} : it->second;
  s.key_env = std::string(kProbe);
  probe.sections.emplace(name, s);
  p9::Env penv = [&env](std::string_view var) -> std::optional<std::string> {
    if (var == kProbe) return std::string("-");
    if (var == "OLLIE_MODEL") return env(var);
    return std::nullopt;
  };
  auto r = backend::resolve_backend(name, probe, penv);
  return r ? r->model : std::string();
}

}  // namespace

p9::Result<BackendChoice> resolve_backend_choice(const SettingsInput& in, const backend::BackendsConf& conf,
                                                 const p9::Env& env) {
  const std::string profile_backend = in.profile ? in.profile->backend : std::string();
  const std::string profile_model = in.profile ? in.profile->model : std::string();
  BackendChoice c;
  for (const std::string* b : {&in.backend, &profile_backend, &in.parent_backend, &in.session_backend}) {
    if (!b->empty()) {
      c.backend = *b;
      break;
    }
  }
  if (c.backend.empty()) c.backend = backend::default_backend(conf, env);  // backends.conf → OLLIE_BACKEND
  if (c.backend.empty()) return p9::error("no backend configured: set backend in backends.conf or OLLIE_BACKEND");
  if (auto st = check_backend(c.backend); !st) {
    // Named where it came from when that is not the request: a profile's is its mistake.
    if (in.backend.empty() && !profile_backend.empty()) return bad_profile(in.profile->name, st.ename());
    return st.error();
  }

  auto fits = [&](const std::string& written_for) { return written_for.empty() || written_for == c.backend; };
  if (!in.model.empty()) c.model = in.model;
  else if (!profile_model.empty() && fits(profile_backend)) c.model = profile_model;
  else if (!in.parent_model.empty() && in.parent_backend == c.backend) c.model = in.parent_model;
  else if (!in.session_model.empty() && fits(in.session_backend)) c.model = in.session_model;
  else c.model = backend_model(c.backend, conf, env);
  return c;
}

const std::vector<std::string>& param_keys() {
  static const std::vector<std::string> keys{
      "maxTokens",        "maxCompletionTokens", "temperature",       "topP",
      "topK",             "minP",                "topA",              "frequencyPenalty",
      "presencePenalty",  "repetitionPenalty",   "reasoning",         "reasoningEffort",
      "includeReasoning", "responseFormat",      "stop",              "verbosity"};
  return keys;
}

p9::Result<std::string> parse_param(const std::string& key, const std::string& value) {
  if (!is_param_key(key)) return p9::error("unknown key: " + key);
  const auto bad = [&] { return p9::error("invalid " + key + ": " + value); };
  switch (kind_of(key)) {
    case Kind::uint:
    case Kind::sint: {
      auto n = parse_int(value, kind_of(key) == Kind::sint);
      if (!n) return bad();
      return json(*n).dump();
    }
    case Kind::number: {
      auto d = parse_number(value);
      if (!d) return bad();
      if (auto n = parse_int(value, true)) return json(*n).dump();  // `1` stays `1`, not `1.0`
      return json(*d).dump();
    }
    case Kind::effort:
      if (value != "low" && value != "medium" && value != "high")
        return p9::error("invalid reasoningEffort: " + value + " (low, medium, high)");
      return json(value).dump();
    case Kind::boolean:
      if (value != "true" && value != "false") return bad();
      return std::string(value);
    case Kind::string:
      if (value.empty() || value.size() > 256 || has_control(value) || !p9::is_utf8(value)) return bad();
      return json(value).dump();
    case Kind::strings: {
      json j = json::parse(value, nullptr, false);
      if (!j.is_array() || j.size() > 64) return bad();
      for (const auto& e : j)
        if (!e.is_string() || e.get_ref<const std::string&>().size() > 1024) return bad();
      return j.dump();
    }
  }
  return bad();
}

std::string merge_params(const std::string& profile_params, const std::string& overrides) {
  json out = parse_object(profile_params);
  const json over = parse_object(overrides);
  for (const auto& [k, v] : over.items())
    if (!v.is_null()) out[k] = v;
  return out.dump();
}

backend::GenerationParams to_generation_params(const std::string& params) {
  backend::GenerationParams g;
  const json j = parse_object(params);
  auto num = [&](const char* k) -> std::optional<double> {
    auto it = j.find(k);
    if (it == j.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
  };
  auto integer = [&](const char* k) -> std::optional<int> {
    auto it = j.find(k);
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    const auto n = it->get<long long>();
    if (n > INT_MAX || n < INT_MIN) return std::nullopt;
    return static_cast<int>(n);
  };
  auto str = [&](const char* k) -> std::string {
    auto it = j.find(k);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  g.max_tokens = integer("maxTokens");
  g.max_completion_tokens = integer("maxCompletionTokens");
  if (g.max_tokens == 0) g.max_tokens.reset();  // 0 = provider default (§7.5)
  if (g.max_completion_tokens == 0) g.max_completion_tokens.reset();
  g.temperature = num("temperature");
  g.top_p = num("topP");
  g.top_k = integer("topK");
  g.min_p = num("minP");
  g.top_a = num("topA");
  g.frequency_penalty = num("frequencyPenalty");
  g.presence_penalty = num("presencePenalty");
  g.repetition_penalty = num("repetitionPenalty");
  g.reasoning = std::max(0, integer("reasoning").value_or(0));
  g.reasoning_effort = str("reasoningEffort");
  if (auto it = j.find("includeReasoning"); it != j.end() && it->is_boolean()) g.include_reasoning = it->get<bool>();
  // The backends know "json" (a JSON object answer) or "" (text).
  const std::string rf = str("responseFormat");
  g.response_format = (rf == "json" || rf == "json_object") ? "json" : "";
  if (auto it = j.find("stop"); it != j.end() && it->is_array())
    for (const auto& e : *it)
      if (e.is_string()) g.stop.push_back(e.get<std::string>());
  g.verbosity = str("verbosity");
  return g;
}

namespace {

// A value as one token of §1.3, quoted only when it has to be (a blank or a quote in it): a `cfg`
// read and written back is the same settings (OP-70), a directory named `my dir` included.
std::string token(const std::string& v) {
  if (v.find_first_of(" \t\r\n'") == std::string::npos) return v;
  std::string out = "'";
  for (const char c : v) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

}  // namespace

std::string render_cfg(const CfgView& v) {
  std::string out = "backend=" + token(v.backend) + "\nmodel=" + token(v.model) + "\nagent=" + token(v.profile) +
                    "\ncwd=" + token(v.cwd_override) + "\n";
  const json j = parse_object(v.params);
  for (const auto& k : param_keys()) {
    out += k + "=";
    if (auto it = j.find(k); it != j.end() && !it->is_null()) out += token(it->is_string() ? it->get<std::string>() : it->dump());
    out += "\n";
  }
  return out;
}

p9::Result<CfgWrite> parse_cfg_write(const std::string& request) {
  auto kv = parse_request(request, {"backend", "model", "agent", "cwd", "maxTokens", "maxCompletionTokens",
                                    "temperature", "topP", "topK", "minP", "topA", "frequencyPenalty",
                                    "presencePenalty", "repetitionPenalty", "reasoning", "reasoningEffort",
                                    "includeReasoning", "responseFormat", "stop", "verbosity"});
  if (!kv) return kv.error();
  CfgWrite w;
  if (kv->has("agent")) w.profile = kv->get("agent");
  if (kv->has("backend")) {
    w.backend = kv->get("backend");
    if (auto st = check_backend(*w.backend); !st) return st.error();
  }
  if (kv->has("model")) {
    w.model = kv->get("model");
    if (auto st = check_model(*w.model); !st) return st.error();
  }
  if (kv->has("cwd")) w.cwd = kv->get("cwd");
  for (const auto& k : param_keys()) {
    if (!kv->has(k)) continue;
    const std::string v = kv->get(k);
    if (v.empty()) {
      w.params.emplace_back(k, std::nullopt);
      continue;
    }
    auto p = parse_param(k, v);
    if (!p) return p.error();
    w.params.emplace_back(k, *p);
  }
  return w;
}

}  // namespace ollie
