#include "glob.hpp"

#include <fnmatch.h>

namespace filetool {

namespace {

constexpr std::size_t max_alternatives = 256;

// `{a,b}` expanded, leftmost group first; an unbalanced brace is literal.
void expand(const std::string& p, std::vector<std::string>& out) {
  if (out.size() >= max_alternatives) return;
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
  out.push_back(p);
}

bool match_from(const std::vector<std::string>& pat, std::size_t pi, const std::vector<std::string_view>& path,
                std::size_t si, bool prefix) {
  while (pi < pat.size()) {
    if (pat[pi] == "**") {
      if (prefix) return true;
      for (std::size_t k = si; k <= path.size(); k++)
        if (match_from(pat, pi + 1, path, k, prefix)) return true;
      return false;
    }
    if (si == path.size()) return prefix;
    const std::string seg(path[si]);
    if (::fnmatch(pat[pi].c_str(), seg.c_str(), 0) != 0) return false;
    pi++, si++;
  }
  return !prefix && si == path.size();
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
    if (match_from(a, 0, path, 0, false)) return true;
  return false;
}

bool Glob::may_match_under(std::string_view rel) const {
  const auto path = components(rel);
  for (const auto& a : alternatives_)
    if (match_from(a, 0, path, 0, true)) return true;
  return false;
}

}  // namespace filetool
