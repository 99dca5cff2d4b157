#include "target.hpp"

#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <memory>

#include "fsutil.hpp"
#include "tool.hpp"

namespace filetool {

Target resolve_target(const std::string& abs) {
  Target t{abs, std::nullopt};
  struct stat lst {};
  if (::lstat(abs.c_str(), &lst) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return t;
    fail(errno, abs);
  }
  if (S_ISLNK(lst.st_mode)) {
    std::unique_ptr<char, void (*)(void*)> real(::realpath(abs.c_str(), nullptr), ::free);
    if (!real) {
      if (errno == ENOENT) throw tool::Error("dangling symbolic link: " + shown(abs) + "; its target does not exist");
      fail(errno, abs);
    }
    t.abs = real.get();
  }
  struct stat st {};
  if (::stat(t.abs.c_str(), &st) != 0) {
    if (errno == ENOENT) return t;
    fail(errno, t.abs);
  }
  if (S_ISDIR(st.st_mode)) throw tool::Error("is a directory: " + shown(abs) + "; give the path of a file");
  if (!S_ISREG(st.st_mode)) throw tool::Error("not a regular file: " + shown(abs));
  t.st = st;
  return t;
}

void make_parents(const std::string& abs) {
  struct stat parent {};
  if (::stat(abs.substr(0, abs.rfind('/')).c_str(), &parent) == 0 && S_ISDIR(parent.st_mode)) return;
  for (std::size_t slash = abs.find('/', 1); slash != std::string::npos; slash = abs.find('/', slash + 1)) {
    const std::string dir = abs.substr(0, slash);
    if (::mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST) {
      struct stat st {};
      if (::stat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
        throw tool::Error("not a directory: " + shown(dir) + " (a file is in the way of " + shown(abs) + ")");
      continue;
    }
    if (errno == EACCES) {
      struct stat st {};
      if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;  // exists, not ours to create
    }
    fail(errno, dir, "cannot create the directory");
  }
}

mode_t new_file_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace filetool
