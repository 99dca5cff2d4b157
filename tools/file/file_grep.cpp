// file_grep: lines matching a regular expression. `file_grep --rg` drives ripgrep (the .meta
// variant when rg is installed); plain `file_grep` walks the tree itself. Same output either way.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fsutil.hpp"
#include "glob.hpp"
#include "grep.hpp"
#include "tool.hpp"

using namespace filetool;

namespace {

bool wild(std::string_view s) { return s.find_first_of("*?[{") != std::string_view::npos; }

Query parse(const tool::Args& args) {
  Query q;
  q.pattern = args.string("pattern");
  if (q.pattern.empty()) throw tool::Error("invalid pattern: empty");
  q.root = tool::absolute(args.opt_string("path").value_or("."));
  q.context = static_cast<int>(args.opt_int("context", 0, 20).value_or(0));
  q.ignore_case = args.flag("ignore_case", false);
  const std::string mode = args.opt_string("output").value_or("content");
  if (mode == "content") q.mode = Mode::content;
  else if (mode == "files") q.mode = Mode::files;
  else if (mode == "count") q.mode = Mode::count;
  else throw tool::Error("invalid output: " + mode + "; must be content, files or count");
  // `src/**/*.cpp`: the directories join the path, the last component filters file names;
  // `src/*.cpp` the same for the files directly in src.
  q.glob = args.opt_string("glob").value_or("");
  if (q.glob.find('/') != std::string::npos) {
    const auto parts = components(q.glob);
    std::size_t i = 0;
    std::string dirs;
    while (i + 1 < parts.size() && !wild(parts[i])) dirs += "/" + std::string(parts[i++]);
    if (parts.empty() || (i + 1 < parts.size() && !(i + 2 == parts.size() && parts[i] == "**")))
      throw tool::Error("invalid glob: " + q.glob + "; a glob matches file names (e.g. *.cpp); put directories in path");
    q.root = tool::absolute(q.root + dirs);
    q.shallow = i + 1 == parts.size();
    q.glob = std::string(parts.back());
    if (q.glob == "**") q.shallow = false, q.glob.clear();  // `src/**`: every file below src
  }
  if (q.glob == "*") q.glob.clear();

  struct stat st {};
  if (::stat(q.root.c_str(), &st) != 0) fail(errno, q.root);
  if (S_ISREG(st.st_mode)) {
    q.root_is_file = true;
    const int fd = ::open(q.root.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(errno, q.root);
    char head[8192];
    const ssize_t n = ::read(fd, head, sizeof head);
    ::close(fd);
    if (n > 0 && std::memchr(head, '\0', static_cast<std::size_t>(n)))
      throw tool::Error("binary file (" + human_size(st.st_size) + "): " + shown(q.root) + "; file_grep searches text files");
  } else if (S_ISDIR(st.st_mode)) {
    readable_dir(q.root);
  } else {
    throw tool::Error("not a regular file or directory: " + shown(q.root));
  }
  return q;
}

}  // namespace

int main(int argc, char** argv) {
  const bool rg = argc > 1 && std::strcmp(argv[1], "--rg") == 0;
  return tool::run([&](const tool::Args& args) {
    const Query q = parse(args);
    Collector out(q.mode);
    if (rg) grep_rg(q, out);
    else grep_walk(q, out);
    return out.format(q);
  });
}
