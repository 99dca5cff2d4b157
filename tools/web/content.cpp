#include "content.hpp"

#include <iconv.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

namespace web {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim_quotes(std::string_view s) {  // blanks and quotes
  const auto b = s.find_first_not_of(" \t\r\n\"'");
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(" \t\r\n\"'") - b + 1));
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// The value after `charset=` in `s` (already lower case), up to a delimiter.
std::string charset_after(const std::string& s) {
  std::size_t i = std::string::npos;
  for (auto at = s.find("charset"); at != std::string::npos && i == std::string::npos; at = s.find("charset", at + 7)) {
    std::size_t k = at + 7;
    while (k < s.size() && s[k] == ' ') k++;  // `charset = x` is allowed too
    if (k < s.size() && s[k] == '=') i = k + 1;
  }
  if (i == std::string::npos) return "";
  while (i < s.size() && (s[i] == '"' || s[i] == '\'' || s[i] == ' ')) i++;
  std::string out;
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '-' || s[i] == '_' || s[i] == '.' || s[i] == ':'))
    out += s[i++];
  return out;
}

/// The charset a `<meta>` of `low` (the page's start, lower case) declares, as HTML's prescan
/// reads it: its `charset` attribute, or the `content` of one with `http-equiv=content-type`;
/// other attributes (a description that mentions `charset=`) say nothing. A UTF-16 one is read as
/// UTF-8: the bytes that spell the tag are not UTF-16.
std::string meta_charset(std::string_view low) {
  for (auto i = low.find("<meta"); i != std::string_view::npos; i = low.find("<meta", i + 5)) {
    // One inside a comment is no declaration (an old one left commented out).
    if (const auto open = low.rfind("<!--", i); open != std::string_view::npos) {
      const auto close = low.find("-->", open + 4);
      if (close == std::string_view::npos) break;
      if (close > i) {
        i = close;
        continue;
      }
    }
    const auto end = low.find('>', i);
    if (end == std::string_view::npos) break;
    std::string charset, content;
    bool content_type = false;
    for (std::size_t k = i + 5; k < end;) {
      while (k < end && (std::isspace(static_cast<unsigned char>(low[k])) || low[k] == '/')) k++;
      const auto name_at = k;
      while (k < end && low[k] != '=' && !std::isspace(static_cast<unsigned char>(low[k])) && low[k] != '/') k++;
      const auto name = low.substr(name_at, k - name_at);
      std::string value;
      if (k < end && low[k] == '=') {
        k++;
        if (k < end && (low[k] == '"' || low[k] == '\'')) {
          const char q = low[k++];
          const auto close = low.find(q, k);
          const auto stop = close == std::string_view::npos || close > end ? end : close;
          value = low.substr(k, stop - k);
          k = stop + 1;
        } else {
          const auto from = k;
          while (k < end && !std::isspace(static_cast<unsigned char>(low[k]))) k++;
          value = low.substr(from, k - from);
        }
      } else if (name.empty()) {
        k++;
      }
      if (name == "charset") charset = value;
      else if (name == "content") content = value;
      else if (name == "http-equiv") content_type = value == "content-type";
    }
    std::string cs = !charset.empty() ? charset_after("charset=" + charset) : content_type ? charset_after(content) : "";
    if (cs.rfind("utf-16", 0) == 0) cs = "utf-8";
    if (!cs.empty()) return cs;
  }
  return "";
}

/// A byte of the server's text as a result shows it: a control byte as `?`, never passed on.
char shown(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c; }

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; k++)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

std::string media_type(const std::string& content_type) {
  std::string type = lower(trim_quotes(std::string_view(content_type).substr(0, content_type.find(';'))));
  for (char& c : type) c = shown(c);  // the server's text, shown in the result
  return type;
}

Kind classify(const std::string& type, std::string_view body) {
  if (type == "text/html" || type == "application/xhtml+xml") return Kind::html;
  if (type.rfind("text/", 0) == 0 || ends_with(type, "+json") || ends_with(type, "+xml") || ends_with(type, "/json") ||
      ends_with(type, "/xml") || ends_with(type, "/javascript") || ends_with(type, "/ecmascript") ||
      ends_with(type, "/x-javascript") || ends_with(type, "/yaml") || ends_with(type, "/x-yaml") ||
      ends_with(type, "/toml") || ends_with(type, "/x-sh") || ends_with(type, "/sql") || ends_with(type, "/x-ndjson") ||
      ends_with(type, "/graphql") || ends_with(type, "/x-www-form-urlencoded"))
    return Kind::text;
  if (!type.empty()) return Kind::binary;
  const std::string_view head = body.substr(0, 4096);
  if (head.find('\0') != std::string_view::npos) return Kind::binary;
  if (body.starts_with(utf8_bom)) body.remove_prefix(utf8_bom.size());
  const std::string start = lower(trim_quotes(body.substr(0, 256)));
  if (start.rfind("<!doctype html", 0) == 0 || start.rfind("<html", 0) == 0) return Kind::html;
  return Kind::text;
}

std::string charset(const std::string& content_type, std::string_view body, Kind kind, bool cut) {
  // A byte order mark says so first, before the header (as browsers read it).
  std::string cs = body.starts_with(utf8_bom) ? "utf-8" : charset_after(lower(content_type));
  if (cs.empty() && kind == Kind::html) cs = meta_charset(lower(body.substr(0, 2048)));
  // A body cut at the size limit may end inside a character: its last one is not checked, that
  // is no sign of another encoding.
  const std::string_view checked = cut && !body.empty() ? utf8_prefix(body, body.size() - 1) : body;
  // Undeclared and not UTF-8: the web's usual legacy encoding (what browsers assume too).
  if (cs.empty() && !valid_utf8(checked)) cs = "windows-1252";
  return cs;
}

std::string to_utf8(std::string body, const std::string& cs) {
  if (cs.empty() || cs == "utf-8" || cs == "utf8" || cs == "us-ascii" || cs == "ascii") return body;
  iconv_t cd = ::iconv_open("UTF-8", cs.c_str());
  if (cd == reinterpret_cast<iconv_t>(-1)) return body;
  std::string out;
  out.reserve(body.size() + body.size() / 2);
  char* in = body.data();
  std::size_t in_left = body.size();
  char buf[16384];
  while (in_left > 0) {
    char* o = buf;
    std::size_t o_left = sizeof buf;
    const std::size_t rc = ::iconv(cd, &in, &in_left, &o, &o_left);
    out.append(buf, static_cast<std::size_t>(o - buf));
    if (rc != static_cast<std::size_t>(-1)) continue;
    if (errno == E2BIG) continue;
    // An invalid or truncated sequence: one byte becomes U+FFFD.
    out += "\xEF\xBF\xBD";
    in++;
    in_left--;
  }
  ::iconv_close(cd);
  return out;
}

std::string_view utf8_prefix(std::string_view s, std::size_t max) {
  if (s.size() <= max) return s;
  std::size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) n--;
  return s.substr(0, n);
}

}  // namespace web

namespace web {

std::string one_line(std::string_view s, std::size_t max) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += shown(c);  // an ESC in a server's reason phrase
  }
  if (out.size() > max) out = std::string(utf8_prefix(out, max)) + "…";
  return out;
}

}  // namespace web
