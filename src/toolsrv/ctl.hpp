#pragma once
/// The text side of toolsrv's control files (spec §6.3, §6.4, §6.5.4): the mapping of each
/// request line, tokenized as spec §1.3 says, onto a typed Session or ProcessTable method; the
/// ctl files through verb tables (virtfs/ctl.hpp), so each line is parsed once.

#include <string>
#include <string_view>
#include <vector>

#include "lib9p/result.hpp"
#include "toolsrv/session.hpp"

namespace toolsrv {

/// The root `ctl` file: one command per line, in order; the first error stops and is returned.
p9::Status run_ctl(Session& session, std::string_view text);

/// The `info` file: "" (session scope), `<agent>`, or `stat <agent> <path>...`.
p9::Result<std::string> answer_info(Session& session, std::string_view request);

/// The `tools` file: `*` or `<agent>`.
p9::Result<std::string> answer_tools(Session& session, std::string_view request);

/// A `proc/{pid}/ctl` file: `term`, `kill`, `signal <N>`, `dismiss`, one per line.
p9::Status run_proc_ctl(ProcessTable& procs, int pid, std::string_view text);

}  // namespace toolsrv
