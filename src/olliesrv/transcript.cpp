#include "transcript.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <deque>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "backend/text.hpp"
#include "lib9p/utf8.hpp"
#include "olliesrv/bypass_policy.hpp"
#include "olliesrv/ids.hpp"

namespace ollie {

namespace {

/// A JSON string literal exactly as nlohmann/json writes it (compact, UTF-8 kept); bytes that
/// are not UTF-8 become U+FFFD instead of failing the whole block.
void put_string(std::string& out, std::string_view s) {
  out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool known_role(std::string_view r) {
  static constexpr std::string_view roles[] = {"user", "assistant", "reasoning", "call",  "tool",   "info",
                                               "exec", "error",     "retry",     "bypass", "context"};
  return std::find(std::begin(roles), std::end(roles), r) != std::end(roles);
}

bool block_id_syntax(std::string_view id) {
  return id.size() == 8 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

/// What follows a block's rendered text: its line ended, then one empty line.
std::string_view trailer(std::string_view rendered) {
  return !rendered.empty() && rendered.back() == '\n' ? "\n" : "\n\n";
}

/// The rendering of a block without its trailer; nullopt for blocks that render as nothing.
std::optional<std::string> body(const Block& b) {
  const std::string& r = b.role;
  if (r == "reasoning" || r == "context") return std::nullopt;
  if (r == "user") return b.name.empty() ? "user: " + b.content : "user (" + b.name + "): " + b.content;
  if (r == "call") return "→ " + bypass::escape(b.name) + " " + bypass::visible_json(b.content);
  if (r == "exec") return "! " + b.name + "\n" + b.content;
  if (r == "error") return "error: " + b.content;
  if (r == "info" || r == "retry") return ":: " + b.content;
  if (r == "bypass") return "bypass: " + b.content;
  return b.content;  // assistant, tool
}

using backend::lower;

constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();

}  // namespace

std::string Block::json(bool partial) const {
  std::string out;
  out.reserve(content.size() + 64);
  out += "{\"role\":";
  put_string(out, role);
  out += ",\"id\":";
  put_string(out, id);
  if (!name.empty()) {
    out += ",\"name\":";
    put_string(out, name);
  }
  if (!format.empty()) {
    out += ",\"format\":";
    put_string(out, format);
  }
  if (partial) out += ",\"partial\":true";
  out += ",\"content\":";
  put_string(out, content);
  out += '}';
  return out;
}

p9::Result<Block> Block::parse(std::string_view line) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded()) return p9::error("block: invalid json");
  if (!j.is_object()) return p9::error("block: not an object");
  Block b;
  auto field = [&](const char* key, std::string& into, bool required) -> p9::Status {
    auto it = j.find(key);
    if (it == j.end()) {
      if (required) return p9::error(std::string("block: missing ") + key);
      return {};
    }
    if (!it->is_string()) return p9::error(std::string("block: ") + key + ": not a string");
    into = it->get<std::string>();
    return {};
  };
  for (auto [key, into, required] : {std::tuple{"role", &b.role, true}, std::tuple{"id", &b.id, true},
                                     std::tuple{"name", &b.name, false}, std::tuple{"format", &b.format, false},
                                     std::tuple{"content", &b.content, true}})
    if (auto st = field(key, *into, required); !st) return st.error();
  if (!known_role(b.role)) return p9::error("block: unknown role: " + b.role.substr(0, 32));
  if (!block_id_syntax(b.id)) return p9::error("block: invalid id: " + b.id.substr(0, 32));
  return b;
}

std::string render(const Block& b) {
  auto text = body(b);
  if (!text) return {};
  text->append(trailer(*text));
  return std::move(*text);
}

// The shared state, kept alive by every cursor. Bounds: the rendered text is a window of at
// most 2 * WINDOW bytes (trimmed to WINDOW when it grows past that); the finalized blocks are
// all kept in memory for log.raw, block and chat.raw's replay: they grow with the agent's
// transcript (each tool result is already truncated by the engine) and go with the agent.
struct Transcript::State {
  static constexpr std::size_t WINDOW = 1 << 20;

  std::string session_id, agent_id;
  mutable std::mutex mu;
  std::uint64_t counter = 0;
  std::vector<Block> blocks;                            // finalized, oldest first
  std::unordered_map<std::string, std::size_t> by_id;   // every id given out; npos = not stored
  std::uint64_t raw_size = 0;                           // bytes of log_raw()
  // log_raw()'s text of blocks[0, raw_blocks): made at the first read of log.raw and extended
  // after, so a loop of opens and reads copies it instead of serialising every block again.
  std::string raw;
  std::size_t raw_blocks = 0;
  std::optional<Block> open;                            // the in-flight assistant/reasoning block
  std::uint64_t open_seq = 0;                           // bumped on every change of `open`
  std::string text;                                     // the rendered window
  std::vector<Block> held;                              // finalized behind an open assistant block, stored after it
  std::uint64_t text_base = 0;                          // absolute offset of text[0]
  std::uint32_t version = 0;
  std::int64_t changed = 0;                             // when version last moved (seconds), 0: not since the start
  bool closed = false;
  std::deque<Block> finals;                             // finalized, awaiting on_final
  std::size_t persisted = 0;                            // blocks[0, persisted) went through on_final
  bool delivering = false;
  std::shared_ptr<virtfs::Signal> signal = std::make_shared<virtfs::Signal>();

  void bump() {
    version++;
    changed = std::time(nullptr);
  }

  std::uint64_t text_end() const { return text_base + text.size(); }

  void add_text(std::string_view t) {
    text.append(t);
    if (text.size() > 2 * WINDOW) {
      std::size_t drop = text.size() - WINDOW;
      text.erase(0, drop);
      text_base += drop;
    }
  }

  /// The absolute offset `log` starts at: the last LOG_BYTES, cut after the first newline of
  /// the cut text. A cut text without a newline (one line longer than LOG_BYTES) is kept whole.
  std::uint64_t log_start() const {
    std::uint64_t end = text_end();
    if (end - text_base <= LOG_BYTES) return text_base;
    std::size_t from = text.size() - LOG_BYTES;
    auto nl = text.find('\n', from);
    if (nl != std::string::npos) return text_base + nl + 1;
    while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) from++;  // a character's start
    return text_base + from;
  }

  /// Where a chat cursor that fell behind the window goes: its start, at a line start.
  std::uint64_t window_start() const {
    auto nl = text.find('\n');
    return nl == std::string::npos || text_base == 0 ? text_base : text_base + nl + 1;
  }

  std::string next_id() {
    for (;;) {
      auto id = block_id(session_id, agent_id, ++counter);
      if (by_id.emplace(id, npos).second) return id;
    }
  }

  /// Stores a finalized block (its id already given out) and queues it for on_final. One that
  /// comes while a response's text streams (a `/verb` reply, an inject, a `!cmd`) is stored when
  /// the response's block ends, right after it: `chat` never cuts the text, and chat.raw,
  /// log.raw and the blocks file (what `chat` is rendered from after a restart) keep the order
  /// `chat` showed.
  void store(Block b) {
    if (open && open->role == "assistant") {
      held.push_back(std::move(b));
      return;
    }
    keep(std::move(b));
  }

  void keep(Block b) {
    if (auto t = body(b)) {
      add_text(*t);
      add_text(trailer(*t));
    }
    by_id[b.id] = blocks.size();
    raw_size += b.json().size() + 1;
    blocks.push_back(b);
    finals.push_back(std::move(b));
    bump();
  }

  /// Finalizes the in-flight block. The assistant text is already in the window: only its
  /// trailer is added. `content`: an assistant block's final content, in place of what streamed;
  /// even empty, the block is kept, so chat.raw readers holding its partials get its final line.
  std::optional<Block> finalize_open(const std::optional<std::string>& content = std::nullopt) {
    if (!open) return std::nullopt;
    Block b = std::move(*open);
    open.reset();
    open_seq++;
    if (closed) return std::nullopt;  // its agent is killed: nothing of it is kept or persisted (§3.3)
    if (b.role == "assistant") add_text(trailer(b.content));
    if (b.role == "assistant" && content) b.content = *content;
    by_id[b.id] = blocks.size();
    raw_size += b.json().size() + 1;
    blocks.push_back(b);
    finals.push_back(b);
    bump();
    for (auto& h : held) keep(std::move(h));
    held.clear();
    return b;
  }
};

namespace {

/// chat: the rendered text from an absolute offset.
class ChatCursor : public virtfs::Cursor {
 public:
  ChatCursor(std::shared_ptr<Transcript::State> s, std::uint64_t pos) : s_(std::move(s)), pos_(pos) {}
  virtfs::Chunk read(std::size_t max) override {
    std::lock_guard lk(s_->mu);
    // A reader that fell behind the window skips what was dropped: it resumes at the window's
    // first line start, told so on a line of its own, as `event` tells its overflow (the text
    // it missed is still in log.raw).
    if (pos_ < s_->text_base) {
      const auto to = s_->window_start();
      notice_ = std::string(line_start_ ? "" : "\n") + ":: chat skipped " + std::to_string(to - pos_) +
                " bytes: this reader fell behind (log.raw has every block)\n\n";
      pos_ = to;
    }
    virtfs::Chunk c;
    if (!notice_.empty()) {
      c.data = notice_.substr(0, max);
      notice_.erase(0, c.data.size());
    } else {
      std::size_t off = static_cast<std::size_t>(pos_ - s_->text_base);
      if (off < s_->text.size()) c.data = s_->text.substr(off, max);
      pos_ += c.data.size();
      c.eof = s_->closed && pos_ >= s_->text_end();
    }
    if (!c.data.empty()) line_start_ = c.data.back() == '\n';
    return c;
  }
  std::shared_ptr<virtfs::Signal> signal() override { return s_->signal; }

 private:
  std::shared_ptr<Transcript::State> s_;
  std::uint64_t pos_;
  std::string notice_;      // the skip's line, what of it was not read yet
  bool line_start_ = true;  // what this reader got so far ends a line (a cursor starts at one)
};

/// chat.raw: every finalized block from the first, then live partial snapshots and blocks.
class RawCursor : public virtfs::Cursor {
 public:
  explicit RawCursor(std::shared_ptr<Transcript::State> s) : s_(std::move(s)) {}
  /// Every line ready, up to `max` bytes (§1.7: a read returns what is available); a line
  /// longer than what is left of the read is split across reads.
  virtfs::Chunk read(std::size_t max) override {
    std::lock_guard lk(s_->mu);
    virtfs::Chunk c;
    while (c.data.size() < max && (done_ < pending_.size() || refill())) {
      std::size_t n = std::min(max - c.data.size(), pending_.size() - done_);
      c.data.append(pending_, done_, n);
      done_ += n;
    }
    c.eof = s_->closed && done_ == pending_.size() && next_ >= s_->blocks.size() &&
            (!s_->open || s_->open_seq == seen_seq_);
    return c;
  }
  std::shared_ptr<virtfs::Signal> signal() override { return s_->signal; }

 private:
  /// The next line to send, if there is one (under mu).
  bool refill() {
    pending_.clear();
    done_ = 0;
    // A finalized block is sent once it is in its agent's blocks file: a reader never holds
    // one that kill -9 could take back (§7.7). A killed agent's blocks are all there is.
    const std::size_t ready = s_->closed ? s_->blocks.size() : s_->persisted;
    if (next_ < ready) {
      pending_ = s_->blocks[next_++].json();
    } else if (next_ == s_->blocks.size() && s_->open && s_->open_seq != seen_seq_) {
      // One snapshot of the whole content so far, however many deltas came since the last.
      seen_seq_ = s_->open_seq;
      pending_ = s_->open->json(true);
    } else {
      return false;
    }
    pending_ += '\n';
    return true;
  }

  std::shared_ptr<Transcript::State> s_;
  std::size_t next_ = 0;        // the next finalized block to send
  std::uint64_t seen_seq_ = 0;  // open_seq of the last partial sent
  std::string pending_;         // the line being sent (at most one)
  std::size_t done_ = 0;        // bytes of pending_ sent
};

}  // namespace

Transcript::Transcript(std::string session_id, std::string agent_id) : s_(std::make_shared<State>()) {
  s_->session_id = std::move(session_id);
  s_->agent_id = std::move(agent_id);
}

Transcript::~Transcript() { close(); }

void Transcript::restore(std::vector<Block> blocks, std::uint64_t stored_counter) {
  {
    std::lock_guard lk(s_->mu);
    // Past the last stored block's number, which restarts before this one may have put above
    // the count of lines (below), and past one more: the block in flight at a kill -9 had shown
    // its id to chat.raw's readers, and an id is never given again (§2.8.8).
    std::uint64_t last = stored_counter;
    if (!blocks.empty())
      for (std::uint64_t n = stored_counter; n < stored_counter + 4096; n++)
        if (block_id(s_->session_id, s_->agent_id, n) == blocks.back().id) {
          last = n;
          break;
        }
    s_->counter = last + 1;
    // Only the tail of the rendered text is kept: render from the newest block back until the
    // window is full. Offsets are internal, so the window starts at 0.
    std::vector<std::string> tail;
    std::size_t bytes = 0;
    for (auto it = blocks.rbegin(); it != blocks.rend() && bytes < State::WINDOW; ++it) {
      tail.push_back(render(*it));
      bytes += tail.back().size();
    }
    s_->text.clear();
    s_->text.reserve(bytes);
    for (auto it = tail.rbegin(); it != tail.rend(); ++it) s_->text += *it;
    s_->text_base = 0;
    s_->by_id.clear();
    s_->raw_size = 0;
    s_->raw.clear();
    s_->raw_blocks = 0;
    for (std::size_t i = 0; i < blocks.size(); i++) {
      s_->by_id.emplace(blocks[i].id, i);
      s_->raw_size += blocks[i].json().size() + 1;
    }
    s_->blocks = std::move(blocks);
    s_->persisted = s_->blocks.size();
    s_->bump();
  }
  s_->signal->notify();
}

std::uint64_t Transcript::counter() const {
  std::lock_guard lk(s_->mu);
  return s_->counter;
}

void Transcript::deliver() {
  {
    std::lock_guard lk(s_->mu);
    if (s_->delivering) return;  // the thread delivering now takes ours too, in order
    s_->delivering = true;
  }
  for (;;) {
    Block b;
    {
      std::lock_guard lk(s_->mu);
      if (s_->finals.empty()) {
        s_->delivering = false;
        return;
      }
      b = std::move(s_->finals.front());
      s_->finals.pop_front();
    }
    if (on_final) {
      try {
        on_final(b);
      } catch (const std::exception& e) {
        spdlog::error("transcript {}: persisting block {}: {}", s_->agent_id, b.id, e.what());
      }
    }
    {
      std::lock_guard lk(s_->mu);
      s_->persisted++;  // saved or failed (logged): chat.raw's readers may have it now
    }
    s_->signal->notify();
  }
}

Block Transcript::append(Block b) {
  // What a block holds is what the transcript shows, live and after a restart: bytes that are not
  // UTF-8 (a prompt's, a `!` command's output) become U+FFFD here, not only in the stored JSON.
  b.content = p9::valid_utf8(b.content);
  b.name = p9::valid_utf8(b.name);
  {
    std::lock_guard lk(s_->mu);
    b.id = s_->next_id();
    if (s_->closed) return b;
    s_->store(b);
  }
  s_->signal->notify();
  deliver();
  return b;
}

void Transcript::stream(std::string_view role, std::string_view delta) {
  if (delta.empty() || (role != "assistant" && role != "reasoning")) return;
  {
    std::lock_guard lk(s_->mu);
    if (s_->closed) return;
    if (s_->open && s_->open->role != role) s_->finalize_open();
    if (!s_->open) {
      Block b;
      b.role = std::string(role);
      b.id = s_->next_id();
      s_->open = std::move(b);
    }
    s_->open->content.append(delta);
    if (role == "assistant") s_->add_text(delta);
    s_->open_seq++;
    s_->bump();
  }
  s_->signal->notify();
  deliver();
}

std::optional<Block> Transcript::finish_stream() {
  std::optional<Block> b;
  {
    std::lock_guard lk(s_->mu);
    b = s_->finalize_open();
  }
  if (!b) return b;
  s_->signal->notify();
  deliver();
  return b;
}

std::optional<Block> Transcript::finish_stream(std::string content) {
  std::optional<Block> b;
  {
    std::lock_guard lk(s_->mu);
    b = s_->finalize_open(std::move(content));
  }
  if (!b) return b;
  s_->signal->notify();
  deliver();
  return b;
}

std::string Transcript::log() const {
  std::lock_guard lk(s_->mu);
  return s_->text.substr(static_cast<std::size_t>(s_->log_start() - s_->text_base));
}

std::string Transcript::log_raw() const {
  std::lock_guard lk(s_->mu);
  auto& st = *s_;
  if (st.raw.empty()) st.raw.reserve(st.raw_size);  // then the string's own growth
  for (; st.raw_blocks < st.blocks.size(); st.raw_blocks++) {
    st.raw += st.blocks[st.raw_blocks].json();
    st.raw += '\n';
  }
  return st.raw;
}

std::uint64_t Transcript::log_raw_size() const {
  std::lock_guard lk(s_->mu);
  return s_->raw_size;
}

std::optional<Block> Transcript::find(std::string_view id) const {
  std::lock_guard lk(s_->mu);
  auto it = s_->by_id.find(lower(id));
  if (it == s_->by_id.end() || it->second == npos) return std::nullopt;
  return s_->blocks[it->second];
}

std::optional<Block> Transcript::last(std::string_view role) const {
  std::lock_guard lk(s_->mu);
  for (auto it = s_->blocks.rbegin(); it != s_->blocks.rend(); ++it)
    if (it->role == role) return *it;
  return std::nullopt;
}

std::size_t Transcript::size() const {
  std::lock_guard lk(s_->mu);
  return s_->blocks.size();
}

std::uint32_t Transcript::version() const {
  std::lock_guard lk(s_->mu);
  return s_->version;
}

std::int64_t Transcript::changed_at() const {
  std::lock_guard lk(s_->mu);
  return s_->changed;
}

std::shared_ptr<virtfs::Cursor> Transcript::chat() {
  std::lock_guard lk(s_->mu);
  return std::make_shared<ChatCursor>(s_, s_->log_start());
}

std::shared_ptr<virtfs::Cursor> Transcript::chat_raw() { return std::make_shared<RawCursor>(s_); }

void Transcript::close(std::optional<Block> last) {
  {
    std::lock_guard lk(s_->mu);
    if (s_->closed) return;
    if (last) {
      const std::size_t queued = s_->finals.size();
      s_->finalize_open();
      last->id = s_->next_id();
      s_->store(std::move(*last));
      s_->finals.resize(queued);  // shown, not persisted: once closed, readers have every block
    }
    s_->closed = true;
    s_->bump();
  }
  s_->signal->notify();
}

}  // namespace ollie
