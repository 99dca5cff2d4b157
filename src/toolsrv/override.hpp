#pragma once
/// The project sandbox override `.ollie-sandbox.yaml` (spec §7.3.3) and its approvals.

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lib9p/result.hpp"

namespace toolsrv {

using p9::Result;

/// Lowercase hex sha256 of `bytes` (OpenSSL EVP).
std::string sha256_hex(std::string_view bytes);

/// The approved (sha256, directory) pairs, as pushed by `ctl sandboxok`.
class Approvals {
 public:
  /// Validates every pair first; on error the set is unchanged. Errors: `invalid hash: <x>`,
  /// `dir must be absolute: <d>`.
  Result<void> replace(const std::vector<std::pair<std::string, std::string>>& pairs);

  /// True when this hash is approved in this (cleaned) directory.
  bool approved(std::string_view sha256, std::string_view dir) const;

 private:
  std::set<std::pair<std::string, std::string>> pairs_;
};

/// An override file found in a call's cwd: the exact bytes read, and their hash.
struct ProjectOverride {
  std::string path;
  std::string dir;  ///< the cleaned directory it was found in
  std::string bytes;
  std::string sha256;
};

/// The largest override read (§7.3.3): a bigger file is refused before a byte of it is read.
inline constexpr std::size_t override_max_bytes = 64u << 10;

/// Looks for `.ollie-sandbox.yaml` in the directory `dir_fd` (the held cwd `cwd`), opened without
/// following symlinks. Nothing there → nullopt; a symlink, a non-regular file or one over the
/// limit is ignored with a note in `note` (`<path>: ignored: too large: <n> bytes (limit 65536)`).
std::optional<ProjectOverride> find_override(int dir_fd, const std::string& cwd, std::string* note);

}  // namespace toolsrv
