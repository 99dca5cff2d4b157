#pragma once
/// Context compaction (spec §8.5): what `ctl compact` (§3.3) calls. The procedure itself (the
/// summarizer request, the zones, the snapshot in `<agent>.compaction.jsonl`) is the engine
/// issue's: until it lands, compact() answers `compact: not available yet`.

#include <asio/awaitable.hpp>
#include <cstddef>
#include <memory>

#include "lib9p/result.hpp"

namespace ollie {

class Agent;
class Session;

/// The hot zone: the last messages of the history, always kept verbatim (§8.5.3).
inline constexpr std::size_t HOT_ZONE = 8;

/// Whether the history holds anything older than the hot zone (else `nothing to compact`).
bool compactable(const Agent& a);

/// Compacts the history of an idle agent that the caller holds (Agent::hold): the number of
/// messages replaced by the summary, or `compact: <reason>`.
asio::awaitable<p9::Result<std::size_t>> compact(std::shared_ptr<Agent> a, std::shared_ptr<Session> s);

}  // namespace ollie
