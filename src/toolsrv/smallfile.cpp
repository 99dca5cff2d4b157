#include "toolsrv/smallfile.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "toolsrv/fd.hpp"

namespace toolsrv {

SmallFile read_small_file(int dir_fd, const char* path, int flags, std::size_t max) {
  SmallFile f;
  UniqueFd fd(::openat(dir_fd, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | flags));
  struct stat st {};
  if (!fd) {
    f.fail = SmallFile::Fail::open;
    f.error = errno;
    return f;
  }
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    f.fail = SmallFile::Fail::not_regular;
    return f;
  }
  if (static_cast<std::uint64_t>(st.st_size) > max) {
    f.fail = SmallFile::Fail::too_large;
    f.size = static_cast<std::uint64_t>(st.st_size);
    return f;
  }
  f.text.resize(std::min(static_cast<std::size_t>(st.st_size), max) + 1);
  std::size_t got = 0;
  for (;;) {
    if (got == f.text.size()) {
      if (f.text.size() > max) break;
      f.text.resize(std::min(2 * f.text.size(), max + 1));
    }
    const auto n = ::read(fd.get(), f.text.data() + got, f.text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      f.fail = SmallFile::Fail::read;
      f.error = errno;
      f.text.clear();
      return f;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > max) {
    f.fail = SmallFile::Fail::too_large;
    f.text.clear();
    return f;
  }
  f.text.resize(got);
  return f;
}

}  // namespace toolsrv
