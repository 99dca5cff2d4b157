#pragma once
/// An agent (spec §8): its identity, settings, model history, transcript, state and stats, and
/// the engine that runs its turns. Every turn is a coroutine on the agent's executor (one I/O
/// thread); 9P handlers on other threads read and change the agent under its mutex; `stop`
/// cancels the turn's coroutine, which aborts the HTTP transfer and flushes running tool calls.

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/cancellation_signal.hpp>
#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "procs.hpp"
#include "profile.hpp"
#include "store.hpp"
#include "toolhost.hpp"
#include "transcript.hpp"
#include "virtfs/signal.hpp"

namespace ollie {

struct EventFd;

class Session;
struct Hub;

/// How the turn that took one submission ended, for whoever waits for that turn and not the
/// ones queued after it (a sub-agent's request, §4.2). Under the agent's mu.
struct TurnEnd {
  bool ended = false;
  bool interrupted = false;
  std::string failure;  ///< its `error` block ("" = none)
  std::string answer;   ///< the content of its final assistant message ("" = empty)
};

/// A prompt on its way to a turn (§8.1.2): its text and origin (the `name` of its user block:
/// "" for the hostowner, `peer:<name>`, `feed`, `proc`, `goal`, `inject`).
struct Submission {
  std::string text;
  std::string origin;
  bool shown = false;             ///< its `user` block exists already (an undelivered inject, §8.8)
  std::shared_ptr<TurnEnd> end;   ///< filled when its turn ends (idle_signal is notified), if set
};

/// The usage and context figures of `stats` (§2.8.2).
struct Stats {
  UsageRecord totals;
  int context_length = 128000;
};

/// The tokens spent by one turn of a persistent agent together with every sub-agent started
/// under it, at any depth: what backends.conf's `subagent_budget` bounds (doc/engine.md).
struct TurnTree {
  std::atomic<std::int64_t> tokens{0};
};

class Agent : public std::enable_shared_from_this<Agent> {
 public:
  static constexpr std::size_t MAX_QUEUE = 256;  ///< queued prompts (§8.1.2); more are refused
  static constexpr std::size_t MAX_QUEUE_BYTES = 64 << 20;  ///< and their text: 256 prompts of 16 MiB (a peer's) are 4 GiB

  Agent(Hub& hub, std::shared_ptr<Session> session, std::string id, asio::any_io_executor ex);
  ~Agent();

  Hub& hub;
  const std::weak_ptr<Session> session;
  const std::string id;
  const std::string secret;  ///< §1.5: fresh at creation and at restore, never persisted
  /// Principal group `subagent`, not `agent` (§1.6): a transient agent of `agent/new prompt=`.
  /// Set before the agent joins its session, never changed.
  bool subagent = false;
  /// agent/idx's `parent` (§2.6): the `parent=` agent's id, else the issuing agent's, else "".
  /// Set before the agent joins its session, never changed; persisted as "parent".
  std::string parent;
  /// The agent whose request started this sub-agent (none: the hostowner's); its stats get
  /// this one's usage and cost (§8.10.3). Set before the agent joins its session.
  std::weak_ptr<Agent> issuer;
  /// Sub-agent nesting: 0 for a persistent agent, 1 for a sub-agent of one (or of the
  /// hostowner), 2 for a sub-agent's sub-agent... Set before the agent joins its session.
  int depth = 0;
  /// Foreground write- and global-scope calls of this agent running now: they hold toolsrv's
  /// path locks, so a sub-agent request it sends meanwhile is refused (§4.2).
  std::atomic<int> locking_calls{0};
  std::set<std::string> sandbox_noted;  ///< under mu: what note_sandbox said already
  const asio::any_io_executor ex;
  Transcript transcript;

  // ---- under mu ----
  mutable std::mutex mu;
  std::string name;
  Profile profile;
  std::string backend_name, model;
  std::string cwd_override;
  std::string overrides = "{}";          ///< cfg parameter overrides (JSON object text)
  std::vector<std::string> tools;        ///< loaded tool names (persisted)
  std::string plan;
  std::uint32_t plan_version = 0;        ///< Qid.vers of `plan`: bumped when its content changes
  std::int64_t plan_changed = 0;         ///< when it last changed (seconds), 0: not since the start
  std::int64_t state_changed = 0;        ///< when the state last changed (seconds), 0: not since the start
  std::int64_t name_changed = 0;         ///< when `name` last changed (seconds), 0: not since the start
  std::int64_t cfg_changed = 0;          ///< when what `cfg` shows last changed (seconds), 0: not since the start
  std::vector<std::string> peers;        ///< linked peers' ids (§8.11: ctl peeradd/peerdel), persisted
  std::string feed;                      ///< the feed value (§8.12), persisted
  bool small_context_noted = false;      ///< the small-context `info` block was appended (once, §8.15)
  std::map<int, std::shared_ptr<BgProc>> procs;  ///< background processes toolsrv still tracks (§6.10)
  std::int64_t created = 0;
  std::vector<HistoryMessage> history;
  Stats stats;
  std::string system_prompt;             ///< as last rendered
  std::uint64_t restored_prompt_bytes = 0;  ///< its size before a restart, until it is rendered again
  /// The system prompt's size: as rendered, else as it was before the restart (under mu).
  std::uint64_t prompt_bytes() const { return system_prompt.empty() ? restored_prompt_bytes : system_prompt.size(); }
  std::string system_text;               ///< the System section: default or the profile's systemPrompt
  std::string agent_text, user_prompts;  ///< resolved prompt entries
  std::vector<ToolInfo> last_tools;      ///< the tool list the system prompt was rendered with
  bool render_due = true;                ///< render again at the next use: prompts or names changed (§7.6)
  std::uint64_t results_epoch = 0;       ///< bumped by Session::drop_results (`invalidate`, others' writes): turns drop their result cache
  bool prompts_ready = false;            ///< prompt entries resolved (at creation; restore defers it)
  /// The turn tree this agent spends in: a persistent agent's is new at each turn, a sub-agent's
  /// is its issuer's at its creation.
  std::shared_ptr<TurnTree> tree = std::make_shared<TurnTree>();
  bool killed = false;

  // ---- reading ----
  /// The name now (it changes under mu).
  std::string current_name() const {
    std::lock_guard lock(mu);
    return name;
  }
  std::string state() const;
  /// A linked peer (§8.11), by id.
  bool linked(const std::string& peer_id) const {
    std::lock_guard lock(mu);
    return std::find(peers.begin(), peers.end(), peer_id) != peers.end();
  }
  std::shared_ptr<virtfs::Signal> state_signal() const { return state_signal_; }
  /// Notified when the feed value changes and when the agent is killed.
  std::shared_ptr<virtfs::Signal> feed_signal() const { return feed_signal_; }
  /// Notified at the end of every turn and whenever running() turns false.
  const std::shared_ptr<virtfs::Signal> idle_signal = std::make_shared<virtfs::Signal>();
  bool running() const;
  std::string effective_cwd() const;  ///< override, else the session's cwd
  std::string stats_text() const;
  std::string cfg_text() const;
  AgentRecord record() const;

  // ---- doing ----
  /// Builds the backend for backend_name/model; the error is the backend's (missing key...).
  p9::Status make_backend();
  /// Resolves the profile's prompt entries on the blocking pool (`!` entries run commands) and
  /// marks the system prompt due. False when cancelled (a flush, a stop): it has killed the
  /// command running, the entries stay due for their next use, and the caller's next wait throws.
  asio::awaitable<bool> resolve_prompts();
  /// Submits a prompt: starts a turn when idle, else queues it. Fails with `prompt queue full`,
  /// or `agent killed` (§1.5) when a kill came first.
  p9::Status submit(Submission s);
  /// Takes the head of the prompt queue (a `fifo` read, §2.8.5); nullopt when it is empty.
  std::optional<Submission> pop_queued();
  /// Interrupts the running turn (§8.9), or the manual compaction of a stoppable hold, and the
  /// `!` commands running (§3.4), and discards a pending inject. True when one was running (a
  /// hold for a change is not).
  bool stop();
  /// A `!` command for its run: stop() emits the signal, whose slot the caller binds to the
  /// command's coroutine; end_command when it has ended.
  std::shared_ptr<asio::cancellation_signal> begin_command();
  void end_command(const std::shared_ptr<asio::cancellation_signal>& c);
  /// `inject` (§8.8): while running, makes `text` the pending inject (replacing an undelivered
  /// one) and returns true; idle, returns false (the caller submits it instead).
  bool inject(std::string text);
  /// For an idle-only change that waits (profile switch, cwd, cfg, compact): marks the agent
  /// running so that prompts queue and idle-only verbs are refused meanwhile. False when it runs.
  /// A stoppable hold's work (a manual compaction) is what `stop` interrupts meanwhile.
  bool hold(bool stoppable);
  /// Ends hold(): what was queued (or injected) meanwhile starts.
  void release();
  /// A backend for (backend, model) without installing it (model "" = the backend's default).
  p9::Result<std::shared_ptr<backend::Backend>> build_backend(const std::string& backend, const std::string& model) const;
  /// Installs a built backend: backend_name, model (the backend's) and a context length asked anew.
  void use_backend(const std::string& backend, std::shared_ptr<backend::Backend> be);
  /// Empties the history (`clear`).
  void clear();
  /// Kill: interrupt, readers EOF; the caller removes it from its session.
  void kill();

  /// §8.10.3: a sub-agent's turn spent `u` (totals, cost in cost_session): added to these
  /// totals, its cost to the running turn's (shown in costLast at its end), else to costSession.
  void roll_up(const UsageRecord& u);

  /// An `info`/`error` block appended from a verb (§3.4).
  void note(const std::string& role, const std::string& text);
  /// The `info` blocks a call's sandbox calls for, each once per agent (and hash): an ignored
  /// project override (§7.3.3), a tool host without Landlock (§7.3.2).
  void note_sandbox(const ToolOutcome& r);

 private:
  friend class Turn;
  friend class Compaction;
  void resolve_prompts_now(int cancel_fd);  ///< the work of resolve_prompts (blocking)
  PromptContext prompt_context() const;  ///< for the prompt entries: ids, cwd, the stop
  void set_state(const std::string& s);
  void start_next();
  asio::awaitable<void> run(Submission s);
  /// Under mu: the pending inject as it follows the round's last result (§8.8), taken; "" if none.
  std::string take_inject();
  /// Under mu: an undelivered inject becomes the head of the queue (the turn ended without another round).
  void requeue_inject();

  std::string state_ = "idle";
  std::shared_ptr<virtfs::Signal> state_signal_ = std::make_shared<virtfs::Signal>();
  std::shared_ptr<virtfs::Signal> feed_signal_ = std::make_shared<virtfs::Signal>();
  std::deque<Submission> queue_;
  bool running_ = false;      // a turn runs or is about to (the queue is being drained)
  bool turn_active_ = false;  // a turn's coroutine exists (set by start_next, cleared at its end)
  bool turn_open_ = false;    // a turn's history is not whole yet: the mark a save keeps (§7.7)
  bool held_ = false;         // hold(): no turn starts until release()
  bool held_stoppable_ = false;
  std::shared_ptr<asio::cancellation_signal> cancel_;  ///< of the running turn
  std::uint64_t turns_ = 0;                            ///< turns started (start_next), for stop()
  /// Bumped by every stop() that found the agent running; hold() notes its version, so the work
  /// of a hold (a manual compaction) sees a stop that came after it.
  std::shared_ptr<virtfs::Signal> stopped_ = std::make_shared<virtfs::Signal>();
  std::uint64_t held_at_ = 0;
  std::optional<std::string> inject_;                  ///< the pending inject (§8.8)
  std::vector<std::shared_ptr<asio::cancellation_signal>> commands_;  ///< the `!` commands running
  std::shared_ptr<EventFd> resolving_;  ///< raised by kill(): the prompt entries being resolved end
  std::shared_ptr<backend::Backend> backend_;
  double rolled_cost_ = 0;  ///< sub-agents' cost rolled up during the running turn (§8.10.3)
  double turn_cost_ = 0;    ///< the running turn's own cost so far, saved with the turn's mark
};

}  // namespace ollie
