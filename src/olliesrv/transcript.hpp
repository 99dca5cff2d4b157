#pragma once
/// An agent's transcript (spec §2.8.7, §2.8.8): its blocks with their ids, the rendered text of
/// `chat`/`log`, the JSONL of `chat.raw`/`log.raw`, and the in-flight partial block while a
/// response streams. Thread-safe: the turn appends from its strand while the backend's thread
/// streams deltas and 9P handlers read, all at once. Every reader is bounded: the rendered text
/// is kept as a window (readers that fall behind it skip ahead to its start), and a chat.raw
/// reader gets one coalesced partial snapshot per change, never a backlog of tokens.

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib9p/result.hpp"
#include "virtfs/stream.hpp"

namespace ollie {

/// One block (§2.8.8).
struct Block {
  std::string role;     ///< user assistant reasoning call tool info exec error retry bypass context
  std::string id;       ///< 8 lowercase hex digits
  std::string name;     ///< optional (empty = absent)
  std::string format;   ///< optional (tool blocks: the tool's outputFormat)
  std::string content;

  /// One JSON object, no newline, fields in the order role, id, name, format, partial, content
  /// (name and format left out when empty; partial only when true).
  std::string json(bool partial = false) const;
  /// A line of blocks.jsonl / log.raw. Errors name what is wrong.
  static p9::Result<Block> parse(std::string_view line);
};

/// A block to append (its id comes from the transcript). A function, not a braced list: GCC 12
/// rejects braced aggregates of strings inside coroutines.
inline Block make_block(std::string role, std::string content, std::string name = {}, std::string format = {}) {
  Block b;
  b.role = std::move(role);
  b.name = std::move(name);
  b.format = std::move(format);
  b.content = std::move(content);
  return b;
}

/// The rendering of §2.8.7 of a finalized block, followed by one empty line (`reasoning` and
/// `context` render as nothing).
std::string render(const Block& b);

class Transcript {
 public:
  /// Size of the rendered window `log` serves and `chat` starts from (§2.8.7).
  static constexpr std::size_t LOG_BYTES = 65536;

  Transcript(std::string session_id, std::string agent_id);
  ~Transcript();
  Transcript(const Transcript&) = delete;
  Transcript& operator=(const Transcript&) = delete;

  /// Restore (§7.7): the finalized blocks of blocks.jsonl, oldest first, and a floor (the stored
  /// counter, at least the file's line count); the counter resumes above the floor and the last
  /// block's number, skipping one. Before any other use.
  void restore(std::vector<Block> blocks, std::uint64_t stored_counter);
  /// The per-agent block counter (persisted as blockCounter).
  std::uint64_t counter() const;

  /// Finalizes a whole block: gives it the next id (§2.8.8, unique among this agent's ids),
  /// appends it to the blocks, the rendered text and chat.raw, calls on_final, wakes readers.
  /// Returns the block with its id. An in-flight block stays open (a `/verb` reply or an inject
  /// while a response streams does not cut the response in two); while it is an assistant
  /// block, this block's rendering waits in chat until the response's text is finalized.
  Block append(Block b);
  /// Streams `delta` into the in-flight block of `role` ("assistant" or "reasoning"), opening
  /// one (with its id) when none is open; an open block of the other role is finalized first.
  /// The text reaches chat at once (assistant) and chat.raw as a partial snapshot.
  void stream(std::string_view role, std::string_view delta);
  /// Finalizes the in-flight block as streamed so far (on_final called); nullopt when none.
  std::optional<Block> finish_stream();
  /// Finalizes an in-flight `assistant` block with `content` in place of what streamed (the
  /// text-based tool calls of §8.15 taken out; the rendered text keeps what streamed). An empty
  /// `content` still finalizes the block: chat.raw readers may hold its partials (§2.8.8: the
  /// finalized line replaces them). Any other in-flight block is finalized as streamed.
  std::optional<Block> finish_stream(std::string content);

  /// `log`: the last LOG_BYTES of the rendered text, from a line start, with the in-flight text.
  std::string log() const;
  /// `log.raw`: every finalized block as JSONL.
  std::string log_raw() const;
  /// log_raw().size() without building it (the Length of log.raw, §1.5).
  std::uint64_t log_raw_size() const;
  /// `block`: a finalized block by id (case-insensitive).
  std::optional<Block> find(std::string_view id) const;
  /// The last finalized block of `role` (the reply of a turn is the last assistant block).
  std::optional<Block> last(std::string_view role) const;
  /// The number of finalized blocks.
  std::size_t size() const;
  /// Qid.vers of log, log.raw, chat and chat.raw (§1.5): bumped on every change.
  std::uint32_t version() const;
  /// When version() last moved (seconds since the epoch), 0 when not since olliesrv started.
  std::int64_t changed_at() const;

  /// A `chat` reader: starts where log() starts, then streams rendered text token by token.
  std::shared_ptr<virtfs::Cursor> chat();
  /// A `chat.raw` reader: every finalized block, then live partials (whole content so far,
  /// coalesced) and finalized blocks.
  std::shared_ptr<virtfs::Cursor> chat_raw();
  /// The agent is gone: readers get EOF once they have read what is there. Afterwards append()
  /// still gives out an id but stores nothing and calls no on_final; stream() is ignored.
  /// `last`: a block its readers get before the EOF, after the block in flight, finalized (a
  /// kill interrupts first, §8.9); neither goes to on_final, as the agent's files go with it.
  /// The destructor closes.
  void close(std::optional<Block> last = std::nullopt);

  /// Called (outside the transcript's lock) with each finalized block, in order: persistence.
  /// Set before use. Blocks finalized by several threads at once are all delivered by the one
  /// that got there first, so a call may return before its own block reached on_final; on_final
  /// may call back into the transcript.
  std::function<void(const Block&)> on_final;

  struct State;

 private:
  void deliver();
  std::shared_ptr<State> s_;
};

}  // namespace ollie
