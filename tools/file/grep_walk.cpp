// file_grep's own engine: the tree walk of file_glob and POSIX extended regular expressions
// (regcomp(3) with REG_NEWLINE, so `.` and `[^x]` stay within a line), with `\d` and `\D`
// added because models write them.

#include <fcntl.h>
#include <regex.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "fsutil.hpp"
#include "glob.hpp"
#include "grep.hpp"
#include "tool.hpp"
#include "walk.hpp"

namespace filetool {

namespace {

// `\d` → `[0-9]`, `\D` → `[^0-9]` outside bracket expressions.
std::string to_ere(std::string_view p) {
  std::string out;
  bool bracket = false;
  for (std::size_t i = 0; i < p.size(); i++) {
    const char c = p[i];
    if (bracket) {
      out += c;
      if (c == ']' && !(out.size() >= 2 && (out[out.size() - 2] == '[' || (out.size() >= 3 && out[out.size() - 2] == '^' && out[out.size() - 3] == '['))))
        bracket = false;
      continue;
    }
    if (c == '[') bracket = true;
    if (c == '\\' && i + 1 < p.size()) {
      if (p[i + 1] == 'd') { out += "[0-9]"; i++; continue; }
      if (p[i + 1] == 'D') { out += "[^0-9]"; i++; continue; }
      out += c;
      out += p[++i];
      continue;
    }
    out += c;
  }
  return out;
}

struct Regex {
  regex_t re{};
  explicit Regex(const Query& q) {
    const int rc = ::regcomp(&re, to_ere(q.pattern).c_str(), REG_EXTENDED | REG_NEWLINE | (q.ignore_case ? REG_ICASE : 0));
    if (rc != 0) {
      char buf[256];
      ::regerror(rc, &re, buf, sizeof buf);
      throw tool::Error("invalid regex: " + std::string(buf) + " (POSIX extended syntax)");
    }
  }
  ~Regex() { ::regfree(&re); }
};

constexpr std::size_t max_walk_bytes = std::size_t{256} << 20;  // a file searched whole, at most

bool read_text(const std::string& abs, std::string& buf) {
  const int fd = ::open(abs.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st {};
  // A file over max_walk_bytes is skipped, as a binary one (the whole file is held to search
  // it; rg streams it): a sparse 2 GB file took 4.7 GB. One that grows meanwhile is read no
  // further than the cap.
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > max_walk_bytes) {
    ::close(fd);
    return false;
  }
  buf.resize(static_cast<std::size_t>(st.st_size) + 1);
  std::size_t got = 0;
  for (;;) {
    if (got + 1 >= buf.size()) {
      if (buf.size() > max_walk_bytes) break;
      buf.resize(std::min(buf.size() * 2, max_walk_bytes + 1));
    }
    const ssize_t r = ::read(fd, buf.data() + got, buf.size() - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  buf.resize(got);
  if (std::memchr(buf.data(), '\0', got)) return false;  // a NUL anywhere: binary, skipped
  // A CRLF line ends where its CR starts, as under rg --crlf: `$` matches before it.
  if (buf.find("\r\n") != std::string::npos) {
    std::size_t w = 0;
    for (std::size_t r = 0; r < buf.size(); r++)
      if (!(buf[r] == '\r' && r + 1 < buf.size() && buf[r + 1] == '\n')) buf[w++] = buf[r];
    buf.resize(w);
  }
  return true;
}

void search(const Query& q, const Regex& re, const std::string& abs, std::string& buf, Collector& out) {
  if (!read_text(abs, buf)) return;
  FileHits hits;
  const char* base = buf.c_str();
  const std::size_t size = buf.size();
  std::vector<std::size_t> starts;  // line starts, for context lines
  if (q.context > 0 && q.mode == Mode::content) {
    starts.push_back(0);
    for (const char* p = base; (p = static_cast<const char*>(std::memchr(p, '\n', base + size - p))) && p + 1 < base + size; p++)
      starts.push_back(static_cast<std::size_t>(p + 1 - base));
  }
  auto line_text = [&](std::size_t n) {  // 1-based
    const std::size_t b = starts[n - 1], e = n < starts.size() ? starts[n] - 1 : size;
    std::string_view l(base + b, e - b);
    if (!l.empty() && l.back() == '\n') l.remove_suffix(1);
    return l;
  };
  std::size_t line = 1, counted_to = 0;
  std::vector<std::size_t> matched;  // line numbers of the kept matches
  regmatch_t m[1];
  // Each pass starts a line: none starts at the end (after a last newline, or in an empty file),
  // so a pattern that matches the empty string finds no line past the last, as rg does.
  for (std::size_t pos = 0; pos < size;) {
    if (::regexec(&re.re, base + pos, 1, m, pos == 0 || base[pos - 1] == '\n' ? 0 : REG_NOTBOL) != 0) break;
    const std::size_t at = pos + static_cast<std::size_t>(m[0].rm_so);
    if (at == size && base[size - 1] == '\n') break;  // the empty string after the last line
    const char* scan = base + counted_to;
    while (const char* nl = static_cast<const char*>(std::memchr(scan, '\n', base + at - scan))) line++, scan = nl + 1;
    const std::size_t bol = static_cast<std::size_t>(scan - base);
    const char* eol_p = static_cast<const char*>(std::memchr(base + at, '\n', size - at));
    const std::size_t eol = eol_p ? static_cast<std::size_t>(eol_p - base) : size;
    hits.matches++;
    if (q.mode == Mode::files) break;
    if (q.mode == Mode::content && hits.matches <= max_matches + 1) {
      matched.push_back(line);  // one past the cap: where the context of the last kept one stops
      if (q.context == 0 && hits.matches <= max_matches) hits.lines.push_back({line, true, cut_line(std::string_view(base + bol, eol - bol))});
    }
    if (eol >= size) break;
    counted_to = eol + 1;
    line++;
    pos = eol + 1;
  }
  if (q.context > 0 && !matched.empty()) {
    const std::size_t c = static_cast<std::size_t>(q.context), total = starts.size();
    std::size_t next = 1;  // the first line not yet emitted
    for (std::size_t i = 0; i < matched.size() && i < max_matches; i++) {
      const std::size_t n = matched[i];
      for (std::size_t k = std::max(next, n > c ? n - c : 1); k < n; k++) hits.lines.push_back({k, false, cut_line(line_text(k))});
      hits.lines.push_back({n, true, cut_line(line_text(n))});
      next = n + 1;
      const std::size_t until = std::min(total, n + c);
      const std::size_t stop = i + 1 < matched.size() ? std::min(until, matched[i + 1] - 1) : until;
      for (std::size_t k = next; k <= stop; k++) hits.lines.push_back({k, false, cut_line(line_text(k))});
      next = std::max(next, stop + 1);
    }
  }
  out.add(shown(abs), std::move(hits));
}

}  // namespace

void grep_walk(const Query& q, Collector& out) {
  const Regex re(q);
  std::string buf;
  if (q.root_is_file) {
    search(q, re, q.root, buf, out);
    return;
  }
  const Glob names(q.glob.empty() ? "*" : q.glob);
  walk(q.root, [&](std::string_view) { return !q.shallow; },
       [&](const Entry& e) {
         if (e.type != DT_REG) return;
         const auto slash = e.rel.rfind('/');
         if (!q.glob.empty() && !names.match(slash == std::string_view::npos ? e.rel : e.rel.substr(slash + 1))) return;
         search(q, re, e.abs, buf, out);
       });
}

}  // namespace filetool
