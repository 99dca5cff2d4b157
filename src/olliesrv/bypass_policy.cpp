#include "bypass_policy.hpp"

#include <algorithm>
#include <cstdint>

#include "backend/text.hpp"

namespace ollie::bypass {

namespace {

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trim_left(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  return s;
}

/// Trailing blanks removed, except one escaped by a backslash (`allow shell ls\ `).
std::string_view trim_right(std::string_view s) {
  while (!s.empty() && blank(s.back())) {
    std::size_t slashes = 0;
    for (std::size_t i = s.size() - 1; i > 0 && s[i - 1] == '\\'; i--) slashes++;
    if (slashes % 2 == 1) break;
    s.remove_suffix(1);
  }
  return s;
}

/// The first word of s, and what follows it.
std::pair<std::string_view, std::string_view> word(std::string_view s) {
  s = trim_left(s);
  std::size_t n = 0;
  while (n < s.size() && !blank(s[n])) n++;
  return {s.substr(0, n), s.substr(n)};
}

bool tool_name(std::string_view t) {
  if (t == "*") return true;
  if (t.empty() || t.size() > 64) return false;
  return std::all_of(t.begin(), t.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

bool sha256_hex(std::string_view h) {
  return h.size() == 64 && std::all_of(h.begin(), h.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
         });
}

using backend::lower;

/// The length of the UTF-8 sequence at s[i], and its code point; 1 and -1 for a byte that does
/// not start a valid sequence.
std::pair<std::size_t, std::int32_t> utf8_at(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {1, b};
  std::size_t n = b >= 0xf0 && b <= 0xf4 ? 4 : b >= 0xe0 ? 3 : b >= 0xc2 && b < 0xe0 ? 2 : 0;
  if (b >= 0xf5) n = 0;
  if (n == 0 || i + n > s.size()) return {1, -1};
  std::int32_t cp = b & (0x7f >> n);
  for (std::size_t k = 1; k < n; k++) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xc0) != 0x80) return {1, -1};
    cp = (cp << 6) | (c & 0x3f);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
    return {1, -1};
  return {n, cp};
}

/// One element of a parsed glob.
struct Tok {
  enum Kind { lit, one, star } kind;
  std::string_view text;  ///< lit: one character (a UTF-8 sequence or a byte)
};

std::vector<Tok> compile(std::string_view g) {
  std::vector<Tok> out;
  for (std::size_t i = 0; i < g.size();) {
    if (g[i] == '*') {
      if (out.empty() || out.back().kind != Tok::star) out.push_back({Tok::star, {}});
      i++;
      continue;
    }
    if (g[i] == '?') {
      out.push_back({Tok::one, {}});
      i++;
      continue;
    }
    if (g[i] == '\\' && i + 1 < g.size()) i++;
    const auto n = utf8_at(g, i).first;
    out.push_back({Tok::lit, g.substr(i, n)});
    i += n;
  }
  return out;
}

bool wildcard_may_match(std::string_view ch, bool command) {
  if (ch == "\n") return false;
  if (!command || ch.size() != 1) return true;
  static constexpr std::string_view meta = ";&|<>$`(){}";
  return meta.find(ch[0]) == std::string_view::npos;
}

std::string rule_text(const Rule& r) {
  std::string t = (r.allow ? "allow " : "deny ") + r.tool + " " + r.glob;
  if (t.size() > 256) t = t.substr(0, 256) + "…";
  return t;
}

}  // namespace

p9::Result<Policy> parse(std::string_view text, Scope scope) {
  Policy p;
  int n = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    n++;
    auto nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    const auto bad = [n](const std::string& why) { return p9::error("policy line " + std::to_string(n) + ": " + why); };
    if (nl > max_text) return bad("policy longer than " + std::to_string(max_text >> 20) + " MiB");
    if (line.size() > max_line) return bad("line longer than " + std::to_string(max_line >> 20) + " MiB");
    line = trim_left(line);
    if (trim_right(line).empty() || line.front() == '#') continue;
    auto [directive, rest] = word(line);
    if (directive == "mode") {
      auto [value, extra] = word(rest);
      if (value.empty() || !trim_right(trim_left(extra)).empty()) return bad("usage: mode ask|allow|deny");
      if (p.mode) return bad("mode already set on line " + std::to_string(p.mode_line));
      if (value == "ask") p.mode = Verdict::ask;
      else if (value == "allow") p.mode = Verdict::allow;
      else if (value == "deny") p.mode = Verdict::deny;
      else return bad("unknown mode: " + shown(value));
      p.mode_line = n;
    } else if (directive == "allow" || directive == "deny") {
      auto [tool, after] = word(rest);
      const std::string_view glob = trim_right(trim_left(after));
      if (tool.empty() || glob.empty()) return bad("usage: " + std::string(directive) + " <tool|*> <glob>");
      if (!tool_name(tool)) return bad("invalid tool: " + shown(tool));
      std::size_t slashes = 0;
      for (auto it = glob.rbegin(); it != glob.rend() && *it == '\\'; ++it) slashes++;
      if (slashes % 2 == 1) return bad("glob ends with a lone \\");
      p.rules.push_back({directive == "allow", std::string(tool), std::string(glob), n});
    } else if (directive == "sandbox") {
      if (scope == Scope::session) return bad("sandbox lines belong in the global policy");
      auto [hash, after] = word(rest);
      const std::string_view dir = trim_right(trim_left(after));
      if (hash.empty() || dir.empty()) return bad("usage: sandbox <sha256> <dir>");
      if (!sha256_hex(hash)) return bad("invalid hash: " + shown(hash));
      if (dir.front() != '/') return bad("dir must be absolute: " + shown(dir));
      p.sandbox.emplace_back(lower(hash), std::string(dir));
    } else {
      return bad("unknown directive: " + shown(directive));
    }
  }
  return p;
}

Summary summarize(const nlohmann::json& args) {
  if (args.is_object() && args.size() == 1) {
    auto it = args.find("cmd");
    if (it != args.end() && it->is_string()) return {it->get<std::string>(), true};
  }
  return {args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), false};
}

bool glob_match(std::string_view glob, const Summary& s) {
  const auto toks = compile(glob);
  const std::size_t m = toks.size();
  const std::string_view t = s.text;
  if (std::none_of(toks.begin(), toks.end(), [](const Tok& k) { return k.kind == Tok::star; })) {
    // No star: one character of the summary per element.
    std::size_t i = 0;
    for (const auto& k : toks) {
      if (i >= t.size()) return false;
      const auto n = t[i] & 0x80 ? utf8_at(t, i).first : 1;
      const std::string_view ch = t.substr(i, n);
      if (k.kind == Tok::one ? !wildcard_may_match(ch, s.command) : k.text != ch) return false;
      i += n;
    }
    return i == t.size();
  }
  // The glob as an NFA over characters: the set of positions reached so far.
  std::vector<std::size_t> cur, next;
  std::vector<std::size_t> mark(m + 1, 0);
  std::size_t stamp = 1;
  const auto add = [&](std::vector<std::size_t>& set, std::size_t i) {
    for (;;) {
      if (mark[i] == stamp) return;
      mark[i] = stamp;
      set.push_back(i);
      if (i == m || toks[i].kind != Tok::star) return;
      i++;  // a star may match nothing
    }
  };
  add(cur, 0);
  for (std::size_t i = 0; i < t.size() && !cur.empty();) {
    const auto n = t[i] & 0x80 ? utf8_at(t, i).first : 1;
    const std::string_view ch = t.substr(i, n);
    i += n;
    const bool wild = wildcard_may_match(ch, s.command);
    stamp++;
    next.clear();
    for (auto p : cur) {
      if (p == m) continue;
      const auto& k = toks[p];
      if (k.kind == Tok::star) {
        if (wild) add(next, p);
      } else if (k.kind == Tok::one ? wild : k.text == ch) {
        add(next, p + 1);
      }
    }
    std::swap(cur, next);
  }
  return std::find(cur.begin(), cur.end(), m) != cur.end();
}

Decision decide(const Policy& session, const Policy& global, const std::string& tool, const Summary& s) {
  const bool multi_line = s.text.find('\n') != std::string::npos;
  const std::pair<const Policy*, const char*> order[] = {{&session, "session"}, {&global, "global"}};
  for (const auto& [p, where] : order) {
    for (const auto& r : p->rules) {
      if (r.tool != "*" && r.tool != tool) continue;
      if (r.allow && multi_line) continue;
      if (!glob_match(r.glob, s)) continue;
      return {r.allow ? Verdict::allow : Verdict::deny,
              std::string(where) + " policy line " + std::to_string(r.line) + ": " + rule_text(r)};
    }
  }
  if (session.mode) return {*session.mode, "session policy mode"};
  if (global.mode) return {*global.mode, "global policy mode"};
  return {Verdict::ask, "default mode"};
}

p9::Result<std::string> allow_rule(const std::string& tool, const Summary& s) {
  if (s.text.find('\n') != std::string::npos) return p9::error("multi-line command");
  if (s.text.empty()) return p9::error("empty command");
  std::string g;
  for (std::size_t i = 0; i < s.text.size(); i++) {
    const char c = s.text[i];
    const bool edge_blank = blank(c) && (i == 0 || i + 1 == s.text.size());  // else trimmed away
    if (c == '*' || c == '?' || c == '\\' || edge_blank) g += '\\';
    g += c;
  }
  std::string rule = "allow " + tool + " " + g;
  if (rule.size() > max_line) return p9::error("command too long for a rule");
  return rule;
}

namespace {

// A code point a terminal would obey or not show (and a byte that is not UTF-8, -1): C0 and C1
// controls, DEL, bidirectional marks, overrides and isolates, line and paragraph separators.
bool hidden(std::int32_t cp) {
  return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string escape(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  const auto byte = [&](unsigned char b) {
    out += "\\x";
    out += hex[b >> 4];
    out += hex[b & 15];
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto [n, cp] = utf8_at(s, i);
    const char c = s[i];
    if (c == '\\') out += "\\\\";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\n') out += "\\n";
    else if (hidden(cp)) {
      for (std::size_t k = 0; k < n; k++) byte(static_cast<unsigned char>(s[i + k]));
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string shown(std::string_view s) {
  if (s.size() <= 64) return escape(s);
  std::size_t cut = 64;  // at a character's start: a cut one is not shown as bytes
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) cut--;
  return escape(s.substr(0, cut)) + "…";
}

std::string visible_json(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto [n, cp] = utf8_at(s, i);
    if (hidden(cp)) {
      const auto u = static_cast<unsigned>(cp < 0 ? 0xfffd : cp);
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += hex[(u >> shift) & 15];
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace ollie::bypass
