#pragma once
/// Background processes (spec §6.8 `background`, §6.10, §2.7 `proc/`): a call with
/// `background: true` starts through toolsrv's proc/new.bg; olliesrv keeps one BgProc per
/// process, watches it (its `out` to the end, then `wait`) and delivers the
/// `<system-proc-interrupt>` prompt to the agent that started it. The agent's `proc/{pid}/`
/// files mirror toolsrv's through the session's ToolHost (agent_files.hpp declares them).

#include <asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "toolhost.hpp"

namespace ollie {

class Agent;

/// Largest `stat` or `wait` text read from toolsrv for a process: a few hundred bytes there.
inline constexpr std::size_t max_proc_status = 64u << 10;

/// One background process of an agent, in the toolsrv instance that runs it (pids are
/// per instance: after a toolsrv restart the same number is another process).
struct BgProc {
  int pid = 0;
  std::uint64_t instance = 0;
  std::string tool;
  std::string cmd;  ///< the interrupt's `cmd` attribute (proc_cmd)

  /// When a client last read one of its files (toolsrv keeps an exited process 10 minutes past
  /// its exit and past the last read, §6.5.3: the entry goes when toolsrv's does).
  void touch();
  std::chrono::steady_clock::time_point last_read() const;

  /// Ends its watcher's wait for toolsrv's entry to go (olliesrv's shutdown: a wait of up to 10
  /// minutes would hold the I/O threads' end), now or as the watcher comes to it.
  void end_watch();
  /// The watcher's: how to end its wait; false when end_watch came first.
  bool on_end_watch(std::function<void()> end);
  /// Whether end_watch has come (the watcher looks before each wait: the end posted to its
  /// executor finds no wait while it is between two).
  bool watch_ended() const;

  /// The right to deliver the process's interrupt: true for the first to ask, its watcher at
  /// the process's end or olliesrv's shutdown while it still runs.
  bool claim_interrupt();

 private:
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point last_read_ = std::chrono::steady_clock::now();
  std::function<void()> end_watch_;
  bool watch_ended_ = false;
  bool interrupt_claimed_ = false;
};

/// end_watch of each of the agent's processes.
void end_watches(Agent& a);

/// olliesrv stops (SIGTERM): the agent's background processes still running die with its
/// toolsrv. Each one's `lost` interrupt (§6.10) goes into the history and the log at once, since
/// no turn runs to take it and the prompt queue is not kept (§7.7): the next request carries it.
void report_lost_at_stop(Agent& a);

/// Runs a call through proc/new.bg (§6.10). The model's result: `background process <pid>
/// started (<tool>)`, or the error (`error: bypass denied`, `error: start failed: …`). A started
/// process joins the agent's `procs` and is watched until its end. Cancellation flushes the
/// start (nothing runs).
asio::awaitable<ToolOutcome> start_background(std::shared_ptr<Agent> a, ToolCallRequest req);

/// The `<system-proc-interrupt>` text of §6.10 for a process that ended: `cmd` as the
/// attribute gives it, `status` exited/signaled/lost, `code` the exit code or signal number,
/// `output` the last bytes of its combined output and `total` how many bytes it had in all.
std::string proc_interrupt(int pid, const std::string& cmd, const std::string& status, const std::string& code,
                           const std::string& output, std::uint64_t total);

/// The interrupt's `cmd` attribute: the `cmd` argument when it is a string, else `<tool>
/// <compact args JSON with sorted keys>`, cut to 200 characters.
std::string proc_cmd(const std::string& tool, const std::string& args);

}  // namespace ollie
