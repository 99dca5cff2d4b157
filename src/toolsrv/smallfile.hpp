#pragma once
/// A configuration file the model may have replaced (sandbox.yaml, a `.meta`, a project's
/// `.ollie-sandbox.yaml`), read the one way: opened without waiting (a FIFO in its place is refused,
/// never waited on), a regular file (checked on the descriptor), at most `max` bytes (one byte past
/// is read, so a file grown since the fstat is refused too). Each caller words its own errors.

#include <fcntl.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace toolsrv {

struct SmallFile {
  enum class Fail { none, open, not_regular, too_large, read };
  Fail fail = Fail::none;
  int error = 0;           ///< errno of an open or read failure
  std::uint64_t size = 0;  ///< too_large: the size fstat gave, 0 when it grew past `max` while read
  std::string text;
};

/// `path` (relative to `dir_fd`, AT_FDCWD for none), opened with O_RDONLY | O_NONBLOCK | O_CLOEXEC
/// and `flags`.
SmallFile read_small_file(int dir_fd, const char* path, int flags, std::size_t max);

}  // namespace toolsrv
