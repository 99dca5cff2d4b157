#pragma once
/// Result tiers (spec §8.4) and context compaction (§8.5): the cold collapse, the context
/// estimate, the zones and texts of the procedure (pure functions, unit-tested), and the
/// procedure itself (Compaction::run), used by the turn (automatic) and by `ctl compact` (§3.3).

#include <asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/types.hpp"
#include "lib9p/result.hpp"
#include "store.hpp"

namespace ollie {

class Agent;
class Session;

/// The hot zone: the last messages of the history, always kept verbatim (§8.5.3).
inline constexpr std::size_t HOT_ZONE = 8;
/// What the summarizer (and pruning) keeps of a warm result (§8.4).
inline constexpr std::size_t WARM_BYTES = 2048;
/// The default trigger: compact when the estimate reaches this share of the context (§8.5.2).
inline constexpr int DEFAULT_COMPACT_AT = 50;
/// The summary request's maxTokens when the profile sets none (§8.5.3 step 4).
inline constexpr int SUMMARY_MAX_TOKENS = 4096;

/// The first line of the message that replaces a compacted old part (§8.5.3 step 6).
inline constexpr std::string_view COMPACTED_HEADER =
    "This conversation was compacted. The summary below was written from the earlier history; "
    "continue from it without redoing finished work.";
/// The instruction sent after the flattened old part (§8.5.3 step 4).
extern const std::string_view SUMMARY_INSTRUCTION;

// ---- tiers (§8.4) ----

/// The model's copy of a cold result after its one request: the one-line summary of the result
/// as delivered, followed by the inject appended to it (§8.8: its last `inject` bytes) verbatim.
std::string collapsed(std::string_view tool, std::string_view content, std::size_t inject = 0);
/// A warm result cut to WARM_BYTES with the note `[shortened from <B> bytes]`; the inject
/// appended to it (its last `inject` bytes) stays verbatim. Shorter results are returned unchanged.
std::string shortened(std::string_view content, std::size_t inject = 0);

/// What collapsing or shortening dropped.
struct Pruned {
  std::size_t results = 0, bytes = 0;
  Pruned& operator+=(const Pruned& o) {
    results += o.results;
    bytes += o.bytes;
    return *this;
  }
};
/// §8.1.3 step 2: collapses every cold result the model has seen: carried by a request (`sent`),
/// or, in a restored history, before the last assistant message.
Pruned collapse_sent(std::vector<HistoryMessage>& h);
/// The results after the last assistant message are not seen, whatever request carried them: it
/// got no answer (refused, failed, stopped before a token), so the next one carries them verbatim.
void unsend_unanswered(std::vector<HistoryMessage>& h);
/// Collapses the cold results (tier `cold`) or shortens the warm ones (tier `warm`) among the
/// first `end` messages; each is marked `collapsed`.
Pruned prune(std::vector<HistoryMessage>& h, std::size_t end, std::string_view tier);

// ---- the estimate (§8.5.1) ----

/// (system prompt's bytes + every message's content as sent + every call's name and arguments) / 4.
std::int64_t estimate_tokens(std::size_t system_bytes, const std::vector<HistoryMessage>& h);
/// Whether `tokens` reaches `percent` % of `context_length`.
bool over_trigger(std::int64_t tokens, int context_length, int percent);

// ---- the zones and texts of the procedure (§8.5.3) ----

/// Where the hot zone starts: the last HOT_ZONE messages, moved earlier while it would start with
/// a tool result (a call stays with its results).
std::size_t hot_start(const std::vector<HistoryMessage>& h);
/// Where the old part starts: 1 when the history starts with the userPrompts message, else 0.
std::size_t old_start(const std::vector<HistoryMessage>& h, std::string_view user_prompts);
/// Whether a message is the summary message of an earlier compaction.
bool is_compaction_message(const HistoryMessage& m);
/// §8.5.2: whether the old part holds anything but the userPrompts and a previous summary.
bool compactable(const std::vector<HistoryMessage>& h, std::string_view user_prompts);
/// The old part as one text for the summarizer, at most 80 % of `context_length` tokens.
std::string flatten(const std::vector<HistoryMessage>& old, int context_length);
/// The first sentence of a text, blanks collapsed, at most 100 characters ("" when none).
std::string first_sentence(std::string_view text);
/// The warm index: one line per assistant message of the old part (the 10 most recent).
std::string warm_index(const std::vector<HistoryMessage>& old);
/// The text of the prompt that started the last turn when it lies in the old part [begin, end)
/// (a previous summary carries it in its `## Latest request (verbatim)` section).
std::optional<std::string> latest_request(const std::vector<HistoryMessage>& h, std::size_t begin, std::size_t end);
/// The message that replaces the old part (§8.5.3 step 6).
std::string summary_message(std::string_view summary, std::string_view index, const std::optional<std::string>& latest);

// ---- the procedure ----

/// What started a compaction (§8.5.2).
enum class Trigger { threshold, overflow, manual };

/// One summary request (no system prompt, no tools) with the retries of §8.2: its text, or why it failed.
using Summarizer = std::function<asio::awaitable<p9::Result<std::string>>(backend::ChatRequest)>;

/// What a compaction did.
struct Compacted {
  bool changed = false;      ///< the history changed (pruned or summarized)
  std::size_t removed = 0;   ///< messages replaced by the summary (0: not summarized)
};

class Compaction {
 public:
  /// The procedure of §8.5.3 on an agent whose history nobody else changes meanwhile (its turn,
  /// or a Hold). Automatic triggers prune old tool output first (a threshold trigger stops there
  /// when that suffices) and report a failure as an `error` block; `manual` returns it.
  static asio::awaitable<p9::Result<Compacted>> run(std::shared_ptr<Agent> a, std::shared_ptr<Session> s,
                                                    Trigger why, Summarizer summarize);
  /// The context length of the agent's model, asked once from the provider (off the I/O threads).
  /// With a `patience`, an ask not answered by then gives the unknown 128000 (§8.5.1) and goes on:
  /// its answer is kept, and shown from the next time on.
  static asio::awaitable<int> context_length(std::shared_ptr<Agent> a,
                                             std::chrono::steady_clock::duration patience = std::chrono::steady_clock::duration::max());
  /// How long a request, or what shows the window (`stats`, a new agent, a new model), waits
  /// for the ask.
  static constexpr std::chrono::seconds ask_patience{2};

 private:
  /// The summary request of a manual compaction, or `interrupted` once the agent is stopped.
  static asio::awaitable<p9::Result<std::string>> stoppable(std::shared_ptr<Agent> a,
                                                            asio::awaitable<p9::Result<std::string>> ask);
};

/// Whether the agent's history holds anything to compact (else `nothing to compact`).
bool compactable(const Agent& a);

/// `ctl compact`: compacts the history of an idle agent that the caller holds (Agent::hold): the
/// number of messages replaced by the summary, or `compact: <reason>`.
asio::awaitable<p9::Result<std::size_t>> compact(std::shared_ptr<Agent> a, std::shared_ptr<Session> s);

/// One summary request through the agent's backend outside a turn (turn.cpp), its usage counted.
asio::awaitable<p9::Result<std::string>> summarize(std::shared_ptr<Agent> a, std::shared_ptr<Session> s,
                                                   backend::ChatRequest req);

}  // namespace ollie
