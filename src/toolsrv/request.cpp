#include "toolsrv/request.hpp"

#include <charconv>

namespace toolsrv {

p9::Result<CallRequest> parse_call_request(std::string_view text) {
  CallRequest r;
  bool have_body = false;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty()) {
      have_body = true;
      break;
    }
    const auto eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0) return p9::error("bad header: " + std::string(line));
    const auto key = line.substr(0, eq);
    const auto value = line.substr(eq + 1);
    if (key == "tool") {
      r.tool = value;
    } else if (key == "agent") {
      r.agent = value;
    } else if (key == "timeout") {
      int t = -1;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), t);
      if (value.empty() || ec != std::errc{} || end != value.data() + value.size() || t < 0) {
        return p9::error("invalid timeout: " + std::string(value));
      }
      r.timeout = t;
    } else if (key == "bypass") {
      if (value != "true" && value != "false") return p9::error("bad header: " + std::string(line));
      r.bypass = value == "true";
    } else if (key == "auth") {
      r.auth = value;
    } else {
      return p9::error("bad header: " + std::string(line));
    }
  }
  if (r.tool.empty()) return p9::error("missing tool");
  if (r.agent.empty()) return p9::error("missing agent");
  if (!have_body) return p9::error("invalid args: no blank line before the arguments");
  r.args_text = text;
  r.args = nlohmann::json::parse(text, nullptr, false);
  if (r.args.is_discarded()) return p9::error("invalid args: not valid JSON");
  if (!r.args.is_object()) return p9::error("invalid args: not a JSON object");
  return r;
}

}  // namespace toolsrv
