#pragma once
/// Path helpers shared by the sandbox, the path locks and tool discovery.

#include <string>
#include <string_view>

namespace toolsrv {

/// Lexically cleaned path, as Plan 9's cleanname: no `.`, no `..` past the root, no double or
/// trailing slash. An empty path cleans to ".".
std::string clean_path(std::string_view path);

/// `path` made absolute against `base` (when relative) and cleaned.
std::string absolute_path(std::string_view path, std::string_view base);

/// `path` (absolute, cleaned) with symlinks resolved for the longest prefix that exists; the part
/// that does not exist is appended unchanged.
std::string resolve_existing(std::string_view path);

/// True when `path` is `dir` or lies below it (both absolute and cleaned; compared by components).
bool is_within(std::string_view path, std::string_view dir);

}  // namespace toolsrv

