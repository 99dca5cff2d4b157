#pragma once
/// Text-based tool calls (spec §8.15): some models write their tool calls into the answer text,
/// as `<tool_call>{"name": …, "arguments": {…}}</tool_call>` elements or as fenced code blocks
/// (```json or ```tool_call) holding exactly such an object. Pure: no I/O.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "backend/types.hpp"

namespace ollie {

/// At most this many bytes of a response's text are scanned (the rest stays text).
inline constexpr std::size_t TEXT_CALLS_SCANNED = 256 * 1024;
/// At most this many calls are taken from one response (later fragments stay text).
inline constexpr std::size_t TEXT_CALLS_MAX = 16;

struct TextCalls {
  std::string text;                      ///< the text without the parsed fragments, ends trimmed
  std::vector<backend::ToolCall> calls;  ///< in text order; id empty, arguments compact JSON
};

/// The calls in `text` naming one of `loaded`; a fragment that does not parse as exactly such an
/// object, or names another tool, stays text. `calls` empty = `text` unchanged.
TextCalls extract_text_calls(std::string_view text, const std::vector<std::string>& loaded);

}  // namespace ollie
