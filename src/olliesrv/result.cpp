#include "olliesrv/result.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdint>

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

/// The envelope's text when `out` is a JSON object with a `content` array.
bool envelope(const std::string& out, std::string& text, bool& is_error) {
  // Cheap test first: an envelope is an object, so it starts with `{` after blanks.
  auto first = out.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || out[first] != '{') return false;
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

Converted convert_reply(const ProcReply& r, int timeout) {
  const std::string status = header(r, "status");
  const std::string out = p9::valid_utf8(r.out), err = p9::valid_utf8(r.err);
  Converted c;

  if (status == "failed") {
    // Nothing ran: the reason is toolsrv's stderr (one line, its trailing newline dropped).
    std::string reason = err;
    while (!reason.empty() && (reason.back() == '\n' || reason.back() == '\r')) reason.pop_back();
    if (reason.empty()) reason = "start failed";
    c.text = cut_result("error: " + reason);
    c.error = true;
    return c;
  }

  std::string prefix;
  if (status == "exited") {
    const std::string code = header(r, "exit");
    if (code != "0") prefix = "error: exit status " + (code.empty() ? std::string("?") : code) + "\n";
  } else if (status == "timeout") {
    prefix = "error: execution timeout after " + std::to_string(timeout) + " seconds\n";
  } else if (status == "signaled") {
    const std::string sig = header(r, "signal");
    prefix = "error: killed by signal " + (sig.empty() ? std::string("?") : sig) + "\n";
  } else if (status == "denied") {
    prefix = "error: bypass denied\n";
  } else {
    prefix = "error: bad reply from tool server: status " + status.substr(0, 32) + "\n";
  }

  std::string text;
  bool env_error = false;
  if (!envelope(out, text, env_error)) text = out;
  // A status prefix already starts the result with `error: `: the envelope's own `error: ` is
  // added only when the process itself succeeded.
  if (env_error && prefix.empty()) text = "error: " + text;
  if (!err.empty()) text += "\n[stderr]\n" + err;
  c.text = cut_result(prefix + text);
  c.error = !prefix.empty() || env_error;
  return c;
}

std::string exec_text(const ProcReply& r, int timeout) {
  const std::string status = header(r, "status");
  std::string text, last;
  if (status == "failed") {  // nothing ran: toolsrv's stderr is its reason
    last = p9::valid_utf8(r.err);
    while (!last.empty() && (last.back() == '\n' || last.back() == '\r')) last.pop_back();
    if (last.empty()) last = "start failed";
  } else {
    text = p9::valid_utf8(r.out);
    if (!r.err.empty() && !text.empty() && text.back() != '\n') text += '\n';
    text += p9::valid_utf8(r.err);
    if (status == "exited") {
      if (const std::string code = header(r, "exit"); code != "0") last = "exit " + (code.empty() ? std::string("?") : code);
    } else if (status == "timeout") {
      last = "execution timeout after " + std::to_string(timeout) + " seconds";
    } else if (status == "signaled") {
      const std::string sig = header(r, "signal");
      last = "killed by signal " + (sig.empty() ? std::string("?") : sig);
    } else if (status == "denied") {
      last = "bypass denied";
    } else {
      last = "bad reply from tool server: status " + status.substr(0, 32);
    }
  }
  if (!last.empty()) text += (text.empty() || text.back() == '\n' ? "" : "\n") + last;
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
