// file_glob: files whose path matches a glob, newest first, .gitignore honoured. See file_glob.meta.

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "fsutil.hpp"
#include "glob.hpp"
#include "tool.hpp"
#include "walk.hpp"

using namespace filetool;

namespace {

constexpr std::size_t max_paths = 1000;
constexpr std::size_t max_bytes = 7 * 1024;  // under the 8192 bytes the engine keeps of a result (§8.3.4)

bool wild(std::string_view s) { return s.find_first_of("*?[{") != std::string_view::npos; }

std::string call(const tool::Args& args) {
  std::string pattern = args.string("pattern");
  if (pattern.empty()) throw tool::Error("invalid pattern: empty; e.g. **/*.cpp");
  std::string root = tool::absolute(args.opt_string("path").value_or("."));
  // An absolute pattern, or one that starts with plain directories, starts the walk there.
  if (pattern[0] == '/') root = "/";
  auto parts = components(pattern);
  std::size_t literal = 0;
  while (literal + 1 < parts.size() && !wild(parts[literal])) literal++;
  for (std::size_t i = 0; i < literal; i++) root += (root.back() == '/' ? "" : "/") + std::string(parts[i]);
  root = tool::absolute(root);
  std::string rest;
  for (std::size_t i = literal; i < parts.size(); i++) {
    if (parts[i] == ".." && i == literal)  // the last part, no wildcard before it
      throw tool::Error("invalid pattern: " + pattern + " names a directory, not files; e.g. " + pattern + "/*");
    if (parts[i] == "..") throw tool::Error("invalid pattern: .. after a wildcard; put the directory in path");
    rest += (i > literal ? "/" : "") + std::string(parts[i]);
  }

  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) {
    if (errno == ENOENT) throw tool::Error("directory not found: " + shown(root));
    fail(errno, root);
  }
  if (!S_ISDIR(st.st_mode)) throw tool::Error("not a directory: " + shown(root) + "; path must be a directory to search");
  readable_dir(root);

  const Glob g(rest);
  struct Hit {
    std::string path;
    struct timespec mtime;
  };
  std::vector<Hit> hits;
  walk(root, [&](std::string_view rel) { return g.may_match_under(rel); },
       [&](const Entry& e) {
         if (!g.match(e.rel)) return;
         struct stat s {};
         if (::lstat(e.abs.c_str(), &s) != 0) return;
         hits.push_back({listed(shown(e.abs)), s.st_mtim});
       });
  if (hits.empty()) return "no files match " + pattern + " in " + shown(root);
  std::sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) {
    if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec > b.mtime.tv_sec;
    if (a.mtime.tv_nsec != b.mtime.tv_nsec) return a.mtime.tv_nsec > b.mtime.tv_nsec;
    return a.path < b.path;
  });
  std::string out;
  std::size_t shown_paths = 0;
  for (; shown_paths < hits.size() && shown_paths < max_paths; shown_paths++) {
    if (out.size() + hits[shown_paths].path.size() + 1 > max_bytes) break;
    out += hits[shown_paths].path + '\n';
  }
  if (shown_paths < hits.size())
    out += "[… " + std::to_string(hits.size() - shown_paths) + " more files not shown (" + std::to_string(hits.size()) +
           " in all); narrow the pattern or the path]\n";
  return out;
}

}  // namespace

int main() { return tool::run(call); }
