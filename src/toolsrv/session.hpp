#pragma once
/// Session: the state of one toolsrv instance (one olliesrv session) and the execution of calls
/// (spec §6.3-§6.6, §6.9.1). Every toolsrv file of the 9P tree is a thin handler over a method
/// here; nothing here knows 9P or Asio. Callbacks run on internal threads and must be quick.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/common.h>
#include <spdlog/fwd.h>

#include "lib9p/result.hpp"
#include "toolsrv/bypass.hpp"
#include "toolsrv/catalog.hpp"
#include "toolsrv/cwd.hpp"
#include "toolsrv/landlock.hpp"
#include "toolsrv/locks.hpp"
#include "toolsrv/override.hpp"
#include "toolsrv/process.hpp"
#include "toolsrv/request.hpp"
#include "toolsrv/sandbox.hpp"
#include "toolsrv/unixsock.hpp"

namespace toolsrv {

/// Where things are, resolved once at start.
struct SessionConfig {
  std::string config_root;   ///< -config: sandbox.yaml, default tools/
  std::string cwd;           ///< -cwd: the session cwd
  std::string session_id;    ///< OLLIE_SESSION_ID, else pid-<pid>
  std::string data_root;     ///< $XDG_DATA_HOME/ollie
  std::string tmpdir;        ///< the session's private {TMPDIR}
  std::string bin_path;      ///< directory of the toolsrv executable ({OLLIE_BIN_PATH})
  std::string tools_path;    ///< OLLIE_TOOLS_PATH as toolsrv got it ("" = <config_root>/tools)
  std::chrono::seconds proc_keep = proc_keep_default;          ///< shortened by tests only
  std::chrono::seconds bypass_timeout = bypass_timeout_default;  ///< shortened by tests only

  /// The defaults of §6.1, §7.1, §7.3.2 from toolsrv's environment: XDG_* with their fallbacks,
  /// TMPDIR under $XDG_RUNTIME_DIR/ollie/tmp/<sid> or /tmp/ollie-<uid>/tmp/<sid>.
  static SessionConfig from_environment(const std::string& config_root, const std::string& cwd,
                                        const std::string& bin_path);
};

/// A call in progress; cancel() is the flush of its proc/new request.
class Call {
 public:
  /// Withdraws a waiting bypass request, leaves the lock queue, or kills the process group.
  /// The done callback still runs once (its reply can be dropped).
  void cancel();
  /// toolsrv's pid once the process started (0 before).
  int pid() const;

 private:
  friend class Session;
  mutable std::mutex mu_;
  bool cancelled_ = false;
  std::uint64_t bypass_id_ = 0;
  std::uint64_t lock_ticket_ = 0;
  int pid_ = 0;
  std::function<void()> cancel_bypass_, cancel_lock_, cancel_process_;
};

class Session {
 public:
  /// Creates the private TMPDIR; an error there is returned by every call.
  explicit Session(SessionConfig config);
  ~Session();

  // ---- ctl (§6.3); the 9P layer tokenizes the line and calls one of these ----
  /// `load <agent> <tool>...`: rescans, all or nothing.
  p9::Result<void> load(const std::string& agent, const std::vector<std::string>& tools);
  /// `unload <agent> <tool>...`.
  void unload(const std::string& agent, const std::vector<std::string>& tools);
  /// `forget <agent>`: registry, cwd override and processes; its calls still waiting for a bypass
  /// answer or a path lock are cancelled and never start.
  void forget(const std::string& agent);
  /// `env <KEY>=<VALUE>` (empty value unsets). Error: `invalid env name: <k>`.
  p9::Result<void> set_env(const std::string& key, const std::string& value);
  /// `cwd <dir>`: resolved and held open now (HeldCwd). Errors: `cwd must be absolute: <d>`,
  /// `cwd: <d>: not a directory`.
  p9::Result<void> set_cwd(const std::string& dir);
  /// `agentcwd <agent> <dir>`, nullopt for `-`.
  p9::Result<void> set_agent_cwd(const std::string& agent, const std::optional<std::string>& dir);
  /// `sandboxok [<sha256> <dir>]...`.
  p9::Result<void> set_approvals(const std::vector<std::pair<std::string, std::string>>& pairs);

  // ---- tools, info (§6.4) ----
  /// `tools` read for request `*` (catalog) or `<agent>`; JSON array and a newline.
  std::string tools(const std::string& request);
  /// `info` for the session (agent empty) or an agent's effective cwd.
  std::string info(const std::string& agent);
  /// `info` request `stat <agent> <path>...` (paths already tokenized).
  std::string stat_paths(const std::string& agent, const std::vector<std::string>& paths);
  /// `info` request `resolve <agent> <path>...`: `path<TAB>real` per path, `real` the path with
  /// `..` and symlinks resolved when it names a directory, else `-` (olliesrv's containment of
  /// agent/new, §4.2, which compares paths as the tool host resolves them).
  std::string resolve_dirs(const std::string& agent, const std::vector<std::string>& paths);

  // ---- calls (§6.5, §6.6) ----
  /// proc/new: starts a call; `done` gets the §6.5.2 reply once. Request errors (`tool not loaded:
  /// <t>`) are returned at once and nothing runs.
  p9::Result<std::shared_ptr<Call>> call(const CallRequest& request, std::function<void(std::string)> done);
  /// proc/new.bg: `done` gets the pid once the process started, or the Rerror text
  /// (`bypass denied`, `start failed: <reason>`).
  p9::Result<std::shared_ptr<Call>> call_background(const CallRequest& request, std::function<void(p9::Result<int>)> done);

  /// The process table (proc/{pid}/...).
  ProcessTable& processes() { return *procs_; }
  /// The bypass broker (bypass/pending, bypass/resolve).
  BypassBroker& bypass() { return bypass_; }
  /// The path-lock table.
  LockTable& locks() { return *locks_; }
  /// The effective cwd of an agent.
  std::string agent_cwd(const std::string& agent) const;

 private:
  struct Prepared;
  struct Launcher;
  p9::Result<std::shared_ptr<Call>> start_call(const CallRequest& request, bool background,
                                               std::function<void(std::shared_ptr<Process>)> on_start,
                                               std::function<void(std::shared_ptr<Process>)> on_end);
  /// Rescans the tool directories (load, tools) and keeps the result for the calls.
  std::shared_ptr<const std::vector<CatalogEntry>> scan();
  /// The latest scan with the agent's loaded tools re-read where their files changed (§7.2.2:
  /// `tools <agent>` does not rescan the directories); a scan when there was none.
  std::shared_ptr<const std::vector<CatalogEntry>> catalog_for(const std::string& agent);
  std::map<std::string, std::string> sandbox_env(const Policy& policy) const;
  p9::Result<HeldCwd> held_cwd(const std::string& agent) const;
  /// Logs `text` once per session.
  void warn_once(const std::string& text, spdlog::level::level_enum level = spdlog::level::warn);
  /// A sandbox message (§7.3), once per session: sandbox.yaml's `general.log_level`, when set, is
  /// the least level written, whatever toolsrv's own (OLLIE_LOG); unset, toolsrv's applies.
  void sandbox_note(const std::string& log_level, const std::string& text, spdlog::level::level_enum level = spdlog::level::warn);

  SessionConfig config_;
  std::string tmpdir_error_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> env_;               // ctl env
  p9::Result<HeldCwd> cwd_;                              // the session cwd, held
  std::map<std::string, HeldCwd> agent_cwd_;
  std::vector<std::pair<std::string, std::weak_ptr<Call>>> calls_;  // by agent, for forget
  Approvals approvals_;
  PolicyLoader global_policy_;                           // sandbox.yaml, reparsed when it changes
  Registry registry_;
  /// `tools <agent>` is read before every LLM request (§8.1.3): each agent's reply, remade only
  /// when its catalog (a scan, an edited tool) or its loaded tools changed.
  struct Listing {
    std::shared_ptr<const std::vector<CatalogEntry>> catalog;
    std::string text;
  };
  std::map<std::string, Listing> listings_;  // agents with tools loaded only (dropped by unload, forget)
  std::shared_ptr<const std::vector<CatalogEntry>> catalog_;  // the latest scan: what calls run
  std::shared_ptr<const HostFacts> host_;                     // the facts that scan used
  std::vector<std::string> dirs_;                             // the directories that scan read
  RulesetCache rulesets_;
  void once(const std::string& text, spdlog::level::level_enum level, spdlog::logger& to);
  static constexpr std::size_t warned_max = 1024;
  std::set<std::string> warned_;  // what warn_once logged, at most warned_max + 1
  BypassBroker bypass_;
  std::shared_ptr<LockTable> locks_;
  std::unique_ptr<UnixGuard> unix_guard_;  // the seccomp unix filters' server (null: no user notification)
  std::unique_ptr<ProcessTable> procs_;  // last: destroyed first, its callbacks touch the rest
};

}  // namespace toolsrv
