#pragma once
/// The dangerous-pattern table of the shell tool (spec OP-35): defence in depth, chiefly for
/// calls that run outside the sandbox with `bypass`; the sandbox stays the security boundary.
/// Patterns match commands as bash would see them (parse.hpp), not raw text, so `echo mkfs` or
/// `grep sudo notes` pass while `sudo make install` and `bash -c 'sudo …'` do not.

#include <optional>
#include <string>
#include <string_view>

namespace shell {

/// The pattern `command` matches and what matched it, e.g.
/// `recursive delete of / or a system directory (rm -rf /)`; nothing when it may run.
/// `home` is $HOME; relative paths are taken against the working directory.
std::optional<std::string> refusal(std::string_view command, const std::string& home);

}  // namespace shell
