#pragma once
/// Plan 9's tokenize, the request grammar of both servers (spec §1.3): blanks separate tokens; a single quote starts a quoted segment
/// ending at the next single quote; '' inside quotes is one quote; adjacent segments join.

#include <string>
#include <string_view>
#include <vector>

#include "lib9p/result.hpp"

namespace virtfs {

/// A blank of the grammar: what separates tokens.
inline bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
/// `s` without the blanks around it.
std::string_view trim(std::string_view s);

/// ctl requests are matched against their verb table in ctl.hpp.
p9::Result<std::vector<std::string>> tokenize(std::string_view s);

}  // namespace virtfs
