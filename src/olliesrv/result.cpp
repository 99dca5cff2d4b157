#include "olliesrv/result.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdint>

#include "backend/json.hpp"
#include "lib9p/utf8.hpp"

namespace ollie {

namespace {

constexpr std::size_t max_exec = 64 << 10;  // an exec block: a person's screenfuls, not the model's budget

bool parse_count(std::string_view s, std::size_t& n) {
  if (s.empty() || s.size() > 12) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string header(const ProcReply& r, const std::string& key) {
  auto it = r.header.find(key);
  return it == r.header.end() ? std::string() : it->second;
}

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

/// The largest output taken for an envelope, and its deepest nesting: the model sees 8 KiB of a
/// result, and the parse runs on the session's I/O thread (a tool's 10 MiB of `[` held it for
/// half a minute and a gigabyte). Past either, the output is raw text.
constexpr std::size_t max_envelope = 1u << 20;
constexpr int max_envelope_depth = 32;

/// The envelope's text when `out` is a JSON object with a `content` array.
bool envelope(const std::string& out, std::string& text, bool& is_error) {
  // Cheap test first: an envelope is an object, so it starts with `{` after blanks.
  auto first = out.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || out[first] != '{') return false;
  if (out.size() > max_envelope || backend::too_deep(out, max_envelope_depth)) return false;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto c = j.find("content");
  if (c == j.end() || !c->is_array()) return false;
  text.clear();
  bool first_part = true;
  for (const auto& part : *c) {
    if (!first_part) text += '\n';
    first_part = false;
    std::string type = "unknown";
    if (part.is_object()) {
      auto t = part.find("type");
      if (t != part.end() && t->is_string()) type = t->get<std::string>();
      auto tx = part.find("text");
      if (type == "text" && tx != part.end() && tx->is_string()) {
        text += tx->get<std::string>();
        continue;
      }
    }
    text += "[" + type + " content omitted]";
  }
  auto e = j.find("isError");
  is_error = e != j.end() && e->is_boolean() && e->get<bool>();
  return true;
}

}  // namespace

p9::Result<ProcReply> parse_proc_reply(std::string_view text) {
  ProcReply r;
  std::size_t at = 0;
  for (;;) {
    auto nl = text.find('\n', at);
    if (nl == std::string_view::npos) return p9::error("bad reply: no end of header");
    std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    if (line.empty()) break;
    auto eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      std::string shown(line.substr(0, 64));
      return p9::error("bad reply header: " + shown);
    }
    if (r.header.size() >= 64) return p9::error("bad reply: too many header lines");
    r.header[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  std::size_t nout = 0, nerr = 0;
  if (!parse_count(header(r, "stdout"), nout)) return p9::error("bad reply: stdout=" + header(r, "stdout").substr(0, 32));
  if (!parse_count(header(r, "stderr"), nerr)) return p9::error("bad reply: stderr=" + header(r, "stderr").substr(0, 32));
  std::string_view body = text.substr(at);
  if (body.size() != nout + nerr)
    return p9::error("bad reply: body of " + std::to_string(body.size()) + " bytes, header says " +
                     std::to_string(nout + nerr));
  r.out = std::string(body.substr(0, nout));
  r.err = std::string(body.substr(nout));
  return r;
}

std::string redacted(std::string text, std::string_view secret) {
  if (secret.empty()) return text;
  for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at))
    text.replace(at, secret.size(), "[redacted]");
  return text;
}

namespace {

/// How a call ended when it did not exit 0, "" when it did: `<exit_word><n>`, `execution timeout
/// after <n> seconds`, `killed by signal <n>`, `bypass denied`, or for a start that failed (nothing
/// ran) toolsrv's reason, its stderr (one line, its trailing newline dropped).
std::string ending(const ProcReply& r, int timeout, const char* exit_word) {
  const std::string status = header(r, "status");
  if (status == "failed") {
    std::string reason = p9::valid_utf8(r.err);
    while (!reason.empty() && (reason.back() == '\n' || reason.back() == '\r')) reason.pop_back();
    return reason.empty() ? "start failed" : reason;
  }
  if (status == "exited") {
    const std::string code = header(r, "exit");
    return code == "0" ? "" : exit_word + (code.empty() ? std::string("?") : code);
  }
  if (status == "timeout") return "execution timeout after " + std::to_string(timeout) + " seconds";
  if (status == "signaled") {
    const std::string sig = header(r, "signal");
    return "killed by signal " + (sig.empty() ? std::string("?") : sig);
  }
  if (status == "denied") return "bypass denied";
  return "bad reply from tool server: status " + status.substr(0, 32);
}

}  // namespace

Converted convert_reply(const ProcReply& r, int timeout) {
  const std::string end = ending(r, timeout, "exit status ");
  Converted c;
  if (header(r, "status") == "failed") {
    c.text = cut_result("error: " + end);
    c.error = true;
    return c;
  }
  const std::string prefix = end.empty() ? "" : "error: " + end + "\n";
  const std::string out = p9::valid_utf8(r.out), err = p9::valid_utf8(r.err);
  std::string text;
  bool env_error = false;
  if (!envelope(out, text, env_error)) text = out;
  if (env_error) text = "error: " + text;  // after a status prefix too (§8.3.4's rules, in order)
  if (!err.empty()) text += "\n[stderr]\n" + err;
  c.text = cut_result(prefix + text);
  c.error = !prefix.empty() || env_error;
  return c;
}

std::string exec_text(const ProcReply& r, int timeout) {
  std::string text;
  if (header(r, "status") != "failed") {  // else nothing ran: the ending is all there is
    text = p9::valid_utf8(r.out);
    if (!r.err.empty() && !text.empty() && text.back() != '\n') text += '\n';
    text += p9::valid_utf8(r.err);
  }
  if (const std::string last = ending(r, timeout, "exit "); !last.empty())
    text += (text.empty() || text.back() == '\n' ? "" : "\n") + last;
  return cut_result(std::move(text), max_exec);
}

std::string cut_result(std::string text, std::size_t max) {
  if (text.size() <= max) return text;
  const std::size_t keep_each = max / 2;
  std::size_t head = keep_each;
  while (head > 0 && is_continuation(text[head])) head--;
  std::size_t tail = text.size() - keep_each;
  while (tail < text.size() && is_continuation(text[tail])) tail++;
  const std::size_t omitted = tail - head;
  std::string out = text.substr(0, head);
  out += "\n[\xE2\x80\xA6 " + std::to_string(omitted) + " bytes omitted \xE2\x80\xA6]\n";
  out.append(text, tail, std::string::npos);
  return out;
}

}  // namespace ollie
