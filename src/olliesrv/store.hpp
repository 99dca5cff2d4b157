#pragma once
/// Session persistence (spec §7.7): `$XDG_DATA_HOME/ollie/sessions/<session id>/` holds
/// `session.json` (replaced atomically: temp file, fsync, rename), `<agent id>.blocks.jsonl`
/// (append-only, one finalized block per line) and `<agent id>.compaction.jsonl`. Directories
/// 0700, files 0600. Plain records in, plain records out: the engine's objects convert.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/types.hpp"
#include "lib9p/result.hpp"

namespace ollie {

/// One message of an agent's model history as §7.7 stores it.
struct HistoryMessage {
  backend::Message msg;
  std::string tool_name;   ///< tool results: the tool's name
  std::string tier;        ///< tool results: hot | warm | cold ("" = hot)
  bool collapsed = false;  ///< a cold result already replaced by its one-line summary (§8.4)
  bool failed = false;     ///< tool results: the call failed (the `error: ` of §8.3.4 was the engine's)
  std::size_t inject = 0;  ///< tool results: bytes at the end that are an inject appended to it (§8.8)
  /// Carried by a request (not saved: a restored history counts what precedes its last
  /// assistant message as sent).
  bool sent = false;
};

/// Pairs each result with a call of the last assistant message before it and removes calls
/// without results (their reasoning too once none is left), results without calls, and assistant
/// messages left with neither text nor calls: at restore (§7.7), after an interrupt (§8.9) and
/// for a history a sub-agent starts from.
void drop_unanswered(std::vector<HistoryMessage>& history);

/// The usage totals of §2.8.2 that persist.
struct UsageRecord {
  std::int64_t input = 0, output = 0, cached_input = 0, cache_creation = 0, requests = 0;
  bool estimated = false;
  double cost_last = 0, cost_session = 0;
};

struct AgentRecord {
  std::string id, name, profile;
  std::string parent;        ///< agent/idx's parent (an extension of §7.7: "parent", when set)
  bool turn = false;         ///< a turn ran at the save (an extension: "turn", when true)
  /// That turn's cost so far, sub-agents' included (an extension: "turnCost", when not 0): a
  /// restore ends the turn a kill -9 cut off, so it becomes costLast and joins costSession.
  double turn_cost = 0;
  std::int64_t created = 0;  ///< Unix seconds
  std::string backend, model;
  std::string cwd;           ///< the override only ("" = inherit)
  std::string params;        ///< JSON object text of the cfg overrides ("{}" when none)
  std::vector<std::string> tools, peers;
  std::string plan;
  std::uint64_t block_counter = 0;
  /// Bytes of the system prompt as last rendered (an extension: "systemPromptBytes", when known):
  /// a restored agent's context estimate (stats) counts it until the prompt is rendered again.
  std::uint64_t system_prompt_bytes = 0;
  std::string feed;
  UsageRecord usage;
  std::vector<HistoryMessage> messages;
};

struct SessionRecord {
  std::string id, name, cwd, remote, backend, model;
  std::map<std::string, std::string> env;
  std::string goal, bypass;
  std::uint64_t bypass_counter = 0;
  std::vector<AgentRecord> agents;
};

/// The JSON text of session.json (§7.7's field names; tool call arguments stored as the JSON
/// object they parse to, else as the string they are).
std::string to_json(const SessionRecord& s);
/// Parses session.json. Errors say what is wrong.
p9::Result<SessionRecord> parse_session(std::string_view text);

/// What restore finds for one session.
struct LoadedSession {
  SessionRecord record;
  /// Per agent id: the lines of its blocks.jsonl (an incomplete last line left out), oldest first.
  std::map<std::string, std::vector<std::string>> blocks;
  /// The blocks.jsonl files with an incomplete last line, and the length to cut them to: by
  /// Store::settle once the session is restored (one that is skipped keeps its files as they are).
  std::vector<std::pair<std::string, off_t>> torn;
};

/// Every member does blocking file I/O (fsync included): call it off the I/O threads.
/// Safe to use from several threads at once. It keeps the serialised messages of each session's
/// last save, so that the save after a tool round serialises what changed, not the whole history.
class Store {
 public:
  /// root: the `sessions/` directory (created 0700 when needed).
  explicit Store(std::string root);
  ~Store();
  const std::string& root() const { return root_; }

  /// Writes session.json atomically (temp, fsync, rename; the directory created 0700).
  p9::Status save(const SessionRecord& s);
  /// Appends one line (a block's JSON, without newline) to `<agent>.blocks.jsonl`, 0600. The
  /// files of the last `held_max` agents that appended stay open between appends; one removed
  /// meanwhile (by a person's `rm`) is opened, and made, again.
  p9::Status append_block(const std::string& session_id, const std::string& agent_id, std::string_view line);
  /// Appends `{"time":<unix>,"messages":[…]}` to `<agent>.compaction.jsonl` (§7.7).
  p9::Status append_compaction(const std::string& session_id, const std::string& agent_id,
                               const std::vector<HistoryMessage>& messages);
  /// Deletes the session's directory (session kill, §3.2).
  p9::Status remove_session(const std::string& session_id);
  /// An agent kill (§3.3) in three steps: its files marked (`<agent>.killed`), the session saved
  /// without it, then its files and the mark deleted. A restart between two steps finishes the
  /// kill from the mark (settle); an agent's files without a mark (a hand edit of session.json
  /// dropped the agent) are kept.
  p9::Status mark_killed(const std::string& session_id, const std::string& agent_id);
  p9::Status remove_agent(const std::string& session_id, const std::string& agent_id);

  /// Every session directory (§7.7 restore): histories cleaned of calls without results (and
  /// of assistant messages left with neither text nor calls). A session that fails to load is
  /// skipped, logged, its files left untouched, and named in `skipped` ("<dir>: <reason>").
  std::vector<LoadedSession> load_all(std::vector<std::string>* skipped = nullptr) const;
  /// Once a session load_all found is restored: cuts the incomplete last lines it found (§7.7),
  /// removes the temp files of saves a crash cut short, and makes the directory 0700 again.
  void settle(const LoadedSession& ls) const;

  /// Per agent id: each message of the last save with its text in session.json.
  struct MessageTexts;

 private:
  std::string root_;
  std::mutex texts_mu_;
  std::map<std::string, std::shared_ptr<MessageTexts>> texts_;  // by session id, under texts_mu_

  static constexpr std::size_t held_max = 16;
  struct HeldBlocks;
  void drop_held(const std::string& session_id, const std::string* agent_id);
  std::mutex held_mu_;
  std::vector<std::unique_ptr<HeldBlocks>> held_;  // open blocks files, the last used last; under held_mu_
};

}  // namespace ollie
