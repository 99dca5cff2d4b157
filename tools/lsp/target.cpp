#include "target.hpp"

#include <unistd.h>

#include <algorithm>

#include "client.hpp"

namespace lsp {

namespace {

std::string cwd() {
  std::vector<char> buf(4096);
  return ::getcwd(buf.data(), buf.size()) ? std::string(buf.data()) : std::string();
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }

/// Byte offset of the first `chars` code points of `line`.
std::size_t bytes_of_chars(std::string_view line, std::size_t chars) {
  std::size_t i = 0;
  for (std::size_t c = 0; c < chars && i < line.size(); c++) {
    i++;
    while (i < line.size() && (static_cast<unsigned char>(line[i]) & 0xC0) == 0x80) i++;
  }
  return i;
}

std::size_t chars_in(std::string_view line) {
  std::size_t n = 0;
  for (unsigned char c : line) n += (c & 0xC0) != 0x80;
  return n;
}

std::string trimmed(std::string_view s, std::size_t cap = 200) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  if (s.size() <= cap) return std::string(s);
  std::size_t cut = cap;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) cut--;
  return std::string(s.substr(0, cut)) + " …";
}

}  // namespace

std::string shown_path(const std::string& path) {
  const std::string here = cwd();
  if (!here.empty() && path.size() > here.size() && path.compare(0, here.size(), here) == 0 && path[here.size()] == '/')
    return path.substr(here.size() + 1);
  return path;
}

std::string Target::where() const {
  return shown + ":" + std::to_string(line + 1) + ":" + std::to_string(chars_in(source->line(line).substr(0, byte)) + 1);
}

json Target::params() const {
  return {{"textDocument", {{"uri", uri_of(path)}}},
          {"position", {{"line", line}, {"character", utf16_of_bytes(source->line(line), byte)}}}};
}

Target locate(const tool::Args& args) {
  Target t;
  const std::string given = args.string("path");
  t.path = tool::absolute(given);
  t.shown = shown_path(t.path);
  const auto line = args.opt_int("line", 1, 100'000'000);
  const auto symbol = args.opt_string("symbol");
  const auto column = args.opt_int("column", 1, 1'000'000);
  if (!line) throw tool::Error("missing argument: line (1-based, the line where the symbol occurs)");
  if (!symbol && !column) throw tool::Error("missing argument: symbol (the name on that line) or column");
  if (symbol && symbol->empty()) throw tool::Error("invalid symbol: empty; give the name as it is written on the line");
  t.source = std::make_unique<Source>(t.path, t.shown);
  t.server = server_for(t.path);
  t.root = project_root(t.path, cwd());
  const std::size_t lines = t.source->lines();
  if (static_cast<std::size_t>(*line) > lines)
    throw tool::Error("line " + std::to_string(*line) + " is past the end of " + t.shown + " (" + std::to_string(lines) + " lines)");
  t.line = static_cast<std::size_t>(*line - 1);
  if (symbol) {
    // The model's line numbers are sometimes off by a little: the nearest line within 3 that has it.
    std::optional<std::size_t> at;
    for (long d = 0; d <= 3 && !at; d++)
      for (long cand : {static_cast<long>(t.line) - d, static_cast<long>(t.line) + d}) {
        if (cand < 0 || static_cast<std::size_t>(cand) >= lines) continue;
        if (auto a = find_word(t.source->line(static_cast<std::size_t>(cand)), *symbol)) {
          if (d > 0)
            t.note = "`" + *symbol + "` is not on line " + std::to_string(*line) + "; used line " + std::to_string(cand + 1) + ".";
          t.line = static_cast<std::size_t>(cand);
          at = a;
          break;
        }
      }
    if (!at)
      throw tool::Error("`" + *symbol + "` does not occur on line " + std::to_string(*line) + " of " + t.shown + " (nor within 3 lines), which reads: " +
                        trimmed(t.source->line(t.line)));
    t.byte = *at;
  } else {
    const std::string_view text = t.source->line(t.line);
    if (static_cast<std::size_t>(*column) > chars_in(text) + 1)
      throw tool::Error("column " + std::to_string(*column) + " is past the end of line " + std::to_string(*line) + " (" +
                        std::to_string(chars_in(text)) + " characters); prefer symbol to column");
    t.byte = bytes_of_chars(text, static_cast<std::size_t>(*column - 1));
  }
  const std::string_view text = t.source->line(t.line);
  std::size_t b = t.byte, e = t.byte;
  while (b > 0 && word_char(text[b - 1])) b--;
  while (e < text.size() && word_char(text[e])) e++;
  t.word = std::string(text.substr(b, e - b));
  return t;
}

json ask(const Target& t, const std::string& method, json params, bool ready, std::string& note) {
  const json r = ask_bridge(t.server, t.root, {{"op", "request"}, {"path", t.path}, {"method", method}, {"params", params}, {"ready", ready}});
  if (r.contains("note") && r["note"].is_string()) note += (note.empty() ? "" : "\n") + r["note"].get<std::string>();
  return r.value("result", json(nullptr));
}

const Source* Lines::file(const std::string& path) {
  auto it = files_.find(path);
  if (it == files_.end()) {
    std::unique_ptr<Source> s;
    try {
      s = std::make_unique<Source>(path, path);
    } catch (const std::exception&) {
    }
    it = files_.emplace(path, std::move(s)).first;
  }
  return it->second.get();
}

std::string Lines::show(const std::string& path, std::size_t line, std::size_t utf16) {
  const Source* s = file(path);
  std::string out = shown_path(path) + ":" + std::to_string(line + 1) + ":";
  if (!s) return out + std::to_string(utf16 + 1);
  const std::string_view text = s->line(line);
  return out + std::to_string(chars_of_utf16(text, utf16) + 1) + ": " + trimmed(text);
}

std::vector<Spot> spots(const json& result) {
  std::vector<Spot> out;
  const auto add = [&](const json& loc) {
    if (!loc.is_object()) return;
    const bool link = loc.contains("targetUri");
    const json& uri = link ? loc["targetUri"] : loc.value("uri", json());
    const json& range = link ? loc.value("targetSelectionRange", loc.value("targetRange", json())) : loc.value("range", json());
    if (!uri.is_string() || !range.is_object() || !range.contains("start")) return;
    const auto path = path_of(uri);
    const json& start = range["start"];
    if (!path || !start.value("line", json()).is_number_unsigned() || !start.value("character", json()).is_number_unsigned()) return;
    out.push_back({*path, start["line"].get<std::size_t>(), start["character"].get<std::size_t>()});
  };
  if (result.is_array())
    for (const auto& l : result) add(l);
  else
    add(result);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string capped(const std::vector<std::string>& lines, std::size_t cap, std::size_t bytes, const std::string& what) {
  std::string out;
  std::size_t n = 0;
  for (; n < lines.size() && n < cap && out.size() + lines[n].size() < bytes; n++) out += lines[n] + "\n";
  if (n < lines.size()) out += "… " + std::to_string(lines.size() - n) + " more " + what + " not shown\n";
  return out;
}

}  // namespace lsp
