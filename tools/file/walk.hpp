#pragma once
/// The tree walk of file_glob and file_grep: every non-directory below a directory, never
/// following symbolic links, always skipping `.git`, and skipping what .gitignore ignores.
/// Directories that cannot be read are skipped.

#include <dirent.h>

#include <functional>
#include <string>

namespace filetool {

struct Entry {
  const std::string& abs;
  std::string_view rel;  // relative to the root of the walk
  unsigned char type;    // DT_REG, DT_LNK, ...
};

/// `descend(rel)` says whether to enter a directory (after the ignore rules allowed it);
/// `visit` sees every file that is not ignored.
void walk(const std::string& root, const std::function<bool(std::string_view rel)>& descend,
          const std::function<void(const Entry&)>& visit);

}  // namespace filetool
