#pragma once
/// toolsrv's shared secret (spec §6.1): read once from an inherited descriptor before the socket
/// exists, then compared in constant time at every attach.

#include <chrono>
#include <string>

#include "lib9p/result.hpp"

namespace toolsrv {

/// Reads `fd` to EOF (waiting at most `limit`) and closes it. The content must be 64 hex
/// digits and a newline. Error: `no secret on fd <fd>`.
p9::Result<std::string> read_secret(int fd, std::chrono::milliseconds limit);

/// The attach check: `authentication required` without an afid, `empty secret` when nothing
/// was written to it, `authentication failed` for any other bytes than `secret` (a trailing
/// newline of the presented bytes is ignored). Constant time in the presented bytes.
p9::Status check_secret(const std::string& secret, bool has_afid, const std::string& presented);

}  // namespace toolsrv
