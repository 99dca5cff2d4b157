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
/// `s` as valid UTF-8 of at most `max` bytes: longer text is cut on a character boundary and
/// ends in "...".
std::string clip(std::string_view s, std::size_t max);
/// A byte count for messages: "8 MiB", "2 KiB", "100 bytes".
std::string byte_size(std::size_t n);
/// `s` as one field of a line-per-item table: every control character (a TAB, a newline) a blank.
std::string one_line(std::string s);

}  // namespace ollie::backend
