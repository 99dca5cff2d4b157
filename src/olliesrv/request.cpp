#include "olliesrv/request.hpp"

#include <algorithm>

#include "virtfs/tokenize.hpp"

namespace ollie {

namespace {

using virtfs::blank;  // the grammar's blanks (§1.3)

/// The end of the token that starts at `i` (Plan 9 tokenize's rule: a blank outside quotes ends
/// it); nullopt for an unterminated quote.
std::optional<std::size_t> token_end(std::string_view s, std::size_t i) {
  bool quoted = false;
  for (; i < s.size(); i++) {
    if (s[i] == '\'') quoted = !quoted;  // '' inside quotes closes and reopens: same effect
    else if (!quoted && blank(s[i])) break;
  }
  if (quoted) return std::nullopt;
  return i;
}

}  // namespace

p9::Result<KeyValues> parse_request(std::string_view text, std::initializer_list<std::string_view> keys,
                                    bool prompt_key) {
  static constexpr std::string_view kPrompt = "prompt=";
  KeyValues kv;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && blank(text[i])) i++;
    if (i == text.size()) break;
    if (prompt_key && text.substr(i, kPrompt.size()) == kPrompt) {
      if (kv.prompt) return p9::error("duplicate key: prompt");
      std::string_view rest = text.substr(i + kPrompt.size());
      if (!rest.empty() && rest.back() == '\n') rest.remove_suffix(1);
      kv.prompt = std::string(rest);
      break;
    }
    auto end = token_end(text, i);
    if (!end) return p9::error("unterminated quote");
    auto toks = virtfs::tokenize(text.substr(i, *end - i));
    if (!toks) return toks.error();
    i = *end;
    for (auto& tok : *toks) {  // exactly one, by construction
      const auto eq = tok.find('=');
      if (eq == std::string::npos) return p9::error("bad token: " + tok);
      std::string key = tok.substr(0, eq);
      if (prompt_key && key == "prompt") {  // quoted: its value alone, not the raw remainder
        if (kv.prompt) return p9::error("duplicate key: prompt");
        kv.prompt = tok.substr(eq + 1);
        continue;
      }
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) return p9::error("unknown key: " + key);
      if (kv.has(key)) return p9::error("duplicate key: " + key);
      kv.values.emplace(std::move(key), tok.substr(eq + 1));
    }
  }
  return kv;
}

}  // namespace ollie
