#pragma once
/// 9P's strings are UTF-8 (intro(5)); so are the JSON texts of the providers and of session.json.
/// Bytes from outside (a walked name, a tool's output cut by a cap, a provider's stream) need
/// not be: this is the one repair every layer uses.

#include <string>
#include <string_view>

namespace p9 {

/// `s` with every ill-formed UTF-8 sequence replaced by U+FFFD, one for each maximal subpart
/// (Unicode §3.9, "U+FFFD Substitution of Maximal Subparts", as browsers and Python decode).
std::string valid_utf8(std::string_view s);

/// True when `s` is well-formed UTF-8 (valid_utf8 would change nothing).
bool is_utf8(std::string_view s);

}  // namespace p9
