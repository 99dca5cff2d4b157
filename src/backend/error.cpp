#include "backend/error.hpp"

#include <algorithm>
#include <limits>
#include <array>
#include <cctype>
#include <ctime>

#include "backend/json.hpp"
#include "backend/limits.hpp"
#include "backend/text.hpp"

namespace ollie::backend {

namespace {

constexpr std::array overflow_markers{
    "context_length_exceeded", "prompt is too long", "please reduce the length", "too many tokens",
    "maximum context length",  "exceeds the maximum number of tokens",
};

constexpr std::array tool_markers{
    "tool use is not supported", "tools is not supported", "function calling is not supported",
    "does not support tools",    "does not support function", "tool_use is not enabled",
    "not support tool",          "no endpoints found that support tool",
};

template <class Markers>
bool has_marker(std::string_view text, const Markers& markers) {
  const std::string low = lower(text);
  return std::any_of(markers.begin(), markers.end(),
                     [&](const char* m) { return low.find(m) != std::string::npos; });
}

// `s` on one line: each run of blanks and control characters (newlines) one space.
std::string collapsed(std::string_view s) {
  std::string out;
  bool blank = false;
  for (char c : s) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      blank = true;
      continue;
    }
    if (blank && !out.empty()) out += ' ';
    blank = false;
    out += c;
  }
  return out;
}

// The provider's own message: error.message (openai, anthropic, gemini), error (ollama),
// message (AWS), else the body itself, on one line and cut to a readable length; an HTML error
// page (a proxy's 502) says it in its title. Fields of another type are passed over.
std::string provider_message(std::string_view body) {
  const auto j = parse_json(body);
  std::string msg = str_field(j, "error");
  if (auto e = obj_field(j, "error"); e && msg.empty()) msg = str_field(*e, "message");
  for (const char* k : {"message", "Message"})
    if (msg.empty()) msg = str_field(j, k);
  if (!msg.empty()) return clip(one_line(std::move(msg)), limits::error_text);  // blocks hold it on one line (§8.2)
  const auto s = trim(body);
  if (s.empty()) return "empty response body";
  if (s.front() == '<') {
    const std::string low = lower(s);
    const auto open = low.find("<title>");
    const auto close = open == std::string::npos ? open : low.find("</title>", open);
    if (close != std::string::npos)
      if (auto title = collapsed(s.substr(open + 7, close - open - 7)); !title.empty()) return clip(title, limits::error_text);
  }
  return clip(collapsed(s), limits::error_body_text);
}

// Gemini gives the delay in the body: details[].retryDelay = "7s".
std::optional<int> body_retry_delay(std::string_view body) {
  const auto j = parse_json(body);
  const json* e = obj_field(j, "error");
  const json* details = e ? arr_field(*e, "details") : nullptr;
  if (!details) return std::nullopt;
  for (const auto& d : *details) {
    auto v = str_field(d, "retryDelay");
    if (!v.empty() && v.back() == 's') v.pop_back();
    if (auto n = parse_retry_after(v)) return n;
  }
  return std::nullopt;
}

bool invalid_key_body(std::string_view body) {
  return lower(body).find("api_key_invalid") != std::string::npos;
}

}  // namespace

std::string_view class_name(ErrorClass c) {
  switch (c) {
    case ErrorClass::rate_limit: return "rate limit";
    case ErrorClass::transient: return "transient";
    case ErrorClass::stream_drop: return "stream drop";
    case ErrorClass::context_overflow: return "context overflow";
    case ErrorClass::tool_unsupported: return "tool unsupported";
    case ErrorClass::auth: return "authentication";
    case ErrorClass::client: return "client error";
    case ErrorClass::config: return "configuration";
  }
  return "unknown";
}

bool has_overflow_marker(std::string_view text) { return has_marker(text, overflow_markers); }
bool has_tool_unsupported_marker(std::string_view text) { return has_marker(text, tool_markers); }

ErrorClass classify_in_stream(int code, std::string_view text) {
  if (code == 429) return ErrorClass::rate_limit;
  if (has_overflow_marker(text)) return ErrorClass::context_overflow;
  if (code >= 400 && code < 500) return ErrorClass::client;
  return ErrorClass::transient;
}

Error in_stream_error(std::string_view backend, int code, std::string_view message, std::string_view whole) {
  const ErrorClass cls = classify_in_stream(code, whole);
  std::string text(backend);
  if (cls == ErrorClass::transient) text += ": server error: " + (code ? std::to_string(code) + " " : std::string());
  else text += ": error in stream: ";
  return Error{cls, text + one_line(std::string(message)), code, {}};
}

std::string redact(std::string text, std::string_view secret) {
  if (secret.size() < min_secret) return text;
  for (auto pos = text.find(secret); pos != std::string::npos; pos = text.find(secret, pos + 3))
    text.replace(pos, secret.size(), "***");
  return text;
}

std::optional<int> parse_retry_after(std::string_view value) {
  value = trim(value);
  if (value.empty()) return std::nullopt;
  if (std::all_of(value.begin(), value.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; })) {
    double d = 0;
    try { d = std::stod(std::string(value)); } catch (...) { return std::nullopt; }
    // A wait too long for an int is still a wait (above §8.2's ceiling: not retried), not none.
    constexpr int longest = std::numeric_limits<int>::max();
    if (d >= longest) return longest;
    return static_cast<int>(d + 0.999);
  }
  std::tm tm{};  // HTTP-date: "Wed, 21 Oct 2015 07:28:00 GMT"
  const std::string v(value);
  if (!strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm)) return std::nullopt;
  const auto when = timegm(&tm);
  const auto now = std::time(nullptr);
  return when > now ? static_cast<int>(std::min<std::time_t>(when - now, std::numeric_limits<int>::max())) : 0;
}

Error classify_http(const HttpFailure& f) {
  const std::string body = redact(std::string(f.body), f.secret);
  const std::string msg = provider_message(body);
  const std::string who(f.backend);
  Error e;
  e.http_status = f.status;
  if (f.status == 429) {
    e.cls = ErrorClass::rate_limit;
    e.retry_after_s = parse_retry_after(f.retry_after);
    if (!e.retry_after_s) e.retry_after_s = body_retry_delay(body);
    e.message = who + ": rate limited: " + msg;
  } else if (f.status == 401 || f.status == 403 || (f.status == 400 && invalid_key_body(body))) {
    e.cls = ErrorClass::auth;
    e.message = who + ": authentication failed" + (f.key_var.empty() ? std::string() : " (check " + std::string(f.key_var) + ")");
  } else if (f.status == 400 && has_overflow_marker(body)) {  // §8.2: a 400 whose body carries the marker
    e.cls = ErrorClass::context_overflow;
    e.message = who + ": context overflow: " + msg;
  } else if ((f.status == 400 || f.status == 404 || f.status == 422) &&
             has_tool_unsupported_marker(body)) {
    e.cls = ErrorClass::tool_unsupported;
    e.message = "model does not support tool calls: " + std::string(f.model);
  } else if (f.status >= 500) {
    e.cls = ErrorClass::transient;
    e.message = who + ": server error: " + std::to_string(f.status) + " " + msg;
  } else {
    e.cls = ErrorClass::client;
    e.message = who + ": " + std::to_string(f.status) + " " + msg;
  }
  return e;
}

}  // namespace ollie::backend
