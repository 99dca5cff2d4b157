#pragma once
/// The .gitignore rules that matter (gitignore(5)): one file per directory, the deepest file that
/// has a matching rule decides and within a file the last matching rule wins; `!` negation,
/// `dir/` directory-only patterns, anchored patterns (a slash at the start or in the middle),
/// `**`; `#` comments and `\` escapes. Matching is fnmatch(3) per path component (glob.hpp).
/// What is not read: .git/info/exclude, core.excludesFile, .ignore files.

#include <string>
#include <string_view>
#include <vector>

#include "glob.hpp"

namespace filetool {

class Ignores {
 public:
  /// The .gitignore files of the ancestors of `root` (an absolute directory), outermost first,
  /// as ripgrep reads them.
  explicit Ignores(const std::string& root);
  /// Enters directory `abs`: reads its .gitignore (if any). Paired with leave().
  void enter(const std::string& abs);
  void leave() { files_.pop_back(); }
  /// Whether `abs` (below the entered directories) is ignored.
  bool ignored(std::string_view abs, bool is_dir) const;

 private:
  struct Rule {
    Glob glob;
    bool negate, dir_only;
  };
  struct File {
    std::string base;  // its directory, with a trailing slash
    std::vector<Rule> rules;
  };
  std::vector<File> files_;
};

}  // namespace filetool
