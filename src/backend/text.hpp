#pragma once
/// Small text helpers used across the backend library.

#include <string>
#include <string_view>

namespace ollie::backend {

/// ASCII lower case.
std::string lower(std::string_view s);
/// `s` without leading and trailing blanks (space, tab, CR, LF).
std::string_view trim(std::string_view s);
/// True when `s` starts with `prefix`, ignoring ASCII case.
bool istarts_with(std::string_view s, std::string_view prefix);

}  // namespace ollie::backend
