#pragma once
/// The session's `env` and `goal` files (spec §2.5).

#include <cstddef>
#include <optional>
#include <string>

#include "lib9p/result.hpp"

namespace ollie {

class Session;

/// Most variables a session's `env` holds; a write past it is refused whole.
inline constexpr std::size_t MAX_ENV_VARS = 1024;
/// Longest value of one variable (toolsrv takes a value as the rest of one ctl line).
inline constexpr std::size_t MAX_ENV_VALUE = 65536;
/// Longest goal (it is saved in session.json at every persistence moment).
inline constexpr std::size_t MAX_GOAL = 1 << 20;

/// toolsrv's `env` rule (§6.3): `[A-Za-z_][A-Za-z0-9_]*`, at most 256 bytes.
bool valid_env_name(const std::string& k);

/// Why `key=value` cannot be a session variable (the errors of an `env` write, below), if so;
/// a restored session.json drops such entries.
std::optional<std::string> env_entry_error(const std::string& key, const std::string& value);
/// `env` read: `KEY=VALUE` lines sorted by key, OLLIE_SESSION_ID and OLLIE_ADDR included.
std::string read_env(const Session& s);
/// `env` write: `KEY=VALUE` tokens (§1.3), all or nothing; an empty value unsets. Each change
/// is pushed to toolsrv (or reaches it at its next start) and persisted. Errors:
/// `invalid env name: <k>`, `reserved: <k>`, and the request grammar's.
p9::Status write_env(Session& s, const std::string& request);
/// `goal` read: the text exactly as last written.
std::string read_goal(const Session& s);
/// Why `text` cannot be a goal (blanks only → `empty goal`, or too long), if so.
p9::Status check_goal(const std::string& text);
/// `goal` write: `text` checked, then stored exactly (the caller persists it).
p9::Status write_goal(Session& s, std::string text);

}  // namespace ollie
