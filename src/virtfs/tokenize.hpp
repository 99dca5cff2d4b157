#pragma once
/// Plan 9's tokenize, the request grammar of both servers (spec §1.3): blanks separate tokens; a single quote starts a quoted segment
/// ending at the next single quote; '' inside quotes is one quote; adjacent segments join.

#include <string>
#include <string_view>
#include <vector>

#include "lib9p/result.hpp"

namespace virtfs {

p9::Result<std::vector<std::string>> tokenize(std::string_view s);

/// A ctl request: the verb and its tokenized arguments, blanks around the request trimmed.
/// A request with a second line is refused (`one command per request`).
struct Command {
  std::string verb;
  std::vector<std::string> args;
};
p9::Result<Command> parse_command(std::string_view request);

}  // namespace virtfs
