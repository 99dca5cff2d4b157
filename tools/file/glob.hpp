#pragma once
/// Globs over paths: `*`, `?` and `[...]` within one component (fnmatch(3)), `**` as a whole
/// component for any number of components, and `{a,b}` alternatives (file_glob and file_grep's
/// `glob`; .gitignore patterns have no braces).

#include <string>
#include <string_view>
#include <vector>

namespace filetool {

class Glob {
 public:
  explicit Glob(std::string_view pattern, bool braces = true);
  /// `rel`: components joined by '/', no leading slash.
  bool match(std::string_view rel) const;
  /// Whether some path below the directory `rel` ("" = the root) could match.
  bool may_match_under(std::string_view rel) const;

 private:
  std::vector<std::vector<std::string>> alternatives_;
};

/// `s` split at '/', empty components dropped.
std::vector<std::string_view> components(std::string_view s);

}  // namespace filetool
