#include "grep.hpp"

#include "fsutil.hpp"

namespace filetool {

std::string cut_line(std::string_view text) {
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  if (text.size() <= max_line_bytes) return std::string(text);
  std::size_t cut = max_line_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) cut--;
  return std::string(text.substr(0, cut)) + " … [line cut: " + std::to_string(text.size() - cut) + " more bytes]";
}

void Collector::add(std::string path, FileHits hits) {
  if (hits.matches == 0) return;
  // Only what sorts first can be printed: beyond the caps, the last file goes.
  if (!files_.empty() && mode_ == Mode::content && kept_matches_ >= max_matches && path > files_.rbegin()->first) {
    dropped_files_++, dropped_matches_ += hits.matches;
    return;
  }
  if (mode_ != Mode::content) hits.lines.clear();
  kept_matches_ += hits.matches;
  files_.emplace(std::move(path), std::move(hits));
  for (;;) {
    const auto& last = *files_.rbegin();
    const bool over = mode_ == Mode::content ? kept_matches_ - last.second.matches >= max_matches : files_.size() > max_files;
    if (files_.size() <= 1 || !over) break;
    dropped_files_++, dropped_matches_ += last.second.matches;
    kept_matches_ -= last.second.matches;
    files_.erase(std::prev(files_.end()));
  }
}

std::string Collector::format(const Query& q) const {
  if (files_.empty()) return "no matches for " + q.pattern + " in " + shown(q.root);
  std::string out;
  std::size_t printed = 0, files_printed = 0, total = dropped_matches_, total_files = dropped_files_ + files_.size();
  for (const auto& [path, hits] : files_) total += hits.matches;
  bool full = false;
  for (const auto& [name, hits] : files_) {
    if (full) break;
    const std::string path = listed(name);
    if (mode_ == Mode::files || mode_ == Mode::count) {
      const std::string line = mode_ == Mode::files ? path + "\n" : path + ":" + std::to_string(hits.matches) + "\n";
      if (files_printed >= max_files || out.size() + line.size() > max_bytes) {
        full = true;
        break;
      }
      out += line, files_printed++, printed += hits.matches;
      continue;
    }
    std::size_t prev = 0, file_printed = 0;
    for (const auto& l : hits.lines) {
      if (l.match && printed >= max_matches) {
        full = true;
        break;
      }
      std::string text;
      if (q.context > 0 && !out.empty() && (prev == 0 || l.number != prev + 1)) text += "--\n";
      text += path + (l.match ? ":" : "-") + std::to_string(l.number) + (l.match ? ":" : "-") + l.text + "\n";
      if (out.size() + text.size() > max_bytes) {
        full = true;
        break;
      }
      out += text;
      prev = l.number;
      if (l.match) printed++, file_printed++;
    }
    if (file_printed) files_printed++;
    if (file_printed < hits.matches) full = true;
  }
  if (printed < total) {
    if (mode_ == Mode::content)
      out += "[… " + std::to_string(total - printed) + " more matching lines not shown (" + std::to_string(total) + " in " +
             std::to_string(total_files) + " files); narrow the pattern, path or glob, or use output \"count\"]\n";
    else
      out += "[… " + std::to_string(total_files - files_printed) + " more files not shown (" + std::to_string(total_files) +
             " in all); narrow the pattern, path or glob]\n";
  } else if (mode_ == Mode::count) {
    out += "[" + std::to_string(total) + (total == 1 ? " matching line in " : " matching lines in ") + std::to_string(total_files) +
           (total_files == 1 ? " file]\n" : " files]\n");
  }
  return out;
}

}  // namespace filetool
