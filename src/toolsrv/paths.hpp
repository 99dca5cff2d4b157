#pragma once
/// Path helpers shared by the sandbox, the path locks and tool discovery.

#include <sys/stat.h>

#include <optional>
#include <string>
#include <string_view>

#include "toolsrv/fd.hpp"

namespace toolsrv {

/// Lexically cleaned path, as Plan 9's cleanname: no `.`, no `..` past the root, no double or
/// trailing slash. An empty path cleans to ".".
std::string clean_path(std::string_view path);

/// `path` made absolute against `base` (when relative) and cleaned.
std::string absolute_path(std::string_view path, std::string_view base);

/// `path` (absolute) with symlinks resolved for the longest prefix that exists (an uncleaned
/// `link/..` is the target's parent, as the kernel walks it); the part that does not exist is
/// appended, cleaned.
std::string resolve_existing(std::string_view path);
/// True when `path` exists and no component of it is a symlink (one openat2 walk): a path that
/// passes is its own real path, and nothing on it can lead elsewhere.
bool no_link_on(const std::string& path);
/// `path` opened `O_PATH` (plus `flags`) in one walk of the kernel that follows no link
/// (openat2, RESOLVE_NO_SYMLINKS); none, with errno ELOOP, when a link is on the way.
UniqueFd open_following_no_link(const std::string& path, int flags = 0);
/// resolve_existing, and a dangling symlink on the way followed to where it points (up to 40):
/// where a write through `path` lands (a path lock's key, §6.7). Not for deciding what is
/// writable: the link is the tool's to re-point.
std::string resolve_write_target(std::string_view path);

/// Where the file a descriptor refers to is now (the kernel's name of it, never resolved again);
/// empty when unknown.
std::string fd_path(int fd);

/// True when `path` is `dir` or lies below it (both absolute and cleaned; compared by components).
bool is_within(std::string_view path, std::string_view dir);

/// Where an entry of the `unix` list (absolute, cleaned) is now: its parent directory resolved,
/// the entry itself not followed, so that a symlink a tool plants where entries such as
/// {TMPDIR}/lsp live (the tool can write there) cannot widen the list to `/` or to
/// ~/.ssh/agent.sock. The same whether or not the entry exists.
std::string unix_entry_path(std::string_view allowed);
/// The lstat of an entry at a unix_entry_path; none when it does not exist or is a symlink.
std::optional<struct stat> unix_entry(const std::string& path);

}  // namespace toolsrv

