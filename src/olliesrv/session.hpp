#pragma once
/// A session (spec §2.5, §4.1): a directory of agents sharing a cwd, an environment and one
/// toolsrv (its ToolHost).

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <memory>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

#include "agent.hpp"
#include "virtfs/gate.hpp"
#include "toolhost.hpp"

namespace ollie {

struct Hub;

/// The least time between two writes of session.json after tool rounds (§7.7): a real model's
/// round takes longer, so every round is written; a kill -9 loses at most this much of history
/// (blocks.jsonl has every finalized block regardless).
inline constexpr std::chrono::milliseconds save_spacing{20};

class Session : public std::enable_shared_from_this<Session> {
 public:
  /// `remote`: the ssh destination of a remote session (§6.11), "" for a local one.
  Session(Hub& hub, std::string id, std::string cwd, std::string remote = "");

  Hub& hub;
  const std::string id;
  std::string cwd;  ///< set before the session joins the hub (new_session), never after
  /// The I/O thread of the session's toolsrv client and of its agents, so a tool call never
  /// changes threads (sessions are spread over the threads round robin).
  const asio::any_io_executor ex;
  std::shared_ptr<ToolHost> host;

  // ---- under mu ----
  mutable std::mutex mu;
  /// Unix seconds, its directory's mtime (§1.5): when it was made; for a restored one, when its
  /// oldest agent was (session.json keeps no time of its own).
  std::int64_t created = std::time(nullptr);
  /// When `name`, `env`, `goal` and `bypass` last changed (Unix seconds, their mtime, §1.5); 0:
  /// not since the start.
  std::int64_t name_changed = 0, env_changed = 0, goal_changed = 0, bypass_changed = 0;
  std::string name, remote, backend, model;
  std::map<std::string, std::string> env;
  std::string goal, bypass;
  std::uint64_t bypass_counter = 0;
  bool killed = false;
  /// Sub-agents running now, one gate per depth: backends.conf's `subagents` bounds each depth
  /// (doc/engine.md, "Sub-agents and budgets").
  std::map<int, std::shared_ptr<virtfs::Gate>> subagent_gates;
  /// Goal writes are stored and submitted one at a time (§8.13), so that they share the
  /// conductor the first one makes.
  const std::shared_ptr<virtfs::Gate> goal_gate = std::make_shared<virtfs::Gate>();

  /// The name now (it changes under mu).
  std::string current_name() const {
    std::lock_guard lock(mu);
    return name;
  }
  /// The shown agents: an agent being created is in none of these (nor in saves) until show().
  std::shared_ptr<Agent> find(const std::string& name_or_id) const;
  std::vector<std::shared_ptr<Agent>> agents() const;  ///< sorted by name
  /// Agents a session holds at once (sub-agents included); agent/new beyond: `too many agents: …`.
  static constexpr std::size_t max_agents = 256;
  /// Adds an agent under its name, unique among all of the session's agents. `shown` false
  /// reserves the name for an agent being created; its directory appears at show() (§8.1.1).
  p9::Status add(std::shared_ptr<Agent> a, bool shown = true);
  /// Shows an added agent; false when it or the session is gone meanwhile.
  bool show(const std::string& agent_id);
  /// Removes the agent; true when it was shown (its `agent.<id>.new` published), false when it
  /// was not or was already removed.
  bool remove(const std::string& agent_id);
  p9::Status rename_agent(const std::shared_ptr<Agent>& a, const std::string& name);

  /// The session's files may have changed (another agent's write, a `!` command, a background
  /// process that ended): every agent's result cache but `except`'s goes at its next batch
  /// (§8.3.3; a stamp sees neither a file changed below a searched directory nor a search
  /// without a path).
  void drop_results(const Agent* except = nullptr) const;
  /// Background processes of the session running now: while one runs it may write at any
  /// moment, so no turn serves or keeps a cached result.
  std::atomic<int> background_running{0};

  SessionRecord record() const;
  /// Writes session.json now (errors logged and returned); blocking: `ctl save` and shutdown.
  p9::Status save() const;
  /// Writes session.json soon, on the hub's blocking pool (the persistence moments of §7.7 happen
  /// on I/O threads, which never block): requests made while one is pending join it, and each
  /// write takes the state of its own moment, so the last change is always saved. `spaced`: the
  /// moment after a tool round, whose write starts no sooner than save_spacing after the last
  /// write began, so a turn of rounds faster than that writes once per spacing, not per round;
  /// any other moment meanwhile writes at once.
  void save_soon(bool spaced = false);
  /// Kills every agent and the toolsrv (§3.2). False when it was already killed (by a kill at
  /// the same moment, whose event is the one published).
  bool kill();
  /// Deletes the persisted data of a killed session, after a save under way. Blocking: call it
  /// on the blocking pool.
  void remove_files();

 private:
  std::map<std::string, std::shared_ptr<Agent>> agents_;  // by id
  std::set<std::string> hidden_;                           // ids added but not shown yet
  void write_pending();
  struct SaveTimer;
  bool save_pending_ = false;                              // under mu
  std::chrono::steady_clock::time_point last_write_;       // under mu: when the last write began
  std::weak_ptr<SaveTimer> save_wait_;                     // under mu: a deferred write's wait
  mutable std::mutex save_mu_;  // one write at a time; kill waits for it, so no save revives the directory
};

}  // namespace ollie
