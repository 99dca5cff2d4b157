#pragma once
/// The translation of an agent's blocks (spec §2.8.8: `chat.raw` and `log.raw` lines) into ACP
/// `session/update` payloads: text and reasoning as message and thought chunks (a partial block
/// sends only what it added since the last line of that block), `call` blocks as tool calls,
/// `tool` blocks as their results, the rest as lines of the agent's message. Also the `plan`
/// file as a plan update. Pure: no I/O.

#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace acp {

using json = nlohmann::json;

/// Nesting deeper than this is refused: copying or dumping a JSON value recurses once a level, so
/// an editor's line or a model's call arguments (kept verbatim in its `call` block) nested ten
/// thousand deep would end the bridge. olliesrv bounds tool arguments the same (§8.3).
inline constexpr int max_json_depth = 128;

/// JSON text parsed; discarded when it is not JSON or nests deeper than max_json_depth (then
/// `*too_deep` is set when given).
json parse_bounded(std::string_view text, bool* too_deep = nullptr);

/// How a turn ended, from its blocks: an `info` block `interrupted` is cancelled, an `error`
/// block `stopped: <reason>` (the provider filtered or refused) is a refusal, any other `error`
/// block is a failure with its text. An error followed by more of the turn (an `assistant`,
/// `reasoning`, `call` or `tool` block) is not how it ended: a failed automatic compaction
/// (§8.5.3) or another client's bad `/verb` (§3.4) adds one to a turn that then goes on.
struct TurnEnd {
  bool interrupted = false;
  bool refused = false;
  std::optional<std::string> failure;
};

class Translator {
 public:
  /// cwd: the agent's effective cwd, against which relative tool paths are made absolute.
  explicit Translator(std::string cwd) : cwd_(std::move(cwd)) {}

  /// The updates one block line gives (none for `context` blocks and repeated lines).
  std::vector<json> block(const json& b);
  /// Tool calls that got no result (cancelled calls never do): their `failed` updates.
  std::vector<json> unfinished();
  /// True when no call of the current batch waits for its result.
  bool batch_done() const { return calls_.empty(); }
  /// The first call still waiting for its result whose bypass request would read `<tool>
  /// <summary>` (bypass_summary), leaving out the ids in taken (calls already matched).
  std::optional<std::string> awaiting(std::string_view tool, std::string_view summary,
                                      const std::set<std::string>& taken) const;
  const TurnEnd& end() const { return end_; }

 private:
  std::string cwd_;
  std::map<std::string, std::size_t> sent_;  // id of a streaming block -> bytes already sent
  struct Call {
    std::string id, tool, summary;  // summary: as its bypass request would show it
  };
  std::deque<Call> calls_;                   // calls awaiting their tool block, in order
  std::set<std::string> done_;               // finalized block ids already translated
  TurnEnd end_;
};

/// The ACP tool kind of an Ollie tool (`read`, `edit`, `search`, `execute`, `fetch`, `think`,
/// `other`), by its name.
std::string tool_kind(std::string_view tool);
/// A tool call's title: `<tool> <what>`, what being the `cmd` argument, else the `path`
/// (whatever other arguments come with them), else the arguments as JSON, cut at 200 bytes.
std::string tool_title(std::string_view tool, const json& args);
/// The summary the bypass broker gives a call with these arguments (spec §6.9.2): `cmd` when the
/// arguments are exactly {"cmd": <string>}, else them all as compact JSON with sorted keys. The
/// dispatch flags (`timeout`, `background`, `bypass`, `sandbox`; §6.8) are left out first, as
/// olliesrv removes them before the call reaches toolsrv and the broker.
std::string bypass_summary(json args);
/// A summary as `bypass/pending/{session}` escapes it (§2.3: `\\`, `\t`, `\r`, `\n`, `\xNN`)
/// back to the text; any other backslash is left as it is.
std::string unescaped(std::string_view s);
/// The plan update of the agent's `plan` text: its markdown checklist items (`- [ ]` pending,
/// `- [x]` completed, `- [~]`, `- [-]` or `- [>]` in progress) as entries.
json plan_update(std::string_view plan);

}  // namespace acp
