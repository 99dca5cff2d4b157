#include "glob.hpp"

#include <fnmatch.h>

#include <algorithm>

#include "tool.hpp"

namespace filetool {

namespace {

constexpr std::size_t max_alternatives = 256;

// `{a,b}` expanded, leftmost group first; an unbalanced brace is literal.
void expand(const std::string& p, std::vector<std::string>& out) {
  std::size_t open = std::string::npos;
  int depth = 0;
  std::vector<std::size_t> commas;
  for (std::size_t i = 0; i < p.size(); i++) {
    const char c = p[i];
    if (c == '\\') { i++; continue; }
    if (c == '{') {
      if (depth++ == 0) open = i, commas.clear();
    } else if (c == ',' && depth == 1) {
      commas.push_back(i);
    } else if (c == '}' && depth > 0 && --depth == 0) {
      if (commas.empty()) continue;  // {x} is literal
      const std::string head = p.substr(0, open), tail = p.substr(i + 1);
      std::size_t from = open + 1;
      commas.push_back(i);
      for (const auto to : commas) {
        expand(head + p.substr(from, to - from) + tail, out);
        from = to + 1;
      }
      return;
    }
  }
  if (out.size() == max_alternatives)
    throw tool::Error("invalid pattern: its {…} groups make more than " + std::to_string(max_alternatives) +
                      " alternatives; use fewer or a wider pattern");
  out.push_back(p);
}

/// Whether `path` matches `pat` (prefix: whether some path below it could). The pattern positions
/// reachable after each component are kept as a set, so `**/d/**/d/**/q` over a deep path costs
/// components × pattern components, never a backtracking search.
bool matches(const std::vector<std::string>& pat, const std::vector<std::string_view>& path, bool prefix) {
  std::vector<char> at(pat.size() + 1, 0), next(pat.size() + 1);
  // `**` also matches no component: the position after it is reachable too.
  const auto close = [&](std::vector<char>& s) {
    for (std::size_t pi = 0; pi < pat.size(); pi++)
      if (s[pi] && pat[pi] == "**") s[pi + 1] = 1;
  };
  at[0] = 1;
  close(at);
  for (const auto component : path) {
    bool any = false;
    std::fill(next.begin(), next.end(), 0);
    const std::string seg(component);
    for (std::size_t pi = 0; pi < pat.size(); pi++) {
      if (!at[pi]) continue;
      if (pat[pi] == "**") {
        if (prefix) return true;  // anything below can match
        next[pi] = any = 1;
      } else if (::fnmatch(pat[pi].c_str(), seg.c_str(), 0) == 0) {
        next[pi + 1] = any = 1;
      }
    }
    if (!any) return false;
    close(next);
    at.swap(next);
  }
  if (!prefix) return at[pat.size()] != 0;
  for (std::size_t pi = 0; pi < pat.size(); pi++)
    if (at[pi]) return true;
  return false;
}

}  // namespace

std::vector<std::string_view> components(std::string_view s) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    const auto slash = s.find('/');
    if (slash != 0) out.push_back(s.substr(0, slash));
    if (slash == std::string_view::npos) break;
    s.remove_prefix(slash + 1);
  }
  return out;
}

Glob::Glob(std::string_view pattern, bool braces) {
  std::vector<std::string> texts;
  if (braces) expand(std::string(pattern), texts);
  else texts.emplace_back(pattern);
  for (const auto& t : texts) {
    std::vector<std::string> parts;
    for (auto c : components(t)) {
      if (c == "**" && !parts.empty() && parts.back() == "**") continue;
      parts.emplace_back(c);
    }
    alternatives_.push_back(std::move(parts));
  }
}

bool Glob::match(std::string_view rel) const {
  const auto path = components(rel);
  for (const auto& a : alternatives_)
    if (matches(a, path, false)) return true;
  return false;
}

bool Glob::may_match_under(std::string_view rel) const {
  const auto path = components(rel);
  for (const auto& a : alternatives_)
    if (matches(a, path, true)) return true;
  return false;
}

}  // namespace filetool
