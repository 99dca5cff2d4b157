#pragma once
/// From toolsrv's proc/new reply to the tool result the model reads (spec §8.3.4): UTF-8
/// replacement, content-block envelopes, stderr, the error prefixes and the 8192-byte cut.

#include <map>
#include <string>
#include <string_view>

#include "lib9p/result.hpp"

namespace ollie {

/// A proc/new reply (§6.5.2).
struct ProcReply {
  std::map<std::string, std::string> header;  ///< pid status exit signal stdout stderr override sandbox
  std::string out, err;
};

/// Parses a reply: header lines, an empty line, stdout then stderr by their byte counts.
p9::Result<ProcReply> parse_proc_reply(std::string_view text);

/// `text` with every occurrence of the agent's secret replaced by `[redacted]`: a tool that
/// prints its environment (`env`) shows it OLLIE_AUTH, and its output becomes blocks that other
/// agents may read (§1.5: the secret is never persisted nor served).
std::string redacted(std::string text, std::string_view secret);

/// The result of §8.3.4 for a reply; `timeout` is the call's timeout in seconds (for the
/// `execution timeout after <n> seconds` prefix). `error` is set for every failed call.
struct Converted {
  std::string text;
  bool error = false;
};
Converted convert_reply(const ProcReply& r, int timeout);

/// What a terminal shows of a `!command` (§3.4's `exec` block): stdout, then stderr, then for a
/// command that did not exit 0 a last line, `exit <n>` (or `killed by signal <n>`, `execution
/// timeout after <n> seconds`, `bypass denied`, toolsrv's reason it could not start); a text
/// over 64 KiB keeps its head and tail as cut_result does.
std::string exec_text(const ProcReply& r, int timeout);

/// A result longer than `max` bytes (8192 for the model, §8.3.4): its first and last `max / 2`
/// bytes (cuts moved inward to UTF-8 character boundaries) with `\n[… <n> bytes omitted …]\n`
/// between them.
std::string cut_result(std::string text, std::size_t max = 8192);

}  // namespace ollie
