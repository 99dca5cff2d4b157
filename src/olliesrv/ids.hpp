#pragma once
/// Identifiers and secrets (spec §1.2, §1.5, §2.8.8): UUIDv4 ids from libuuid, names, block ids
/// and agent/toolsrv secrets from libcrypto.

#include <string>
#include <string_view>

#include "lib9p/result.hpp"
#include "lib9p/utf8.hpp"

namespace ollie {

/// A fresh UUIDv4, lowercase canonical form.
std::string new_uuid();
/// True for the canonical form of a UUID (any version), either case.
bool looks_like_uuid(std::string_view s);
/// §1.2: `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`, not `new` or `idx`, not a UUID.
bool valid_name(std::string_view name);
/// The refusal of a name valid_name refuses, `invalid name: <n>`, the name whole: the Rerror
/// escapes a newline in it and cuts the text at 127 bytes (p9::err::cut).
std::string invalid_name(std::string_view name);
/// What a cwd may not hold (§4.1: no TAB or newline; a NUL would end the path the kernel checks
/// before the one olliesrv shows and stores).
inline constexpr std::string_view bad_path_chars{"\t\n\0", 3};
/// A cwd that is refused as `cwd: invalid character`: one of bad_path_chars, or bytes that are
/// not UTF-8 (§1.2), which session.json cannot keep: the cwd restored would be another path.
inline bool bad_path(std::string_view p) { return p.find_first_of(bad_path_chars) != std::string_view::npos || !p9::is_utf8(p); }
/// The directory toolsrv resolved (`resolve`) for the cwd `given`: none ("") is `cwd: <given>: not
/// a directory`; a clean name of one whose own name a cwd may not have, `cwd: invalid character`.
inline p9::Status resolved_dir(const std::string& real, const std::string& given) {
  if (real.empty()) return p9::error("cwd: " + given + ": not a directory");
  if (bad_path(real)) return p9::error("cwd: invalid character");
  return {};
}
/// The default name of an object: the first 8 hex digits of its id.
inline std::string default_name(std::string_view id) { return std::string(id.substr(0, 8)); }
/// 32 random bytes from libcrypto, hex-encoded (64 digits).
std::string new_secret();
/// §2.8.8: the first 4 bytes of sha256(session id + agent id + decimal counter), 8 hex digits.
std::string block_id(std::string_view session_id, std::string_view agent_id, unsigned long long counter);
/// Constant-time comparison of two secrets.
bool same_secret(std::string_view a, std::string_view b);

}  // namespace ollie
