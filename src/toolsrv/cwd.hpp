#pragma once
/// A cwd (spec §6.3, §6.6) resolved once, when it is set, and held open as an O_PATH descriptor.
/// The Landlock rule of {CWD} is built from the descriptor and the tool fchdirs to it, so a
/// directory that a tool replaces by a symlink after the check cannot retarget a later call.

#include <sys/types.h>

#include <memory>
#include <string>

#include "lib9p/result.hpp"
#include "toolsrv/fd.hpp"

namespace toolsrv {

struct HeldCwd {
  std::string path;      ///< as set, cleaned: what info shows and approvals and bypass lines name
  std::string resolved;  ///< the directory it resolved to when it was set
  std::shared_ptr<const UniqueFd> fd;  ///< O_PATH|O_DIRECTORY on that directory
  dev_t dev = 0;
  ino_t ino = 0;

  /// Resolves and opens `dir`. Errors: `cwd must be absolute: <d>`, `cwd: <d>: not a directory`,
  /// `cwd: <d>: changed while being set`.
  static p9::Result<HeldCwd> open(const std::string& dir);

  /// At each call: the held directory is still at `resolved`, and `path` still resolves to it.
  /// Error: `cwd changed since it was set: <path>`.
  p9::Result<void> check() const;
};

}  // namespace toolsrv
