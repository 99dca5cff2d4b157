// Text-based tool calls (spec §8.15).

#include "text_calls.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "backend/json.hpp"

namespace ollie {

namespace {

using json = nlohmann::json;

constexpr std::string_view OPEN_TAG = "<tool_call>";
constexpr std::string_view CLOSE_TAG = "</tool_call>";
constexpr std::string_view FENCE = "```";

/// One candidate fragment: [begin, end) of the text, and the JSON text it holds.
struct Fragment {
  std::size_t begin = 0, end = 0;
  std::string_view body;
};

std::string_view trim(std::string_view s) {
  const auto ws = " \t\r\n";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

/// `{"name": "<string>", "arguments": {…}}` and nothing else, naming a loaded tool.
std::optional<backend::ToolCall> parse_call(std::string_view body, const std::vector<std::string>& loaded) {
  body = trim(body);
  if (body.empty() || body.front() != '{') return std::nullopt;
  json j = backend::parse_json(body);  // bounded in depth: the arguments are dumped below
  if (j.is_discarded() || !j.is_object() || j.size() != 2) return std::nullopt;
  auto name = j.find("name");
  auto args = j.find("arguments");
  if (name == j.end() || args == j.end() || !name->is_string() || !args->is_object()) return std::nullopt;
  const auto& n = name->get_ref<const std::string&>();
  if (std::find(loaded.begin(), loaded.end(), n) == loaded.end()) return std::nullopt;
  backend::ToolCall tc;
  tc.name = n;
  tc.arguments = args->dump();
  return tc;
}

/// Whether `pos` starts a line of `text`.
bool line_start(std::string_view text, std::size_t pos) { return pos == 0 || text[pos - 1] == '\n'; }

/// The first ``` at a line start at or after `from`; npos when none.
std::size_t next_fence(std::string_view text, std::size_t from) {
  for (auto at = text.find(FENCE, from); at != std::string_view::npos; at = text.find(FENCE, at + 1))
    if (line_start(text, at)) return at;
  return std::string_view::npos;
}

/// The fence opening at `at` with its closing fence: the whole block and its body. `call_lang` tells
/// whether its language is `json` or `tool_call`. nullopt when it is never closed.
std::optional<Fragment> fence_at(std::string_view text, std::size_t at, bool& call_lang) {
  const auto eol = text.find('\n', at);
  if (eol == std::string_view::npos) return std::nullopt;
  const auto lang = trim(text.substr(at + FENCE.size(), eol - at - FENCE.size()));
  call_lang = lang == "json" || lang == "tool_call";
  // the closing fence: a line that is ``` alone (blanks allowed)
  std::size_t close = eol + 1, end = 0;
  for (;; close += FENCE.size()) {
    close = next_fence(text, close);
    if (close == std::string_view::npos) return std::nullopt;
    end = std::min(text.find('\n', close), text.size());
    if (trim(text.substr(close + FENCE.size(), end - close - FENCE.size())).empty()) break;
  }
  return Fragment{at, end, text.substr(eol + 1, close - eol - 1)};
}

/// The element opening at `at`, up to its closing tag; nullopt when it is never closed.
std::optional<Fragment> element_at(std::string_view text, std::size_t at) {
  const auto body = at + OPEN_TAG.size();
  const auto close = text.find(CLOSE_TAG, body);
  if (close == std::string_view::npos) return std::nullopt;
  return Fragment{at, close + CLOSE_TAG.size(), text.substr(body, close - body)};
}

/// Removes the fragments (in order, not overlapping) from `text`; blank runs left where a
/// fragment stood are joined into one paragraph break, and the ends are trimmed.
std::string without(std::string_view text, const std::vector<Fragment>& cut) {
  std::string out;
  std::size_t from = 0;
  for (const auto& f : cut) {
    out.append(text.substr(from, f.begin - from));
    from = f.end;
    // what follows the fragment on its line (usually its newline) joins what came before it
    while (!out.empty() && (out.back() == ' ' || out.back() == '\t' || out.back() == '\n')) out.pop_back();
    while (from < text.size() && (text[from] == ' ' || text[from] == '\t' || text[from] == '\n' || text[from] == '\r')) from++;
    if (!out.empty() && from < text.size()) out += "\n\n";
  }
  out.append(text.substr(from));
  return std::string(trim(out));
}

}  // namespace

TextCalls extract_text_calls(std::string_view text, const std::vector<std::string>& loaded) {
  TextCalls r;
  const std::string_view scanned = text.substr(0, std::min(text.size(), TEXT_CALLS_SCANNED));
  std::vector<Fragment> cut;
  std::size_t pos = 0;
  while (pos < scanned.size() && r.calls.size() < TEXT_CALLS_MAX) {
    const auto tag = scanned.find(OPEN_TAG, pos);
    const auto fence = next_fence(scanned, pos);
    if (tag == std::string_view::npos && fence == std::string_view::npos) break;
    std::optional<Fragment> f;
    bool call_lang = true;
    if (fence < tag) {
      f = fence_at(scanned, fence, call_lang);
      if (!f) {  // an unclosed fence: the rest is its body, nothing in it is a call
        break;
      }
    } else {
      f = element_at(scanned, tag);
      if (!f) {  // never closed: only a mention; a fenced call may still follow
        pos = tag + OPEN_TAG.size();
        continue;
      }
    }
    pos = f->end;
    if (!call_lang) continue;  // another language's block stays text, whatever it holds
    if (auto tc = parse_call(f->body, loaded)) {
      r.calls.push_back(std::move(*tc));
      cut.push_back(*f);
    } else if (tag < fence) {
      // Text that only names the tag ("use `<tool_call>` tags") before a real element: go on
      // from the next opening tag inside, not past the closing tag.
      if (const auto inner = scanned.find(OPEN_TAG, tag + OPEN_TAG.size()); inner < f->end) pos = inner;
    }
  }
  r.text = cut.empty() ? std::string(text) : without(text, cut);
  return r;
}

}  // namespace ollie
