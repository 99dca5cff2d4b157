#include "toolsrv/tracee.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

namespace toolsrv::tracee {
namespace {

constexpr unsigned pidfd_thread = O_EXCL;  // PIDFD_THREAD (Linux 6.9)

// toolsrv's own root and mount namespace, stat'ed once (every guard thread shares them).
struct Ours {
  struct stat root {}, mnt {};
};
const Ours& ours() {
  static const Ours o = [] {
    Ours r;
    if (::stat("/", &r.root) != 0 || ::stat("/proc/self/ns/mnt", &r.mnt) != 0) r = Ours{};
    return r;
  }();
  return o;
}

// Whether `path` names the same file as `st`.
bool is_file(const std::string& path, const struct stat& st) {
  struct stat x {};
  return st.st_ino != 0 && ::stat(path.c_str(), &x) == 0 && x.st_dev == st.st_dev && x.st_ino == st.st_ino;
}

std::string proc(pid_t tid) { return "/proc/" + std::to_string(tid); }

}  // namespace

bool read(pid_t tid, std::uint64_t addr, void* out, std::size_t len) {
  if (len == 0) return true;
  iovec local{out, len};
  iovec remote{reinterpret_cast<void*>(addr), len};
  return ::process_vm_readv(tid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(len);
}

long read_string(pid_t tid, std::uint64_t addr, std::size_t max, long too_long, std::string& out) {
  constexpr std::size_t page = 4096;
  out.clear();
  if (addr == 0) return -EFAULT;
  char buf[page];
  while (out.size() < max) {
    const std::size_t n = std::min(page - addr % page, max - out.size());
    if (!read(tid, addr, buf, n)) return errno == EPERM ? -EACCES : -EFAULT;
    if (const void* nul = std::memchr(buf, 0, n)) {
      out.append(buf, static_cast<const char*>(nul) - buf);
      return 0;
    }
    out.append(buf, n);
    addr += n;
  }
  return too_long;
}

long take_fd(pid_t tid, int fd, const Waiting& waiting, UniqueFd& out) {
  long pidfd = ::syscall(SYS_pidfd_open, tid, pidfd_thread);
  if (pidfd < 0) pidfd = ::syscall(SYS_pidfd_open, tid, 0);
  if (pidfd < 0) return -EACCES;
  const UniqueFd pid_fd(static_cast<int>(pidfd));
  // The pidfd is of the thread that is waiting, not of a process that reused its id.
  if (!waiting()) return -EACCES;
  const long got = ::syscall(SYS_pidfd_getfd, pid_fd.get(), fd, 0);
  if (got < 0) return errno == EBADF ? -EBADF : -EACCES;
  out.reset(static_cast<int>(got));
  return 0;
}

bool shares_view(pid_t tid) {
  return is_file(proc(tid) + "/root", ours().root) && is_file(proc(tid) + "/ns/mnt", ours().mnt);
}

std::string own_proc(pid_t tid, const std::string& path) {
  static constexpr std::pair<std::string_view, std::string_view> own[] = {
      {"/proc/self", ""}, {"/proc/thread-self", ""}, {"/dev/fd", "/fd"},
      {"/dev/stdin", "/fd/0"}, {"/dev/stdout", "/fd/1"}, {"/dev/stderr", "/fd/2"}};
  for (const auto& [prefix, to] : own) {
    if (path.compare(0, prefix.size(), prefix) != 0) continue;
    if (path.size() > prefix.size() && path[prefix.size()] != '/') continue;
    return proc(tid) + std::string(to) + path.substr(prefix.size());
  }
  return path;
}

long open_cwd(pid_t tid, const Waiting& waiting, UniqueFd& out) {
  out.reset(::open((proc(tid) + "/cwd").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  // Opened before the check: the cwd is of the thread that waits, not of one that reused its id.
  return out && waiting() ? 0 : -EACCES;
}

}  // namespace toolsrv::tracee
