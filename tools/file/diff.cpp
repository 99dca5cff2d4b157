#include "diff.hpp"

#include <algorithm>

namespace filetool {

namespace {

constexpr std::size_t context = 3;

std::string range(std::size_t first, std::size_t count) {
  return std::to_string(count == 0 ? first : first + 1) + "," + std::to_string(count);
}

std::string_view bare(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

bool unterminated(std::string_view text) { return !text.empty() && text.back() != '\n'; }

std::string unified_diff(const std::string& old_name, const std::string& new_name, const std::vector<std::string_view>& old_all,
                         const std::vector<Change>& changes, std::size_t cap, Unterminated ends) {
  std::string out = "--- " + old_name + "\n+++ " + new_name + "\n";
  std::size_t cut = 0;
  auto add = [&](std::string_view text) {
    if (cut || out.size() + text.size() + 1 > cap) {
      cut++;
      return;
    }
    out += text;
    out += '\n';
  };
  // The last line of each text, counted from 0 (none: npos).
  std::size_t new_size = old_all.size();
  for (const auto& c : changes) new_size = new_size - c.old_lines.size() + c.new_lines.size();
  const std::size_t npos = static_cast<std::size_t>(-1);
  const std::size_t old_last = ends.old_text && !old_all.empty() ? old_all.size() - 1 : npos;
  const std::size_t new_last = ends.new_text && new_size ? new_size - 1 : npos;
  // A line, and the marker when it is an unterminated last line (old_at, new_at: its numbers in
  // the texts it belongs to; npos where it belongs to one only).
  auto emit = [&](char mark, std::string_view line, std::size_t old_at, std::size_t new_at) {
    std::string text(1, mark);
    text += bare(line);
    add(text);
    if ((old_at != npos && old_at == old_last) || (new_at != npos && new_at == new_last)) add("\\ No newline at end of file");
  };
  long long delta = 0;  // new line number minus old, before the current group
  for (std::size_t i = 0; i < changes.size();) {
    std::size_t j = i;  // the group: changes whose context touches
    while (j + 1 < changes.size() &&
           changes[j + 1].first <= changes[j].first + changes[j].old_lines.size() + 2 * context)
      j++;
    const std::size_t from = changes[i].first >= context ? changes[i].first - context : 0;
    const std::size_t to = std::min(old_all.size(), changes[j].first + changes[j].old_lines.size() + context);
    std::size_t old_count = to - from, new_count = old_count;
    for (std::size_t k = i; k <= j; k++) new_count = new_count - changes[k].old_lines.size() + changes[k].new_lines.size();
    const std::size_t new_from = static_cast<std::size_t>(static_cast<long long>(from) + delta);
    if (!cut && out.size() < cap) out += "@@ -" + range(from, old_count) + " +" + range(new_from, new_count) + " @@\n";
    std::size_t line = from;
    const auto in_new = [&](std::size_t old_line) { return static_cast<std::size_t>(static_cast<long long>(old_line) + delta); };
    for (std::size_t k = i; k <= j; k++) {
      for (; line < changes[k].first; line++) emit(' ', old_all[line], line, in_new(line));
      for (std::size_t m = 0; m < changes[k].old_lines.size(); m++) emit('-', changes[k].old_lines[m], line + m, npos);
      for (std::size_t m = 0; m < changes[k].new_lines.size(); m++) emit('+', changes[k].new_lines[m], npos, in_new(line) + m);
      line += changes[k].old_lines.size();
      delta += static_cast<long long>(changes[k].new_lines.size()) - static_cast<long long>(changes[k].old_lines.size());
    }
    for (; line < to; line++) emit(' ', old_all[line], line, in_new(line));
    i = j + 1;
  }
  if (cut) out += "[… " + std::to_string(cut) + " more diff lines not shown]\n";
  return out;
}

}  // namespace filetool
