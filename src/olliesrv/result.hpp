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

/// A result longer than 8192 bytes: its first 4096 and last 4096 bytes (cuts moved inward to
/// UTF-8 character boundaries) with `\n[… <n> bytes omitted …]\n` between them.
std::string cut_result(std::string text);

}  // namespace ollie
