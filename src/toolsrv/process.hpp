#pragma once
/// The process table (spec §6.5, §6.6): every tool process started by this toolsrv, its output,
/// status and lifetime. One internal thread forks, reaps (pidfd), reads the pipes (epoll), enforces
/// timeouts and collects old entries; nothing here blocks a caller for long, and no Asio is needed
/// to wait: readers use Process::when_changed.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lib9p/result.hpp"
#include "toolsrv/capture.hpp"
#include "toolsrv/fd.hpp"
#include "toolsrv/notifier.hpp"
#include "toolsrv/spawn.hpp"

namespace toolsrv {

/// `status` of §6.5.2, plus running.
enum class ProcStatus { running, exited, signaled, timeout, denied, failed };

/// The spelling of a status in replies and stat.
std::string_view status_name(ProcStatus s);

/// Time an exited process stays after its exit and its last read (§6.5.3).
inline constexpr std::chrono::seconds proc_keep_default{600};
/// How long the pipes are drained after the tool exited (§6.6 End of a call).
inline constexpr std::chrono::milliseconds drain_limit{2000};
/// Finished processes kept at most, foreground and background each; beyond it the least
/// recently used of that kind go first (§6.5.3).
inline constexpr std::size_t proc_finished_max = 64;

/// One process (also a call that never started: status failed or denied).
class Process {
 public:
  /// toolsrv's pid (the decimal counter of §6.5.3), not the kernel's.
  int pid() const { return pid_; }
  const std::string& tool() const { return tool_; }
  const std::string& agent() const { return agent_; }
  bool background() const { return background_; }
  /// The kernel pid, also the process group (-1 if it never started).
  pid_t os_pid() const { return os_pid_; }

  /// True once the status is final and the output complete.
  bool finished() const;
  ProcStatus status() const;

  /// A slice of `out` (§6.5.3) at `offset`: while running, what the combined head holds; after
  /// the end, the final combined output. `eof` is true when finished and offset is at the end.
  struct Chunk {
    std::string data;
    bool eof = false;
  };
  Chunk read_out(std::uint64_t offset, std::size_t count) const;

  /// Version of the process' observable state (output grew, status changed).
  std::uint64_t version() const { return notifier_.version(); }
  /// Wakes `wake` once when version() > seen (see Notifier).
  Subscription when_changed(std::uint64_t seen, std::function<void()> wake) { return notifier_.when_changed(seen, std::move(wake)); }

  /// `wait` content: empty until finished, then the status header lines.
  std::string wait_text() const;
  /// The whole proc/new reply (§6.5.2): header, blank line, stdout bytes, stderr bytes.
  std::string reply() const;
  /// reply() once the process is finished, then its separate captures are dropped: only `out`
  /// (the combined output) and the header of `wait` and `stat` are served after that, so a
  /// collected process keeps one copy of its output, not four. Later reply()s have no body.
  std::string take_reply();
  /// `stat` content (§6.5.3).
  std::string stat_text() const;
  /// Bytes of memory its output holds (the captures and `out`).
  std::size_t held() const;

  /// Records a read of any of its files (for the collection time).
  void touch();

 private:
  friend class ProcessTable;
  std::string header_locked() const;
  std::size_t stdout_size_locked() const { return trimmed_ ? stdout_size_ : stdout_.rendered_size(); }
  std::size_t stderr_size_locked() const { return trimmed_ ? stderr_size_ : stderr_.rendered_size(); }
  // Finished: drops the separate captures (sizes kept) and the combined one (final_out_ has it).
  void trim_locked();

  int pid_ = 0;
  std::string tool_, agent_;
  bool background_ = false;
  pid_t os_pid_ = -1;
  std::vector<std::string> extra_headers_;

  mutable std::mutex mu_;
  ProcStatus status_ = ProcStatus::running;
  bool finished_ = false;
  bool reaped_ = false;
  bool timed_out_ = false;
  int exit_code_ = 0;
  int signal_ = 0;
  Capture stdout_, stderr_, combined_;
  bool trimmed_ = false;
  std::size_t stdout_size_ = 0, stderr_size_ = 0;
  std::string final_out_;
  std::chrono::system_clock::time_point started_wall_;
  std::chrono::steady_clock::time_point started_, ended_, last_read_;
  Notifier notifier_;
};

/// Everything needed to start one process.
struct Launch {
  std::string tool;
  std::string agent;
  bool background = false;
  std::chrono::seconds timeout{0};     ///< 0 = none
  SpawnSpec spec;                      ///< spec.ruleset_fd is held by `ruleset`
  std::shared_ptr<const UniqueFd> ruleset;  ///< released once the child is started (may be shared)
  std::string stdin_data;              ///< the JSON arguments
  std::vector<std::string> headers;    ///< extra reply headers: `override=...`, `sandbox=none`
  /// Called once on the table's thread when the process is finished (status final, output
  /// complete): release locks, reply. Not called when the start failed.
  std::function<void(const std::shared_ptr<Process>&)> on_finish;
  /// With spec.unix_filter: takes the filter's listener once the child started (on the table's
  /// thread), to serve its notifications (UnixGuard::adopt).
  std::function<void(UniqueFd)> on_unix_listener;
};

class ProcessTable {
 public:
  /// `keep`: how long finished processes stay (a parameter only so tests can shorten it).
  explicit ProcessTable(std::chrono::seconds keep = proc_keep_default);
  /// stop().
  ~ProcessTable();
  /// Kills every process group still running (SIGKILL), runs what its thread still has queued (finishes, and starts that now
  /// fail with `toolsrv is stopping`) and joins the thread. Idempotent. The owner calls it while
  /// everything the callbacks reach is still whole.
  void stop();
  ProcessTable(const ProcessTable&) = delete;
  ProcessTable& operator=(const ProcessTable&) = delete;

  /// Starts `launch` on the table's thread. `started` gets the process (running), or, when it
  /// could not start, a finished one with status failed and the reason as its stderr.
  void start(Launch launch, std::function<void(std::shared_ptr<Process>)> started);

  /// Records a call that did not run (status failed or denied, `reason` as stderr).
  std::shared_ptr<Process> add_finished(const std::string& tool, const std::string& agent, bool background,
                                        ProcStatus status, const std::string& reason,
                                        std::vector<std::string> headers = {});

  /// The process with this pid, or null.
  std::shared_ptr<Process> find(int pid) const;
  /// Every pid, ascending (the proc/ directory).
  std::vector<int> pids() const;

  /// proc/{pid}/ctl: `term`, `kill`, `signal <N>`, `dismiss`. Errors: `process has exited`,
  /// `invalid signal: <x>`, `unknown control message`, `no such process`.
  p9::Result<void> control(int pid, std::string_view command);
  /// Signal to the process group; `process has exited` once it was reaped.
  p9::Result<void> signal(int pid, int sig);
  /// Cancellation (flush): SIGKILL to the group; the status becomes signaled.
  void cancel(int pid);
  /// Kills the group if running, and removes the entry.
  void dismiss(int pid);
  /// Kills and dismisses every process of `agent` (ctl forget).
  void forget_agent(const std::string& agent);
  /// SIGKILL to every running group (toolsrv exit).
  void kill_all();
  /// Removes finished processes idle for `keep`; returns how many. Also run by the thread.
  std::size_t collect();
  /// Number of finished processes in the table.
  std::size_t finished_count() const;

 private:
  struct Slot;
  struct Command;
  void loop();
  void wake();
  void do_start(Command& cmd);
  void on_readable(Slot& slot, int fd);
  // Writes what is left of the arguments to the child's stdin; true when it is done with
  // (all written, or the pipe failed).
  bool write_stdin(Slot& slot);
  void on_exit(Slot& slot);
  void finish(Slot& slot);
  void close_fd(Slot& slot, UniqueFd& fd);
  std::shared_ptr<Process> make_process(const std::string& tool, const std::string& agent, bool background);
  // Keeps at most proc_finished_max finished processes of each kind, dropping the least recently used.
  void cap_finished();

  const std::chrono::seconds keep_;
  mutable std::mutex mu_;
  int next_pid_ = 1;
  std::map<int, std::shared_ptr<Process>> procs_;
  std::vector<std::unique_ptr<Command>> commands_;
  bool stopping_ = false;

  // Owned by the thread.
  UniqueFd epoll_, event_;
  std::map<int, std::unique_ptr<Slot>> slots_;  // by toolsrv pid
  std::map<int, int> fd_owner_;                 // fd -> toolsrv pid
  std::optional<std::uint64_t> resets_;         // the signals a child sets back to SIG_DFL
  std::thread thread_;
};

}  // namespace toolsrv
