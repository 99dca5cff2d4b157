#include "walk.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstring>
#include <memory>

#include "gitignore.hpp"

namespace filetool {

namespace {

struct Walker {
  Ignores ignores;
  const std::function<bool(std::string_view)>& descend;
  const std::function<void(const Entry&)>& visit;
  std::string abs;
  std::size_t root_len;

  void dir() {
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(abs.c_str()), ::closedir);
    if (!d) return;
    ignores.enter(abs);
    const std::size_t len = abs.size();
    while (const dirent* e = ::readdir(d.get())) {
      const char* name = e->d_name;
      if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
      if (std::strcmp(name, ".git") == 0) continue;
      abs.resize(len);
      if (abs.back() != '/') abs += '/';
      abs += name;
      unsigned char type = e->d_type;
      if (type == DT_UNKNOWN) {
        struct stat st {};
        if (::lstat(abs.c_str(), &st) != 0) continue;
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISLNK(st.st_mode) ? DT_LNK : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
      }
      const bool is_dir = type == DT_DIR;
      if (ignores.ignored(abs, is_dir)) continue;
      const std::string_view rel = std::string_view(abs).substr(root_len);
      if (is_dir) {
        if (descend(rel)) dir();
      } else {
        visit(Entry{abs, rel, type});
      }
    }
    abs.resize(len);
    ignores.leave();
  }
};

}  // namespace

void walk(const std::string& root, const std::function<bool(std::string_view rel)>& descend,
          const std::function<void(const Entry&)>& visit) {
  Walker w{Ignores(root), descend, visit, root, root == "/" ? 1 : root.size() + 1};
  w.dir();
}

}  // namespace filetool
