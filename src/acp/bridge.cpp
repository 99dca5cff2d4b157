#include "bridge.hpp"

#include <algorithm>
#include <array>
#include <regex>
#include <spdlog/spdlog.h>

#include "acp/updates.hpp"

namespace acp {
namespace {

bool is_uuid(const std::string& s) {
  static const std::regex re("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  return std::regex_match(s, re);
}

// key=value lines (cfg): the value of key.
std::string value_of(const std::string& kv, const std::string& key) {
  for (const auto& l : lines(kv))
    if (l.rfind(key + "=", 0) == 0) return l.substr(key.size() + 1);
  return "";
}

// An optional string parameter: -32602 when it is there with another type.
void check_string(const json& params, const char* key) {
  if (params.is_object() && params.contains(key)) (void)param(params, key);
}

// session/new's and session/load's mcpServers: an array of MCP servers, each with its name (ACP's
// McpServer). The bridge uses none, but a malformed list is the editor's bug to be told of.
// Absent is taken as none.
void check_mcp(const json& params) {
  if (!params.is_object() || !params.contains("mcpServers")) return;
  const json& servers = params["mcpServers"];
  if (!servers.is_array()) throw RpcError(code::invalid_params, "invalid params: mcpServers must be an array");
  for (std::size_t i = 0; i < servers.size(); i++)
    if (!servers[i].is_object() || !servers[i].contains("name") || !servers[i]["name"].is_string())
      throw RpcError(code::invalid_params,
                     "invalid params: mcpServers[" + std::to_string(i) + "] must be an MCP server with a name (a string)");
}

// The MCP servers of a session/new or session/load (checked), by name, for the notice that they
// are not used.
std::string ignored_mcp(const json& params) {
  if (!params.contains("mcpServers") || params["mcpServers"].empty()) return "";
  std::string names;
  for (const auto& s : params["mcpServers"]) {
    if (!names.empty()) names += ", ";
    names += s["name"].get<std::string>();
  }
  spdlog::warn("acp: ignoring the editor's MCP servers: {}", names);
  return "ollie-acp: the editor's MCP servers (" + names +
         ") are not used: Ollie runs its own tools, sandboxed by toolsrv; add MCP-backed tools to Ollie's tools directory instead.";
}

// initialize's result: what this bridge does, stated as it is.
json capabilities() {
  return {
      {"protocolVersion", protocol_version},
      {"agentCapabilities",
       {{"loadSession", true},
        {"promptCapabilities", {{"image", false}, {"audio", false}, {"embeddedContext", true}}},
        {"mcpCapabilities", {{"http", false}, {"sse", false}}},
        {"sessionCapabilities", json::object()}}},
      {"agentInfo", {{"name", "ollie-acp"}, {"title", "Ollie"}, {"version", "0.1.0"}}},
      {"authMethods", json::array()},
  };
}

// The modes: the agent profiles of `agents`, the current one from cfg's `agent`.
json modes_state(const std::string& cfg, const std::string& profiles) {
  json modes = json::array();
  for (const auto& p : lines(profiles))
    if (!p.empty()) modes.push_back({{"id", p}, {"name", p}, {"description", "Ollie agent profile " + p}});
  return {{"currentModeId", value_of(cfg, "agent")}, {"availableModes", std::move(modes)}};
}

// The model selector: every `backend<TAB>model` line of `models`, the current one from cfg.
json model_options(const std::string& cfg, const std::string& models) {
  const std::string current = value_of(cfg, "backend") + "/" + value_of(cfg, "model");
  json options = json::array();
  bool listed = false;
  for (const auto& l : lines(models)) {
    const auto tab = l.find('\t');
    if (tab == std::string::npos) continue;
    const std::string value = l.substr(0, tab) + "/" + l.substr(tab + 1);
    listed = listed || value == current;
    options.push_back({{"value", value}, {"name", l.substr(tab + 1) + " (" + l.substr(0, tab) + ")"}});
  }
  if (!listed)
    options.insert(options.begin(), json{{"value", current}, {"name", value_of(cfg, "model") + " (" + value_of(cfg, "backend") + ")"}});
  return json::array({{{"id", "model"}, {"name", "Model"}, {"category", "model"}, {"type", "select"},
                       {"currentValue", current}, {"options", std::move(options)}}});
}

json config_result(json options) {
  json r = json::object();
  r["configOptions"] = std::move(options);
  return r;
}

}  // namespace

std::string quote(const std::string& v) {
  std::string q = "'";
  for (char c : v) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

std::string param(const json& params, const char* key) {
  if (!params.is_object() || !params.contains(key) || !params[key].is_string())
    throw RpcError(code::invalid_params, std::string("invalid params: ") + key + " must be a string");
  return params[key].get<std::string>();
}

void Bridge::need(const p9::Status& st, const std::string& what) {
  if (!st) {
    const int c = connection_lost(st.ename()) ? code::internal_error : code::invalid_params;
    throw RpcError(c, what + ": " + st.ename());
  }
}

void Bridge::install() {
  static const std::array<std::pair<const char*, Method>, 6> requests{{
      {"initialize", &Bridge::initialize},
      {"session/new", &Bridge::new_session},
      {"session/load", &Bridge::load_session},
      {"session/prompt", &Bridge::prompt},
      {"session/set_mode", &Bridge::set_mode},
      {"session/set_config_option", &Bridge::set_config_option},
  }};
  for (const auto& [name, fn] : requests)
    rpc_.on_request(name, [this, fn = fn](json p) { return served(fn, std::move(p)); });
  rpc_.on_notification("session/cancel", [this](json p) { return cancel(std::move(p)); });
}

// ACP: the client initializes the connection before anything else. Checked in the coroutine, not
// at dispatch: an initialize and the request after it may come in one read, and handlers run in
// the order they were read.
asio::awaitable<json> Bridge::served(Method m, json params) {
  if (!initialized_ && m != &Bridge::initialize)
    throw RpcError(code::invalid_request, "invalid request: initialize first (ACP: the connection begins with initialize)");
  co_return co_await (this->*m)(std::move(params));
}

std::size_t Bridge::turns() const {
  return static_cast<std::size_t>(std::count_if(live_.begin(), live_.end(), [](const auto& l) { return l.second->turn != nullptr; }));
}

std::shared_ptr<Live> Bridge::find(const json& params) {
  const std::string id = param(params, "sessionId");
  auto it = live_.find(id);
  if (it == live_.end()) throw RpcError(code::not_found, "no such session: " + id + " (session/new or session/load it first)");
  return it->second;
}

void Bridge::update(const Live& live, json u) {
  rpc_.notify("session/update", {{"sessionId", live.id}, {"update", std::move(u)}});
}

asio::awaitable<json> Bridge::initialize(json params) {
  if (!params.is_object() || !params.contains("protocolVersion") || !params["protocolVersion"].is_number_integer())
    throw RpcError(code::invalid_params, "invalid params: protocolVersion must be an integer");
  // Version 1 is the one this bridge speaks: it answers it whatever the client asked, and a
  // client that cannot speak it disconnects (ACP's negotiation).
  initialized_ = true;
  co_return capabilities();
}

asio::awaitable<json> Bridge::new_session(json params) {
  const std::string cwd = param(params, "cwd");
  check_mcp(params);
  std::string req = "cwd=" + quote(cwd) + "\n";
  std::string path = "session/new";
  auto sid = co_await ollie_.call(path, req);
  auto live = std::make_shared<Live>();
  live->sid = trim(need(std::move(sid), "session/new"));
  std::string apath = "session/" + live->sid + "/agent/new", areq = "name=\n";
  auto aid = co_await ollie_.call(apath, areq);
  if (!aid) {
    std::string ctl = "session/" + live->sid + "/ctl", kill = "kill";
    auto killed = co_await ollie_.call(ctl, kill);  // nothing is left behind
    if (!killed) spdlog::warn("acp: session {}: kill: {}", live->sid, killed.ename());
  }
  live->aid = trim(need(std::move(aid), "agent/new"));
  live->id = live->sid + "/" + live->aid;
  live->notice = ignored_mcp(params);
  live_[live->id] = live;
  spdlog::info("acp: session/new {} in {}", live->id, cwd);
  json state = co_await session_state(live);
  state["sessionId"] = live->id;
  co_return state;
}

asio::awaitable<json> Bridge::load_session(json params) {
  const std::string id = param(params, "sessionId");
  check_string(params, "cwd");  // unused (the agent keeps its own cwd), but of ACP's type
  check_mcp(params);
  const auto slash = id.find('/');
  auto live = std::make_shared<Live>();
  if (slash != std::string::npos) live->sid = id.substr(0, slash), live->aid = id.substr(slash + 1);
  if (!is_uuid(live->sid) || !is_uuid(live->aid)) throw RpcError(code::not_found, "no such session: " + id);
  live->id = id;
  live->notice = ignored_mcp(params);
  auto old = live_.find(id);
  if (old != live_.end() && old->second->turn) throw RpcError(code::invalid_request, "session " + id + " is running a prompt");
  std::string log_path = live->dir() + "log.raw";
  auto log = co_await ollie_.read(log_path);
  if (!log) {
    if (connection_lost(log.ename())) throw RpcError(code::internal_error, "olliesrv: " + log.ename());
    throw RpcError(code::not_found, "no such session: " + id + " (" + log.ename() + ")");
  }
  std::string ctl_path = live->dir() + "ctl", cwd_verb = "cwd";
  auto cwd = co_await ollie_.call(ctl_path, cwd_verb);
  // The history, replayed as the updates it gave when it was live.
  Translator t(cwd ? trim(*cwd) : std::string());
  for (const auto& l : lines(*log)) {
    json b = json::parse(l, nullptr, false);
    for (auto& u : t.block(b)) update(*live, std::move(u));
  }
  for (auto& u : t.unfinished()) update(*live, std::move(u));
  std::string plan_path = live->dir() + "plan";
  auto plan = co_await ollie_.read(plan_path);
  if (plan && !trim(*plan).empty()) update(*live, plan_update(*plan));
  live_[id] = live;
  spdlog::info("acp: session/load {}", id);
  json state = co_await session_state(live);
  co_return state;
}

asio::awaitable<json> Bridge::session_state(std::shared_ptr<Live> live) {
  std::string cfg_path = live->dir() + "cfg", agents_path = "agents";
  auto cfg = co_await ollie_.read(cfg_path);
  const std::string text = need(std::move(cfg), "cfg");
  auto profiles = co_await ollie_.read(agents_path);
  json state = json::object();
  state["modes"] = modes_state(text, profiles ? *profiles : std::string());
  json options = co_await config_options(live);
  state["configOptions"] = std::move(options);
  co_return state;
}

asio::awaitable<json> Bridge::config_options(std::shared_ptr<Live> live) {
  std::string cfg_path = live->dir() + "cfg", models_path = "models";
  auto cfg = co_await ollie_.read(cfg_path);
  const std::string text = need(std::move(cfg), "cfg");
  auto models = co_await ollie_.read(models_path);
  co_return model_options(text, models ? *models : std::string());
}

asio::awaitable<json> Bridge::set_mode(json params) {
  auto live = find(params);
  const std::string mode = param(params, "modeId");
  std::string ctl = live->dir() + "ctl", verb = "agent " + quote(mode);
  auto r = co_await ollie_.call(ctl, verb);
  need(std::move(r), "agent " + mode);
  co_return json::object();
}

asio::awaitable<json> Bridge::set_config_option(json params) {
  auto live = find(params);
  if (param(params, "configId") != "model") throw RpcError(code::invalid_params, "unknown config option: " + params["configId"].get<std::string>());
  const std::string value = param(params, "value");
  const auto slash = value.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == value.size())
    throw RpcError(code::invalid_params, "invalid model: " + value + " (backend/model)");
  // A select's value is one of its options (doc/acp.md: every backend/model of `models`); a
  // stale or mistyped one would switch the agent to a model that fails at the next prompt.
  const json offered = co_await config_options(live);
  bool listed = false;
  for (const auto& o : offered)
    if (o.value("id", "") == "model" && o.contains("options"))
      for (const auto& choice : o["options"]) listed = listed || choice.value("value", "") == value;
  if (!listed) throw RpcError(code::invalid_params, "model not offered: " + value + " (see the model option's values)");
  const std::string backend = value.substr(0, slash), model = value.substr(slash + 1);
  std::string cfg_path = live->dir() + "cfg", ctl = live->dir() + "ctl";
  auto cfg = co_await ollie_.read(cfg_path);
  if (value_of(need(std::move(cfg), "cfg"), "backend") != backend) {
    std::string verb = "backend " + quote(backend);
    auto r = co_await ollie_.call(ctl, verb);
    need(std::move(r), "backend " + backend);
  }
  std::string verb = "model " + quote(model);
  auto r = co_await ollie_.call(ctl, verb);
  need(std::move(r), "model " + model);
  json options = co_await config_options(live);
  co_return config_result(std::move(options));
}

}  // namespace acp
