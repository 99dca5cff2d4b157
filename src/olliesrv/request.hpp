#pragma once
/// key=value requests (spec §1.3): session/new, agent/new, cfg writes.

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "lib9p/result.hpp"

namespace ollie {

struct KeyValues {
  std::map<std::string, std::string> values;  ///< key → value ("" = given empty: unset)
  std::optional<std::string> prompt;          ///< agent/new's raw `prompt=` remainder
  bool has(const std::string& k) const { return values.count(k) > 0; }
  std::string get(const std::string& k) const {
    auto it = values.find(k);
    return it == values.end() ? std::string() : it->second;
  }
};

/// Tokenizes as Plan 9's tokenize (quotes), each token `key=value` split at the first `=`:
/// `bad token: <t>`, `unknown key: <k>`, `duplicate key: <k>`, `unterminated quote`. With
/// `prompt_key`, a token starting `prompt=` outside quotes takes the raw rest of the request
/// (newlines and quotes kept, one trailing newline removed).
p9::Result<KeyValues> parse_request(std::string_view text, std::initializer_list<std::string_view> keys,
                                    bool prompt_key = false);

}  // namespace ollie
