#pragma once
/// Everything a provider can make us hold or wait for, bounded in one place
/// (doc/backends.md, "Limits"). Going past a bound ends that request with an error that
/// names the bound; nothing grows without one.

#include <chrono>
#include <cstddef>

namespace ollie::backend::limits {

/// A whole (non-streamed) response: model lists, /api/show, the Copilot token exchange.
inline constexpr std::size_t response_body = 8u << 20;
/// How long a non-streamed request may take from start to its last byte.
inline constexpr std::chrono::milliseconds fetch_deadline{60'000};
/// One streamed event: an SSE event's data (all its `data:` lines), an NDJSON line, an
/// event-stream frame.
inline constexpr std::size_t event_data = 8u << 20;
/// One tool call's arguments as assembled from its deltas (anthropic: any content block).
inline constexpr std::size_t tool_call = 4u << 20;
/// One response's text, reasoning and tool calls together (a model's output limit is far below).
inline constexpr std::size_t response_output = 16u << 20;
/// The provider's own text in an error message; longer text is cut and ends in "...".
inline constexpr std::size_t error_text = 2048;
/// An error body that is not JSON, as quoted in the message.
inline constexpr std::size_t error_body_text = 500;
/// Nesting of a provider's JSON (copying and dumping a value recurse on its depth).
inline constexpr int json_depth = 128;

}  // namespace ollie::backend::limits
