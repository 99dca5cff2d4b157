#pragma once
/// The text an ACP prompt (`session/prompt`'s content blocks) becomes in the agent's `prompt`
/// file: text blocks as they are; embedded text resources and `file://` resource links (the
/// files the editor attached) inlined as `<file path="…">…</file>` context ahead of the text.
/// Pure apart from reading the linked files.

#include <nlohmann/json.hpp>
#include <string>

#include "lib9p/result.hpp"

namespace acp {

/// Largest file inlined from a resource link; a bigger one is named, not inlined.
inline constexpr std::size_t max_inlined_file = 256 * 1024;

/// The prompt text, or an error naming the block that cannot be sent (images, audio, binary
/// resources: the bridge states no such capability) or the field of the wrong type
/// (`prompt[1].text must be a string`). A linked file is inlined when it is a regular file up to
/// max_inlined_file bytes without a NUL byte; anything else is named (`inlined="false"`, or
/// `unreadable="true"` when it cannot be opened), never read: a FIFO would block the bridge.
p9::Result<std::string> prompt_text(const nlohmann::json& blocks);

/// The content of the `user` block olliesrv makes of text written to `prompt` (§2.8.4): trimmed,
/// a leading `//` made `/`, bytes that are not UTF-8 made U+FFFD. Empty when olliesrv ignores
/// the text (nothing but blanks).
std::string stored_prompt(const std::string& text);

/// Whether text, written to `prompt`, is a command (`/verb`, `!cmd`) rather than a turn (§2.8.4).
bool is_command(const std::string& text);
/// Whether it is a shell command (`!cmd`): one that runs until it ends or is stopped (§3.4).
bool is_shell_command(const std::string& text);

}  // namespace acp
