// The pure parts of result tiers (§8.4) and compaction (§8.5): texts and zones, no I/O.
#include <algorithm>
#include <map>

#include "compaction.hpp"
#include "result.hpp"

namespace ollie {

const std::string_view SUMMARY_INSTRUCTION =
    "Write a hand-off summary of the conversation above for another assistant who will continue "
    "the work without seeing it. Use these sections: **Goal** — what the user wants. **State** — "
    "what has been done, with the files and facts that matter. **Decisions** — choices made and "
    "why; constraints and user preferences. **Open work** — what remains and the next concrete "
    "steps. **References** — exact names, paths, commands and values needed to continue. "
    "Be concise and specific; do not invent anything.";

namespace {

constexpr std::string_view LATEST_TITLE = "## Latest request (verbatim)";
constexpr std::string_view LATEST_HEADER = "\n\n## Latest request (verbatim)\n";
constexpr std::string_view OMITTED = "[earlier history omitted]";
constexpr std::size_t FIRST_LINE_CHARS = 120, SENTENCE_CHARS = 100, INDEX_LINES = 10;

bool continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

/// At most `n` characters (code points) of `s`.
std::string_view first_chars(std::string_view s, std::size_t n) {
  std::size_t i = 0;
  for (std::size_t chars = 0; i < s.size(); i++) {
    if (continuation(s[i])) continue;
    if (chars++ == n) break;
  }
  return s.substr(0, i);
}

/// At most `n` bytes of `s`, cut at a character boundary.
std::string_view first_bytes(std::string_view s, std::size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && continuation(s[n])) n--;
  return s.substr(0, n);
}

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

/// A result as delivered and the inject appended to it (§8.8), split: the engine says how long
/// the inject is (a tool's output that ends like one is the tool's).
struct Delivered {
  std::string_view result, inject;
};

Delivered split_inject(std::string_view content, std::size_t inject) {
  inject = std::min(inject, content.size());
  return {content.substr(0, content.size() - inject), content.substr(content.size() - inject)};
}

std::size_t line_count(std::string_view s) {
  if (s.empty()) return 0;
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')) + (s.back() == '\n' ? 0 : 1);
}

std::string_view first_nonempty_line(std::string_view s) {
  for (std::size_t pos = 0; pos < s.size();) {
    auto nl = s.find('\n', pos);
    if (nl == std::string_view::npos) nl = s.size();
    auto line = s.substr(pos, nl - pos);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (std::any_of(line.begin(), line.end(), [](char c) { return !blank(c); })) return line;
    pos = nl + 1;
  }
  return {};
}

bool is_user_prompts(const HistoryMessage& m, std::string_view user_prompts) {
  return !user_prompts.empty() && m.msg.role == backend::Role::user && m.msg.content == user_prompts;
}

/// A context message the engine added (plan re-injection, nudge): not a prompt.
bool is_system_note(const HistoryMessage& m) { return m.msg.content.starts_with("[system: "); }

/// The model's copy of a tool result for the summarizer, by tier (§8.4).
std::string summarizer_copy(const HistoryMessage& m) {
  if (m.collapsed || m.tier.empty() || m.tier == "hot") return m.msg.content;
  if (m.tier == "warm") return shortened(m.msg.content, m.inject);
  return collapsed(m.tool_name, m.msg.content, m.inject);
}

std::string section(const HistoryMessage& m) {
  using R = backend::Role;
  switch (m.msg.role) {
    case R::assistant: {
      std::string s = "## assistant\n" + m.msg.content;
      for (const auto& c : m.msg.tool_calls) {
        if (!m.msg.content.empty() || &c != &m.msg.tool_calls.front()) s += "\n";
        s += "[tool call " + c.name + " " + c.arguments + "]";
      }
      return s;
    }
    case R::tool: return "## tool result " + m.tool_name + "\n" + summarizer_copy(m);
    default: return "## user\n" + m.msg.content;
  }
}

/// `name(ok|error)` for each call of an assistant message, from the results that follow it.
std::string call_outcomes(const HistoryMessage& m, const std::map<std::string, bool>& failed) {
  std::string out;
  for (const auto& c : m.msg.tool_calls) {
    auto it = failed.find(c.id);
    out += (out.empty() ? "" : ", ") + c.name + (it != failed.end() && it->second ? "(error)" : "(ok)");
  }
  return out;
}

}  // namespace

std::string collapsed(std::string_view tool, std::string_view content, std::size_t inject) {
  const auto d = split_inject(content, inject);
  std::string out = "[" + std::string(tool) + " result elided after use: " + std::to_string(line_count(d.result)) +
                    " lines, " + std::to_string(d.result.size()) + " bytes; first line: " +
                    std::string(first_chars(first_nonempty_line(d.result), FIRST_LINE_CHARS)) + "]";
  out += d.inject;
  return out;
}

std::string shortened(std::string_view content, std::size_t inject) {
  const auto d = split_inject(content, inject);
  if (d.result.size() <= WARM_BYTES) return std::string(content);
  const std::string note = "\n[shortened from " + std::to_string(d.result.size()) + " bytes]";
  std::string out(first_bytes(d.result, WARM_BYTES - note.size()));
  out += note;
  out += d.inject;
  return out;
}

Pruned prune(std::vector<HistoryMessage>& h, std::size_t end, std::string_view tier) {
  Pruned p;
  const bool cold = tier == "cold";
  for (std::size_t i = 0; i < std::min(end, h.size()); i++) {
    auto& m = h[i];
    if (m.msg.role != backend::Role::tool || m.collapsed || m.tier != tier) continue;
    std::string copy = cold ? collapsed(m.tool_name, m.msg.content, m.inject) : shortened(m.msg.content, m.inject);
    if (copy.size() >= m.msg.content.size()) continue;
    p += Pruned{1, m.msg.content.size() - copy.size()};
    m.msg.content = std::move(copy);
    m.collapsed = true;
  }
  return p;
}

Pruned collapse_sent(std::vector<HistoryMessage>& h) {
  std::size_t last = 0;  // a restored history (no `sent`): what precedes its last assistant message
  for (std::size_t i = h.size(); i-- > 0;)
    if (h[i].msg.role == backend::Role::assistant) {
      last = i;
      break;
    }
  // Collapsed even when the line is not shorter: the form is the contract (§8.4).
  Pruned p;
  for (std::size_t i = 0; i < h.size(); i++) {
    auto& m = h[i];
    if (m.msg.role != backend::Role::tool || m.collapsed || m.tier != "cold" || (!m.sent && i >= last)) continue;
    std::string copy = collapsed(m.tool_name, m.msg.content, m.inject);
    p += Pruned{1, m.msg.content.size() > copy.size() ? m.msg.content.size() - copy.size() : 0};
    m.msg.content = std::move(copy);
    m.collapsed = true;
  }
  return p;
}

void unsend_unanswered(std::vector<HistoryMessage>& h) {
  for (std::size_t i = h.size(); i-- > 0 && h[i].msg.role != backend::Role::assistant;) h[i].sent = false;
}

std::int64_t estimate_tokens(std::size_t system_bytes, const std::vector<HistoryMessage>& h) {
  std::size_t bytes = system_bytes;
  for (const auto& m : h) {
    bytes += m.msg.content.size();
    for (const auto& c : m.msg.tool_calls) bytes += c.name.size() + c.arguments.size();
  }
  return static_cast<std::int64_t>(bytes / 4);
}

bool over_trigger(std::int64_t tokens, int context_length, int percent) {
  return tokens * 100 >= static_cast<std::int64_t>(context_length) * percent;
}

std::size_t hot_start(const std::vector<HistoryMessage>& h) {
  std::size_t at = h.size() > HOT_ZONE ? h.size() - HOT_ZONE : 0;
  while (at > 0 && h[at].msg.role == backend::Role::tool) at--;
  return at;
}

std::size_t old_start(const std::vector<HistoryMessage>& h, std::string_view user_prompts) {
  return !h.empty() && is_user_prompts(h[0], user_prompts) ? 1 : 0;
}

bool is_compaction_message(const HistoryMessage& m) {
  return m.msg.role == backend::Role::user && m.msg.content.starts_with(COMPACTED_HEADER);
}

bool compactable(const std::vector<HistoryMessage>& h, std::string_view user_prompts) {
  const auto end = hot_start(h);
  for (std::size_t i = old_start(h, user_prompts); i < end; i++)
    if (!is_compaction_message(h[i])) return true;
  return false;
}

std::string flatten(const std::vector<HistoryMessage>& old, int context_length) {
  std::vector<std::string> sections;
  for (const auto& m : old) sections.push_back(section(m));
  const std::size_t limit = static_cast<std::size_t>(context_length) * 4 * 8 / 10;  // 80 % in bytes
  std::size_t total = 0;
  for (const auto& s : sections) total += s.size() + 2;
  // The oldest sections go first; a previous summary at the start stays.
  const std::size_t keep = !old.empty() && is_compaction_message(old.front()) ? 1 : 0;
  std::size_t from = keep;
  const std::size_t marker = OMITTED.size() + 2;
  while (total + (from > keep ? marker : 0) > limit && from + 1 < sections.size()) total -= sections[from++].size() + 2;
  std::string out;
  auto add = [&](std::string_view s) {
    if (!out.empty()) out += "\n\n";
    out += s;
  };
  for (std::size_t i = 0; i < keep; i++) add(sections[i]);
  if (from > keep) add(OMITTED);
  for (std::size_t i = from; i < sections.size(); i++) add(sections[i]);
  // What stays can still be too long (a section of its own, a summary kept): its middle goes, or
  // the summary request would overflow the window it is meant to relieve.
  return cut_result(std::move(out), limit);
}

std::string first_sentence(std::string_view text) {
  std::size_t b = 0;
  while (b < text.size() && blank(text[b])) b++;
  text.remove_prefix(b);
  std::size_t end = text.find('\n');
  if (end == std::string_view::npos) end = text.size();
  for (std::size_t i = 0; i < end; i++)
    if ((text[i] == '.' || text[i] == '!' || text[i] == '?') && (i + 1 == text.size() || blank(text[i + 1]))) {
      end = i + 1;
      break;
    }
  std::string out;
  for (char c : text.substr(0, end)) {
    if (!blank(c)) out += c;
    else if (!out.empty() && out.back() != ' ') out += ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return std::string(first_chars(out, SENTENCE_CHARS));
}

std::string warm_index(const std::vector<HistoryMessage>& old) {
  std::map<std::string, bool> failed;  // call id → its result is an error
  for (const auto& m : old) {
    if (m.msg.role == backend::Role::tool) failed[m.msg.tool_call_id] = m.failed;
  }
  std::vector<std::string> lines;
  for (const auto& m : old) {
    if (m.msg.role != backend::Role::assistant) continue;
    std::string s = first_sentence(m.msg.content);
    std::string line = "- " + (s.empty() ? std::string("(no text)") : s);
    if (!m.msg.tool_calls.empty()) line += " → " + call_outcomes(m, failed);
    lines.push_back(std::move(line));
  }
  const std::size_t from = lines.size() > INDEX_LINES ? lines.size() - INDEX_LINES : 0;
  std::string out;
  for (std::size_t i = from; i < lines.size(); i++) out += (i > from ? "\n" : "") + lines[i];
  return out;
}

std::optional<std::string> latest_request(const std::vector<HistoryMessage>& h, std::size_t begin, std::size_t end) {
  for (std::size_t i = h.size(); i-- > 0;) {
    const auto& m = h[i];
    if (m.msg.role != backend::Role::user || is_system_note(m)) continue;
    if (i < begin || i >= end) return std::nullopt;  // not in the old part
    if (!is_compaction_message(m)) return m.msg.content;
    const auto at = m.msg.content.find(LATEST_HEADER);
    if (at == std::string::npos) return std::nullopt;
    return m.msg.content.substr(at + LATEST_HEADER.size());
  }
  return std::nullopt;
}

std::string summary_message(std::string_view summary, std::string_view index, const std::optional<std::string>& latest) {
  std::string out(COMPACTED_HEADER);
  out += "\n\n";
  // The engine's own section is the first one a later compaction finds (latest_request): a
  // model that echoes its title (it reads the previous summary) cannot pass its text for the
  // user's request.
  const std::size_t from = out.size();
  out += summary;
  for (auto at = out.find(LATEST_TITLE, from); at != std::string::npos; at = out.find(LATEST_TITLE, at))
    out.replace(at, LATEST_TITLE.size(), "## Latest request (as summarized)");
  out += "\n\n## Recent steps";
  if (!index.empty()) out += "\n" + std::string(index);
  if (latest) out += std::string(LATEST_HEADER) + *latest;
  return out;
}

}  // namespace ollie
