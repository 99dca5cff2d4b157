#include "toolsrv/fileattr.hpp"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/limits.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <utime.h>

#include <algorithm>
#include <cerrno>

#include "toolsrv/paths.hpp"

namespace toolsrv {
namespace {

enum class Op { mode, owner, timespecs, timevals, utimbuf, xattr_set, xattr_remove };

// Where a call's arguments are: the file is named by a path (relative to a directory descriptor
// or the cwd) or by a descriptor; `value` is the first argument of what to set.
struct Shape {
  int nr;
  Op op;
  int dirfd;  // argument index, -1 = none (AT_FDCWD)
  int path;   // argument index, -1 = the call takes a descriptor
  int fd;     // argument index of that descriptor, -1 = none
  int flags;  // argument index of the AT_* flags, -1 = none
  bool nofollow;
  int value;
};

constexpr Shape shapes[] = {
    {__NR_chmod, Op::mode, -1, 0, -1, -1, false, 1},
    {__NR_fchmod, Op::mode, -1, -1, 0, -1, false, 1},
    {__NR_fchmodat, Op::mode, 0, 1, -1, -1, false, 2},
    {nr_fchmodat2, Op::mode, 0, 1, -1, 3, false, 2},
    {__NR_chown, Op::owner, -1, 0, -1, -1, false, 1},
    {__NR_lchown, Op::owner, -1, 0, -1, -1, true, 1},
    {__NR_fchown, Op::owner, -1, -1, 0, -1, false, 1},
    {__NR_fchownat, Op::owner, 0, 1, -1, 4, false, 2},
    {__NR_utime, Op::utimbuf, -1, 0, -1, -1, false, 1},
    {__NR_utimes, Op::timevals, -1, 0, -1, -1, false, 1},
    {__NR_futimesat, Op::timevals, 0, 1, -1, -1, false, 2},
    {__NR_utimensat, Op::timespecs, 0, 1, -1, 3, false, 2},
    {__NR_setxattr, Op::xattr_set, -1, 0, -1, -1, false, 1},
    {__NR_lsetxattr, Op::xattr_set, -1, 0, -1, -1, true, 1},
    {__NR_fsetxattr, Op::xattr_set, -1, -1, 0, -1, false, 1},
    {__NR_removexattr, Op::xattr_remove, -1, 0, -1, -1, false, 1},
    {__NR_lremovexattr, Op::xattr_remove, -1, 0, -1, -1, true, 1},
    {__NR_fremovexattr, Op::xattr_remove, -1, -1, 0, -1, false, 1},
};

const Shape* shape_of(int nr) {
  const auto it = std::find_if(std::begin(shapes), std::end(shapes), [nr](const Shape& s) { return s.nr == nr; });
  return it == std::end(shapes) ? nullptr : it;
}

// This thread without its effective capabilities while it lives (capabilities are per thread):
// a root toolsrv acts as its tool, which holds none.
class AsTheTool {
 public:
  AsTheTool() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    if (::syscall(SYS_capget, &header, saved_) != 0 || (saved_[0].effective == 0 && saved_[1].effective == 0)) return;
    __user_cap_data_struct none[2] = {saved_[0], saved_[1]};
    none[0].effective = none[1].effective = 0;
    dropped_ = ::syscall(SYS_capset, &header, none) == 0;
  }
  ~AsTheTool() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    if (dropped_) (void)::syscall(SYS_capset, &header, saved_);
  }
  AsTheTool(const AsTheTool&) = delete;
  AsTheTool& operator=(const AsTheTool&) = delete;
  /// False when the capabilities could not be dropped: then nothing is done for the tool.
  bool ok() const { return dropped_ || (saved_[0].effective == 0 && saved_[1].effective == 0); }

 private:
  __user_cap_data_struct saved_[2] = {};
  bool dropped_ = false;
};

// The file a path names for the tool, opened O_PATH (the symlink itself with `nofollow`): 0 or -errno.
long lookup(pid_t tid, const seccomp_data& d, const Shape& s, int flags, bool nofollow, const tracee::Waiting& waiting,
            UniqueFd& out) {
  std::string path;
  if (const long e = tracee::read_string(tid, d.args[s.path], PATH_MAX, -ENAMETOOLONG, path); e != 0) return e;
  if (!tracee::shares_view(tid)) return -EACCES;
  UniqueFd dir;
  if (path.empty() || path.front() != '/') {
    const int dirfd = s.dirfd >= 0 ? static_cast<int>(d.args[s.dirfd]) : AT_FDCWD;
    const long e = dirfd == AT_FDCWD ? tracee::open_cwd(tid, waiting, dir) : tracee::take_fd(tid, dirfd, waiting, dir);
    if (e != 0) return e;
  }
  if (path.empty()) {
    if (!(flags & AT_EMPTY_PATH)) return -ENOENT;
    out = std::move(dir);
    return 0;
  }
  out.reset(::openat(dir ? dir.get() : AT_FDCWD, path.c_str(), O_PATH | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0)));
  return out ? 0 : -errno;
}

// The file is under a writable directory, or is one; a descriptor of no file in a directory
// (a pipe, a socket) may change too.
bool may_change(const std::string& real, const struct stat& st, const std::vector<std::string>& writable) {
  if (real.empty()) return false;
  if (real.front() != '/') return true;
  return std::any_of(writable.begin(), writable.end(),
                     [&](const std::string& w) { return is_within(real, w) && (real != w || S_ISDIR(st.st_mode)); });
}

// The new times of a utime, utimes, futimesat or utimensat call; `times` stays null for "now".
long read_times(pid_t tid, Op op, std::uint64_t at, timespec (&ts)[2], const timespec*& times) {
  times = nullptr;
  if (at == 0) return 0;
  if (op == Op::timespecs) {
    if (!tracee::read(tid, at, ts, sizeof ts)) return -EFAULT;
  } else if (op == Op::timevals) {
    timeval tv[2];
    if (!tracee::read(tid, at, tv, sizeof tv)) return -EFAULT;
    for (int i = 0; i < 2; ++i) {
      if (tv[i].tv_usec < 0 || tv[i].tv_usec >= 1000000) return -EINVAL;
      ts[i] = {tv[i].tv_sec, tv[i].tv_usec * 1000};
    }
  } else {
    struct utimbuf u {};
    if (!tracee::read(tid, at, &u, sizeof u)) return -EFAULT;
    ts[0] = {u.actime, 0};
    ts[1] = {u.modtime, 0};
  }
  times = ts;
  return 0;
}

// The change itself, through `fd`: the tool's own descriptor when `direct`, else the O_PATH one.
long apply(pid_t tid, const seccomp_data& d, const Shape& s, bool direct, int fd, const struct stat& st) {
  const auto arg = [&](int i) { return d.args[s.value + i]; };
  const std::string via = "/proc/self/fd/" + std::to_string(fd);  // the file itself, for O_PATH
  int r = -1;
  switch (s.op) {
    case Op::mode: {
      const auto mode = static_cast<mode_t>(arg(0) & 07777);
      if (direct) r = ::fchmod(fd, mode);
      else if (S_ISLNK(st.st_mode)) return -EOPNOTSUPP;  // a symlink has no mode of its own
      else r = ::chmod(via.c_str(), mode);
      break;
    }
    case Op::owner:
      r = direct ? ::fchown(fd, static_cast<uid_t>(arg(0)), static_cast<gid_t>(arg(1)))
                 : ::fchownat(fd, "", static_cast<uid_t>(arg(0)), static_cast<gid_t>(arg(1)), AT_EMPTY_PATH);
      break;
    case Op::timespecs:
    case Op::timevals:
    case Op::utimbuf: {
      timespec ts[2];
      const timespec* times = nullptr;
      if (const long e = read_times(tid, s.op, arg(0), ts, times); e != 0) return e;
      r = direct ? ::futimens(fd, times) : ::utimensat(fd, "", times, AT_EMPTY_PATH);
      break;
    }
    case Op::xattr_set:
    case Op::xattr_remove: {
      std::string name;
      if (const long e = tracee::read_string(tid, arg(0), XATTR_NAME_MAX + 1, -ERANGE, name); e != 0) return e;
      if (name.empty()) return -ERANGE;
      if (!direct && S_ISLNK(st.st_mode)) return -EPERM;  // as the kernel answers a tool for a symlink
      if (s.op == Op::xattr_remove) {
        r = direct ? ::fremovexattr(fd, name.c_str()) : ::removexattr(via.c_str(), name.c_str());
        break;
      }
      const auto size = static_cast<std::size_t>(arg(2));
      if (size > XATTR_SIZE_MAX) return -E2BIG;
      std::vector<char> value(size);
      if (size > 0 && !tracee::read(tid, arg(1), value.data(), size)) return -EFAULT;
      const auto flags = static_cast<int>(arg(3));
      r = direct ? ::fsetxattr(fd, name.c_str(), value.data(), size, flags)
                 : ::setxattr(via.c_str(), name.c_str(), value.data(), size, flags);
      break;
    }
  }
  return r == 0 ? 0 : -errno;
}

}  // namespace

bool is_fileattr_call(int nr) { return shape_of(nr) != nullptr; }

long change_fileattr(pid_t tid, const seccomp_data& d, const std::vector<std::string>& writable,
                     const tracee::Waiting& waiting) {
  const Shape* s = shape_of(static_cast<int>(d.nr));
  if (!s || d.arch != AUDIT_ARCH_X86_64) return -EPERM;
  const int flags = s->flags >= 0 ? static_cast<int>(d.args[s->flags]) : 0;
  if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)) return -EINVAL;
  const bool nofollow = s->nofollow || (flags & AT_SYMLINK_NOFOLLOW);
  bool direct = s->path < 0;
  if (s->op == Op::timespecs && d.args[s->path] == 0) {  // utimensat(fd, NULL, ...): futimens
    if (static_cast<int>(d.args[s->dirfd]) == AT_FDCWD) return -EFAULT;
    if (flags != 0) return -EINVAL;
    direct = true;
  }
  const AsTheTool as_tool;
  if (!as_tool.ok()) return -EACCES;
  UniqueFd target;
  const long e = direct ? tracee::take_fd(tid, static_cast<int>(d.args[s->fd >= 0 ? s->fd : s->dirfd]), waiting, target)
                        : lookup(tid, d, *s, flags, nofollow, waiting, target);
  if (e != 0) return e;
  struct stat st {};
  if (::fstat(target.get(), &st) != 0) return -EACCES;
  if (!may_change(fd_path(target.get()), st, writable)) return -EACCES;
  return apply(tid, d, *s, direct, target.get(), st);
}

}  // namespace toolsrv
