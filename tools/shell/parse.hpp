#pragma once
/// A bash command line cut into simple commands, as far as the safety check needs it
/// (checks.hpp): words with their quotes removed, the targets of output redirections, which
/// command feeds which through a pipe, and the commands inside `$(…)`, backquotes and `<(…)`.
/// It runs nothing and expands nothing: `$HOME` stays the text `$HOME`. Here-document bodies
/// and comments are skipped, so a script written with `cat > f <<EOF` is not taken for
/// commands.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace shell {

struct Command {
  /// The words, quotes removed; assignments before the command name (`X=1 cmd`) and
  /// redirections are not words.
  std::vector<std::string> words;
  /// Targets of `>`, `>>`, `>|`, `&>`, `<>`, with or without a descriptor number.
  std::vector<std::string> writes;
  /// The command before this one in its pipeline (an index into the list), or -1.
  long pipe_from = -1;
  /// Indexes of the commands inside the substitutions of this command's words.
  std::vector<std::size_t> inner;
};

/// Every simple command of `text`, substitutions included (nested ones up to a fixed depth;
/// deeper text stays literal).
std::vector<Command> parse(std::string_view text);

}  // namespace shell
