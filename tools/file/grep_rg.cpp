// file_grep through ripgrep: rg does the walking and matching with the flags that make it skip
// what the own engine skips (.gitignore files read everywhere, .git, binary files; no .ignore
// or global excludes; hidden files searched), and its `--null` output is parsed into the same
// Collector, so both engines print the same thing. rg's order is not stable across threads:
// the Collector sorts.

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>

#include "fsutil.hpp"
#include "grep.hpp"
#include "tool.hpp"

extern char** environ;

namespace filetool {

namespace {

// rg's notices about a binary file, on stdout among the records: `<path>: WARNING: stopped
// searching binary file after match (found "\0" byte around offset <n>)` after the lines it
// printed before the NUL (a NUL past its first buffer), `<path>: binary file matches (found …)`
// instead of the lines of a file named on its command line. They carry no NUL.
constexpr std::string_view binary_notices[] = {": WARNING: stopped searching binary file after match (found ",
                                               ": binary file matches (found "};

/// The path a binary-file notice names, or nullopt when `line` is none.
std::optional<std::string_view> binary_notice(std::string_view line) {
  if (line.ends_with('\r')) line.remove_suffix(1);
  if (!line.ends_with(")") || line.find('\0') != std::string_view::npos) return std::nullopt;
  for (const auto notice : binary_notices)
    if (const auto at = line.find(notice); at != std::string_view::npos) return line.substr(0, at);
  return std::nullopt;
}

struct Parser {
  const Query& q;
  Collector& out;
  bool strip_dot;
  std::string path;
  FileHits hits;

  std::string clean(std::string_view p) const {
    if (strip_dot && p.substr(0, 2) == "./") p.remove_prefix(2);
    return std::string(p);
  }
  void flush() {
    // Past the cap, the context before the first match not kept is not the kept matches' context.
    std::size_t last_match = 0;
    for (const auto& l : hits.lines)
      if (l.match) last_match = l.number;
    while (!hits.lines.empty() && !hits.lines.back().match && hits.lines.back().number > last_match + static_cast<std::size_t>(q.context))
      hits.lines.pop_back();
    if (!path.empty()) out.add(std::move(path), std::move(hits));
    path.clear();
    hits = {};
  }
  // One record: a line (content; count, which files mode runs as), or a notice.
  void record(std::string_view r) {
    if (r.ends_with('\n')) r.remove_suffix(1);  // the last one, taken whole at the end
    const auto nul = r.find('\0');
    if (nul == std::string_view::npos) {  // "--" separators, notices
      // A binary file is skipped, as the own engine skips it: the lines rg printed before it met
      // the NUL go (they are the record just before; rg writes each file's output whole).
      if (const auto p = binary_notice(r); p && clean(*p) == path) path.clear(), hits = {};
      return;
    }
    std::string p = clean(r.substr(0, nul));
    std::string_view rest = r.substr(nul + 1);
    if (q.mode != Mode::content) {
      const auto n = std::strtoull(std::string(rest).c_str(), nullptr, 10);
      if (n > 0) out.add(std::move(p), FileHits{q.mode == Mode::files ? 1 : n, {}});
      return;
    }
    std::size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') digits++;
    if (digits == 0 || digits == rest.size() || (rest[digits] != ':' && rest[digits] != '-')) return;
    if (p != path) flush(), path = std::move(p);
    const bool match = rest[digits] == ':';
    if (match) hits.matches++;
    if (hits.matches > max_matches) return;
    hits.lines.push_back({std::strtoull(std::string(rest.substr(0, digits)).c_str(), nullptr, 10), match,
                          cut_line(rest.substr(digits + 1))});
  }
};

/// Where the record that starts at `from` ends (its LF), npos when it is not whole yet. A line
/// record is `path NUL rest LF`: the path may hold a LF (a file name can), the rest cannot, so
/// its end is the first LF after the NUL; a record without a NUL is rg's `--` line between
/// context groups or a binary-file notice.
std::size_t record_end(const std::string& s, std::size_t from) {
  const auto lf = s.find('\n', from);
  if (lf == std::string::npos) return lf;
  const auto line = std::string_view(s).substr(from, lf - from);
  // With --crlf rg ends its separator `--\r\n` too.
  if (line == "--" || line == "--\r") return lf;
  if (binary_notice(line)) {
    // Or the first line of a file name made to read as one (`a: binary file matches (…)\nb`),
    // whose record goes on to its NUL: a notice only when no file has that name.
    const auto nul = s.find('\0', lf);
    if (nul == std::string::npos) return nul;  // told by what follows, or the output's end
    struct stat st {};
    if (::lstat(s.substr(from, nul - from).c_str(), &st) != 0) return lf;
  }
  const auto nul = s.find('\0', from);
  return nul == std::string::npos ? nul : s.find('\n', nul);
}

}  // namespace

void grep_rg(const Query& q, Collector& out) {
  const std::string where = shown(q.root);
  std::vector<std::string> args{"rg", "--no-config", "--null", "--no-heading", "--with-filename", "--line-number",
                                "--color", "never", "--no-require-git", "--hidden", "--glob", "!.git", "--no-ignore-dot",
                                "--no-ignore-global", "--no-ignore-exclude", "--no-messages", "--crlf"};
  if (q.ignore_case) args.push_back("--ignore-case");
  // Files mode is a count: with --files-with-matches rg lists a binary file whose NUL it met only
  // after a match, where --count leaves it out.
  if (q.mode != Mode::content) args.push_back("--count");
  if (q.mode == Mode::content && q.context > 0) args.insert(args.end(), {"--context", std::to_string(q.context)});
  if (!q.glob.empty()) args.insert(args.end(), {"--type-add", "sel:" + q.glob, "--type", "sel"});
  if (q.shallow) args.insert(args.end(), {"--max-depth", "1"});
  args.insert(args.end(), {"--regexp", q.pattern, "--", where});

  int o[2], e[2];
  if (::pipe2(o, O_CLOEXEC) != 0 || ::pipe2(e, O_CLOEXEC) != 0) throw tool::Error("cannot run rg: no pipes");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, o[1], 1);
  posix_spawn_file_actions_adddup2(&fa, e[1], 2);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  const int rc = ::posix_spawnp(&pid, "rg", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(o[1]);
  ::close(e[1]);
  if (rc != 0) {
    ::close(o[0]);
    ::close(e[0]);
    throw tool::Error("cannot run rg: " + std::string(std::strerror(rc)));
  }

  Parser parser{q, out, where == "."};
  std::string pending, err;
  std::vector<char> buf(1 << 16);
  pollfd fds[2] = {{o[0], POLLIN, 0}, {e[0], POLLIN, 0}};
  int open = 2;
  while (open > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (auto& f : fds) {
      if (f.fd < 0 || !(f.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t r = ::read(f.fd, buf.data(), buf.size());
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        ::close(f.fd);
        f.fd = -1;
        open--;
        continue;
      }
      if (f.fd == e[0]) {
        if (err.size() < 4096) err.append(buf.data(), static_cast<std::size_t>(r));
        continue;
      }
      pending.append(buf.data(), static_cast<std::size_t>(r));
      std::size_t from = 0;
      for (std::size_t at; (at = record_end(pending, from)) != std::string::npos; from = at + 1)
        parser.record(std::string_view(pending).substr(from, at - from));
      pending.erase(0, from);
    }
  }
  if (!pending.empty()) parser.record(pending);
  parser.flush();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  // 2 with nothing on stderr: only files it could not read (--no-messages), skipped as the own
  // engine skips them; the search itself went through.
  if (code <= 1 || (code == 2 && err.empty())) return;
  // rg's messages are several lines: the one that starts `error: ` says what is wrong ("error:
  // unclosed group"), and a hint may follow it ("Consider enabling PCRE2 …"). Else the first line.
  std::string_view line;
  for (std::size_t from = 0; from < err.size();) {
    const auto nl = err.find('\n', from);
    const auto l = std::string_view(err).substr(from, nl == std::string::npos ? std::string::npos : nl - from);
    if (!l.empty() && (l.starts_with("error: ") || line.empty())) line = l;
    if (nl == std::string::npos) break;
    from = nl + 1;
  }
  std::string last(line);
  if (last.rfind("error: ", 0) == 0) last.erase(0, 7);
  if (err.find("regex parse error") != std::string::npos)
    throw tool::Error("invalid regex: " + last + " (Rust regex syntax)");
  if (out.empty()) throw tool::Error("rg failed: " + (last.empty() ? "exit status " + std::to_string(code) : last));
}

}  // namespace filetool
