#pragma once
/// The Stream files of toolsrv as virtfs cursors (spec §6.5.3, §6.9.1): proc out and wait, and
/// bypass/pending. Each waits through the core's Notifier, whose wake-up only notifies the
/// cursor's virtfs::Signal (the waiting coroutine is resumed on its own executor).

#include <memory>

#include "toolsrv/bypass.hpp"
#include "toolsrv/process.hpp"
#include "virtfs/stream.hpp"

namespace toolsrv {

/// `proc/{pid}/out`: stdout and stderr interleaved, from the start; EOF once the process ended
/// and everything was read.
std::shared_ptr<virtfs::Cursor> out_cursor(std::shared_ptr<Process> proc);

/// `proc/{pid}/wait`: nothing until the process ends, then its status lines, then EOF.
std::shared_ptr<virtfs::Cursor> wait_cursor(std::shared_ptr<Process> proc);

/// `bypass/pending`: every unresolved request, then each new line; never ends.
std::shared_ptr<virtfs::Cursor> pending_cursor(BypassBroker& broker);

}  // namespace toolsrv
