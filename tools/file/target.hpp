#pragma once
/// Where file_write and file_edit write: the path as given, a symbolic link followed to its
/// target (so the link stays a link and the file it names changes; the sandbox checks the
/// target), missing parents reported or created.

#include <sys/stat.h>

#include <optional>
#include <string>

namespace filetool {

struct Target {
  std::string abs;               // the file to replace (symlinks resolved when it exists)
  std::optional<struct stat> st;  // its stat, when it exists
};

/// Refuses a directory and anything that is not a regular file.
Target resolve_target(const std::string& abs);

/// mkdir -p of the directory of `abs` (0777 minus umask).
void make_parents(const std::string& abs);

/// The mode a new file gets: 0666 minus the umask (0644 under the usual 022).
mode_t new_file_mode();

}  // namespace filetool
