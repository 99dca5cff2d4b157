// codeintel: the outline of a source file (its symbols, nested by scope) or the definitions
// matching a name under a directory, from Universal Ctags.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ctags.hpp"
#include "tool.hpp"

namespace {

using codeintel::Tag;

/// Lines shown at most, and about this many bytes.
constexpr std::size_t max_lines = 200, max_bytes = 8000;  // the engine keeps 8192 bytes of a result whole

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string cwd() {
  std::vector<char> buf(4096);
  return ::getcwd(buf.data(), buf.size()) ? std::string(buf.data()) : std::string();
}

std::string shown(const std::string& path) {
  const std::string here = cwd();
  if (!here.empty() && path.size() > here.size() && path.compare(0, here.size(), here) == 0 && path[here.size()] == '/')
    return path.substr(here.size() + 1);
  return path;
}

/// How well `name` matches the query (lower is better); -1: not at all.
int rank(const std::string& name, const std::string& query, const std::string& lquery) {
  if (name == query) return 0;
  const std::string l = lower(name);
  if (l == lquery) return 1;
  if (l.rfind(lquery, 0) == 0) return 2;
  return l.find(lquery) != std::string::npos ? 3 : -1;
}

struct Output {
  std::vector<std::string> lines;
  std::string text(const std::string& what) const {
    std::string out;
    std::size_t n = 0;
    for (; n < lines.size() && n < max_lines && out.size() + lines[n].size() < max_bytes; n++) out += lines[n] + "\n";
    if (n < lines.size()) out += "… " + std::to_string(lines.size() - n) + " more " + what + " not shown\n";
    return out;
  }
};

/// ctags' names of anonymous scopes (`__anon4bea42b30111`) as `(anonymous)`.
std::string readable(std::string scope) {
  for (auto at = scope.find("__anon"); at != std::string::npos; at = scope.find("__anon", at + 1)) {
    auto end = at + 6;
    while (end < scope.size() && std::isxdigit(static_cast<unsigned char>(scope[end]))) end++;
    scope.replace(at, end - at, "(anonymous)");
  }
  return scope;
}

std::string describe(const Tag& t, bool with_scope) {
  std::string s = t.kind + " " + (with_scope && !t.scope.empty() ? readable(t.scope) + "::" : "") + t.name;
  if (!t.signature.empty()) s += t.signature;
  return s;
}

/// The outline: each tag under the innermost earlier tag whose lines hold it and whose scope it
/// extends (ctags gives `end` for definitions with a body).
std::vector<std::string> outline(std::vector<Tag> tags) {
  std::stable_sort(tags.begin(), tags.end(), [](const Tag& a, const Tag& b) {
    return a.line != b.line ? a.line < b.line : a.scope.size() < b.scope.size();
  });
  std::vector<std::string> lines;
  std::vector<const Tag*> open;
  for (const auto& t : tags) {
    while (!open.empty()) {
      const Tag& top = *open.back();
      const bool holds = t.line <= std::max(top.end, top.line) && t.scope.size() > top.scope.size() &&
                         t.scope.size() >= top.name.size() &&
                         t.scope.compare(t.scope.size() - top.name.size(), top.name.size(), top.name) == 0;
      if (holds) break;
      open.pop_back();
    }
    lines.push_back(std::string(2 * open.size(), ' ') + describe(t, false) + "  :" + std::to_string(t.line));
    open.push_back(&t);
  }
  return lines;
}

}  // namespace

int main() {
  return tool::run([](const tool::Args& args) {
    const std::string given = args.string("path");
    const std::string path = tool::absolute(given);
    const auto query = args.opt_string("query");
    const auto kind = args.opt_string("kind");
    if (query && query->find_first_not_of(" \t\n") == std::string::npos) throw tool::Error("invalid query: empty; give a symbol name or part of one");
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw tool::Error("cannot read " + given + ": " + std::strerror(errno));
    const bool dir = S_ISDIR(st.st_mode);
    if (!dir && !S_ISREG(st.st_mode)) throw tool::Error(given + " is neither a file nor a directory");
    if (dir && !query)
      throw tool::Error("missing argument: query (" + given + " is a directory: give a symbol name to search it, or a file for its outline)");
    // Opened, not access(2): Landlock answers only to opening.
    if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (dir ? O_DIRECTORY : 0)); fd >= 0) ::close(fd);
    else throw tool::Error("cannot read " + given + ": " + std::strerror(errno));
    const std::string lquery = query ? lower(*query) : "", lkind = kind ? lower(*kind) : "";
    const auto keep = [&](const Tag& t) {
      return (!kind || lower(t.kind) == lkind) && (!query || rank(t.name, *query, lquery) >= 0);
    };
    codeintel::Scan s = codeintel::scan(path, dir, keep);
    // A scan cut short says so, whatever it found: "no definitions" alone would be taken as final.
    const std::string incomplete = s.cut ? "\n(incomplete: " + s.why + ")" : "";
    std::string out;
    Output o;
    if (!query && !kind) {
      if (s.tags.empty())
        return "no symbols in " + given + " (ctags knows no definitions there, or not its language)" + incomplete;
      out = shown(path) + ": " + std::to_string(s.tags.size()) + " symbols\n";
      o.lines = outline(s.tags);
    } else {
      std::stable_sort(s.tags.begin(), s.tags.end(), [&](const Tag& a, const Tag& b) {
        const int ra = query ? rank(a.name, *query, lquery) : 0, rb = query ? rank(b.name, *query, lquery) : 0;
        return ra != rb ? ra < rb : a.path != b.path ? a.path < b.path : a.line < b.line;
      });
      if (s.tags.empty())
        return "no definitions" + (query ? " matching `" + *query + "`" : "") + (kind ? " of kind " + *kind : "") + " in " +
               given + incomplete;
      out = std::to_string(s.tags.size()) + " definitions" + (query ? " matching `" + *query + "`" : "") +
            (kind ? " of kind " + *kind : "") + ":\n";
      for (const auto& t : s.tags) {
        const std::string p = t.path.empty() || t.path.front() != '/' ? t.path : shown(t.path);
        o.lines.push_back(shown(p) + ":" + std::to_string(t.line) + ": " + describe(t, true));
      }
    }
    out += o.text(query ? "definitions" : "symbols");
    if (s.cut) out += "(incomplete: " + s.why + ")\n";
    return out;
  });
}
