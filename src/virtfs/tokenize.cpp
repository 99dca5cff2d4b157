#include "virtfs/tokenize.hpp"

namespace virtfs {

std::string_view trim(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

p9::Result<std::vector<std::string>> tokenize(std::string_view s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && blank(s[i])) i++;
    if (i == s.size()) break;
    std::string tok;
    while (i < s.size() && !blank(s[i])) {
      if (s[i] != '\'') {
        tok += s[i++];
        continue;
      }
      i++;  // opening quote
      for (;;) {
        if (i == s.size()) return p9::error("unterminated quote");
        if (s[i] == '\'') {
          if (i + 1 < s.size() && s[i + 1] == '\'') {
            tok += '\'';
            i += 2;
            continue;
          }
          i++;
          break;
        }
        tok += s[i++];
      }
    }
    out.push_back(std::move(tok));
  }
  return out;
}

}  // namespace virtfs
