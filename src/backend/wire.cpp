#include "backend/wire.hpp"

#include "backend/limits.hpp"
#include "backend/text.hpp"

namespace ollie::backend {

json arguments_object(const std::string& args) {
  auto j = parse_json(args.empty() ? "{}" : args);
  return j.is_object() ? j : json::object();
}

HttpRequest json_request(const BackendSettings& s, std::string method, std::string url,
                         std::string body) {
  HttpRequest r;
  r.method = std::move(method);
  r.url = std::move(url);
  r.body = std::move(body);
  r.connect_timeout = s.connect_timeout;
  r.idle_timeout = s.idle_timeout;
  r.headers.push_back("Content-Type: application/json");
  r.headers.push_back("Accept: application/json, text/event-stream");
  r.headers.push_back("User-Agent: ollie/0.1");
  return r;
}

HttpRequest fetch_request(const BackendSettings& s, std::string method, std::string url, std::string body) {
  auto r = json_request(s, std::move(method), std::move(url), std::move(body));
  r.deadline = s.fetch_timeout;
  r.max_body = limits::response_body;
  return r;
}

std::size_t request_bytes(const ChatRequest& req) {
  std::size_t n = req.system.size();
  for (const auto& m : req.messages) {
    n += m.content.size();
    for (const auto& c : m.tool_calls) n += c.name.size() + c.arguments.size();
  }
  return n;
}

json function_tools(const std::vector<Tool>& tools) {
  json out = json::array();
  for (const auto& t : tools) {
    auto params = parse_json(t.parameters);
    out.push_back({{"type", "function"},
                   {"function", {{"name", t.name}, {"description", t.description},
                                 {"parameters", params.is_object() ? params : json::object()}}}});
  }
  return out;
}

std::string WireCache::messages(const std::vector<const Message*>& msgs, const std::function<json(const Message&)>& make) {
  std::lock_guard lock(mu_);
  std::size_t size = 2 + msgs.size();
  for (std::size_t i = 0; i < msgs.size(); i++) {
    const Message& m = *msgs[i];
    if (i >= kept_.size()) kept_.emplace_back(m, dump_json(make(m)));
    else if (!(kept_[i].first == m)) kept_[i] = {m, dump_json(make(m))};
    size += kept_[i].second.size();
  }
  if (kept_.size() > msgs.size()) kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(msgs.size()), kept_.end());
  std::string out;
  out.reserve(size);  // one allocation: the history is most of a request
  out += '[';
  for (std::size_t i = 0; i < msgs.size(); i++) {
    if (i) out += ',';
    out += kept_[i].second;
  }
  return out += ']';
}

std::string WireCache::tools(const std::vector<Tool>& tools, const std::function<json(const std::vector<Tool>&)>& make) {
  std::lock_guard lock(mu_);
  if (tools_text_.empty() || tools != tools_) {
    tools_ = tools;
    tools_text_ = dump_json(make(tools));
  }
  return tools_text_;
}

std::string splice_array(std::string text, std::string_view key, std::string_view array) {
  // A key is the only place a quote stands unescaped, and the keys that sort before `key` in
  // the bodies that use this hold scalars or arrays without such keys: the first match is it.
  const std::string empty = "\"" + std::string(key) + "\":[]";
  const auto at = text.find(empty);
  if (at == std::string::npos) return text;
  text.replace(at + empty.size() - 2, 2, array);
  return text;
}

const char* role_name(Role r) {
  switch (r) {
    case Role::system: return "system";
    case Role::user: return "user";
    case Role::assistant: return "assistant";
    case Role::tool: return "tool";
  }
  return "user";
}

StopReason map_stop_reason(std::string_view raw) {
  const auto r = lower(raw);
  if (r == "stop" || r == "end_turn" || r == "stop_sequence") return StopReason::end;
  if (r == "tool_use" || r == "tool_calls" || r == "function_call") return StopReason::tool_calls;
  if (r == "length" || r == "max_tokens") return StopReason::length;
  return StopReason::filtered;
}

}  // namespace ollie::backend
