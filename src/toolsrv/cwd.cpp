#include "toolsrv/cwd.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <climits>
#include <cstdlib>

#include "toolsrv/paths.hpp"

namespace toolsrv {
namespace {

bool names(const std::string& path, dev_t dev, ino_t ino) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_dev == dev && st.st_ino == ino;
}

}  // namespace

p9::Result<HeldCwd> HeldCwd::open(const std::string& dir) {
  if (dir.empty() || dir.front() != '/') return p9::error("cwd must be absolute: " + dir);
  HeldCwd c;
  c.path = clean_path(dir);
  UniqueFd fd(::open(c.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) return p9::error("cwd: " + dir + ": not a directory");
  c.dev = st.st_dev;
  c.ino = st.st_ino;
  char real[PATH_MAX];
  if (!::realpath(c.path.c_str(), real) || !names(real, c.dev, c.ino)) {
    return p9::error("cwd: " + dir + ": changed while being set");
  }
  c.resolved = real;
  c.fd = std::make_shared<const UniqueFd>(std::move(fd));
  return c;
}

p9::Result<void> HeldCwd::check() const {
  if (!names(resolved, dev, ino) || (path != resolved && !names(path, dev, ino))) return p9::error("cwd changed since it was set: " + path);
  return {};
}

}  // namespace toolsrv
