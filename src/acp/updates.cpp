#include "updates.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

namespace acp {

json parse_bounded(std::string_view text, bool* too_deep) {
  // The callback parser walks without recursion and keeps nothing below a refused level.
  bool deep = false;
  json j = json::parse(
      text, [&deep](int depth, json::parse_event_t, json&) { return !(deep = deep || depth >= max_json_depth); }, false);
  if (too_deep) *too_deep = deep;
  return deep ? json(json::value_t::discarded) : j;
}
namespace {

json text_chunk(const char* kind, std::string text) {
  return {{"sessionUpdate", kind}, {"content", {{"type", "text"}, {"text", std::move(text)}}}};
}

// The other blocks, rendered as the `chat` file renders them (spec §2.8.7), on lines of their own.
std::string rendered(const std::string& role, const std::string& name, const std::string& content) {
  if (role == "info" || role == "retry") return ":: " + content;
  if (role == "error") return "error: " + content;
  if (role == "bypass") return "bypass: " + content;
  if (role == "exec") return "! " + name + "\n" + content;
  return content;
}

std::string absolute(const std::string& path, const std::string& cwd) {
  if (path.empty() || path[0] == '/' || cwd.empty()) return path;
  if (path[0] == '~') return path;
  return cwd + (cwd.back() == '/' ? "" : "/") + path;
}

std::string cut(std::string s, std::size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) n--;
  s.resize(n);
  return s + "…";
}

}  // namespace

std::string tool_kind(std::string_view tool) {
  static const std::array<std::pair<std::string_view, std::string_view>, 17> kinds{{
      {"file_read", "read"},     {"file_write", "edit"},      {"file_edit", "edit"},
      {"file_glob", "search"},   {"file_grep", "search"},     {"codeintel", "search"},
      {"lsp_definition", "search"}, {"lsp_references", "search"}, {"lsp_hover", "read"},
      {"lsp_rename", "edit"},    {"shell", "execute"},        {"web_fetch", "fetch"},
      {"memory_remember", "think"}, {"memory_recall", "think"}, {"memory_forget", "think"},
      {"subagent_spawn", "think"}, {"web_search", "fetch"},
  }};
  for (const auto& [name, kind] : kinds)
    if (name == tool) return std::string(kind);
  return "other";
}

std::string tool_title(std::string_view tool, const json& args) {
  // What runs, when an argument says it: a description or a timeout beside it changes nothing.
  static constexpr std::array<const char*, 2> says{"cmd", "path"};
  std::string summary;
  for (const char* key : says)
    if (summary.empty() && args.is_object() && args.contains(key) && args[key].is_string()) summary = args[key].get<std::string>();
  if (summary.empty() && !args.is_null()) summary = args.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string title(tool);
  if (!summary.empty()) title += " " + cut(std::move(summary), 200);
  return title;
}

std::string bypass_summary(json args) {
  static constexpr std::array<const char*, 4> flags{"timeout", "background", "bypass", "sandbox"};
  if (args.is_object())
    for (const char* f : flags) args.erase(f);
  if (args.is_object() && args.size() == 1 && args.contains("cmd") && args["cmd"].is_string())
    return args["cmd"].get<std::string>();
  return args.dump(-1, ' ', false, json::error_handler_t::replace);  // objects keep sorted keys
}

std::string unescaped(std::string_view s) {
  static constexpr std::array<std::pair<char, char>, 4> singles{{{'\\', '\\'}, {'t', '\t'}, {'r', '\r'}, {'n', '\n'}}};
  const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  std::string out;
  for (std::size_t i = 0; i < s.size(); i++) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char e = s[i + 1];
    auto single = std::find_if(singles.begin(), singles.end(), [e](const auto& p) { return p.first == e; });
    if (single != singles.end()) {
      out += single->second;
      i++;
    } else if (e == 'x' && i + 3 < s.size() && hex(s[i + 2]) && hex(s[i + 3])) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 2, 2)), nullptr, 16));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::optional<std::string> Translator::awaiting(std::string_view tool, std::string_view summary,
                                                const std::set<std::string>& taken) const {
  for (const auto& c : calls_)
    if (c.tool == tool && c.summary == summary && !taken.count(c.id)) return c.id;
  return std::nullopt;
}

std::vector<json> Translator::block(const json& b) {
  std::vector<json> out;
  if (!b.is_object()) return out;
  auto str = [&](const char* k) {
    auto it = b.find(k);
    return it != b.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string role = str("role"), id = str("id"), name = str("name"), content = str("content");
  const bool partial = b.value("partial", false);
  if (id.empty() || done_.count(id)) return out;
  if (!partial) done_.insert(id);
  if (role == "assistant" || role == "reasoning" || role == "call" || role == "tool") {
    end_.refused = false;  // the turn went on after an error: it did not end there
    end_.failure.reset();
  }

  if (role == "assistant" || role == "reasoning") {
    std::size_t& sent = sent_[id];
    if (content.size() > sent) {
      const char* kind = role == "assistant" ? "agent_message_chunk" : "agent_thought_chunk";
      out.push_back(text_chunk(kind, content.substr(sent)));
      sent = content.size();
    }
    if (!partial) sent_.erase(id);
    return out;
  }
  if (partial) return out;
  if (role == "context") return out;
  if (role == "user") {
    std::string text = name.empty() ? content : "(" + name + ") " + content;
    out.push_back(text_chunk("user_message_chunk", std::move(text)));
    return out;
  }
  if (role == "call") {
    json args = parse_bounded(content);
    if (args.is_discarded()) args = content;
    json call = {{"sessionUpdate", "tool_call"}, {"toolCallId", id}, {"title", tool_title(name, args)},
                 {"kind", tool_kind(name)}, {"status", "in_progress"}, {"rawInput", args}};
    json locations = json::array();
    if (args.is_object() && args.contains("path") && args["path"].is_string()) {
      json loc = {{"path", absolute(args["path"].get<std::string>(), cwd_)}};
      if (args.contains("line") && args["line"].is_number_unsigned()) loc["line"] = args["line"];
      locations.push_back(std::move(loc));
    }
    call["locations"] = std::move(locations);
    calls_.push_back({id, name, bypass_summary(args)});
    out.push_back(std::move(call));
    return out;
  }
  if (role == "tool") {
    if (calls_.empty()) return out;  // a result without its call (history cut): nothing to attach it to
    std::string call = calls_.front().id;
    calls_.pop_front();
    const bool failed = content.rfind("error:", 0) == 0;
    json text = {{"type", "content"}, {"content", {{"type", "text"}, {"text", content}}}};
    out.push_back({{"sessionUpdate", "tool_call_update"}, {"toolCallId", call},
                   {"status", failed ? "failed" : "completed"}, {"content", json::array({text})}});
    return out;
  }
  if (role == "info" && content == "interrupted") end_.interrupted = true;
  if (role == "error") {
    if (content.rfind("stopped: ", 0) == 0)
      end_.refused = true;
    else
      end_.failure = content;
  }
  out.push_back(text_chunk("agent_message_chunk", "\n\n" + rendered(role, name, content) + "\n\n"));
  return out;
}

std::vector<json> Translator::unfinished() {
  std::vector<json> out;
  for (const auto& c : calls_)
    out.push_back({{"sessionUpdate", "tool_call_update"}, {"toolCallId", c.id}, {"status", "failed"}});
  calls_.clear();
  return out;
}

json plan_update(std::string_view plan) {
  json entries = json::array();
  while (!plan.empty()) {
    const auto nl = plan.find('\n');
    std::string_view line = plan.substr(0, nl);
    plan = nl == std::string_view::npos ? std::string_view() : plan.substr(nl + 1);
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string_view::npos) continue;
    line.remove_prefix(start);
    if (line.size() < 6 || (line[0] != '-' && line[0] != '*' && line[0] != '+') || line[1] != ' ' ||
        line[2] != '[' || line[4] != ']' || line[5] != ' ')
      continue;
    const char mark = line[3];
    const char* status = mark == ' '                              ? "pending"
                         : (mark == 'x' || mark == 'X')           ? "completed"
                         : (mark == '~' || mark == '-' || mark == '>') ? "in_progress"
                                                                   : nullptr;
    if (!status) continue;
    std::string_view text = line.substr(6);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\r' || text.back() == '\t')) text.remove_suffix(1);
    entries.push_back({{"content", std::string(text)}, {"priority", "medium"}, {"status", status}});
  }
  return {{"sessionUpdate", "plan"}, {"entries", std::move(entries)}};
}

}  // namespace acp
