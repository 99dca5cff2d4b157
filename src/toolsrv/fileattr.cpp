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

// What a call names, taken from the tool while toolsrv still has its own credentials (reading
// another process's memory and descriptors may need them, e.g. under Yama for a tool that left
// its parent): the path and the directory it is relative to, or the descriptor.
struct Named {
  std::string path;
  UniqueFd dir;  // the directory descriptor or the cwd; none for an absolute path
  UniqueFd fd;   // a call on a descriptor: the tool's own
};

long take_named(pid_t tid, const seccomp_data& d, const Shape& s, bool direct, int flags, const tracee::Waiting& waiting,
                Named& n) {
  if (direct) return tracee::take_fd(tid, static_cast<int>(d.args[s.fd >= 0 ? s.fd : s.dirfd]), waiting, n.fd);
  if (const long e = tracee::read_string(tid, d.args[s.path], PATH_MAX, -ENAMETOOLONG, n.path); e != 0) return e;
  if (n.path.empty() && !(flags & AT_EMPTY_PATH)) return -ENOENT;
  n.path = tracee::own_proc(tid, n.path);
  if (!tracee::shares_view(tid)) return -EACCES;
  if (!n.path.empty() && n.path.front() == '/') return 0;
  const int dirfd = s.dirfd >= 0 ? static_cast<int>(d.args[s.dirfd]) : AT_FDCWD;
  return dirfd == AT_FDCWD ? tracee::open_cwd(tid, waiting, n.dir) : tracee::take_fd(tid, dirfd, waiting, n.dir);
}

// The file a path names for the tool, opened O_PATH (the symlink itself with `nofollow`), as the
// tool: 0 or -errno.
long resolve(Named& n, bool nofollow, UniqueFd& out) {
  if (n.path.empty()) {  // AT_EMPTY_PATH: the directory descriptor's own file
    out = std::move(n.dir);
    return 0;
  }
  out.reset(::openat(n.dir ? n.dir.get() : AT_FDCWD, n.path.c_str(), O_PATH | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0)));
  return out ? 0 : -errno;
}

bool is_writable(const struct stat& st, const std::vector<FileId>& writable) {
  return std::find(writable.begin(), writable.end(), FileId{st.st_dev, st.st_ino}) != writable.end();
}

// Whether the file may change: it is a writable directory or lies beneath one, found as Landlock
// finds it, by walking its directories up to the root and comparing each with the rules' files
// (so a name does not count: a link planted on the way to a rule path, which Landlock skipped,
// is not one, nor a file of a detached mount tree whose name reads like a path under the cwd).
// A file no path reaches (unlinked, a memfd) and a descriptor of no file in a directory (a pipe,
// a socket) may change too.
bool may_change(int target, const struct stat& st, const std::vector<FileId>& writable) {
  const std::string real = fd_path(target);
  if (real.empty()) return false;
  if (real.front() != '/' || (st.st_nlink == 0 && real.ends_with(" (deleted)"))) return true;
  // The name must be the file's in toolsrv's view before its directory is taken from it.
  struct stat named {};
  if (::lstat(real.c_str(), &named) != 0 || named.st_dev != st.st_dev || named.st_ino != st.st_ino) return false;
  const auto slash = real.rfind('/');
  const std::string start = S_ISDIR(st.st_mode) ? real : slash == 0 ? "/" : real.substr(0, slash);
  UniqueFd dir(::open(start.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  struct stat at {};
  if (!dir || ::fstat(dir.get(), &at) != 0) return false;
  if (!S_ISDIR(st.st_mode)) {  // the entry must still be this file
    struct stat entry {};
    if (::fstatat(dir.get(), real.c_str() + slash + 1, &entry, AT_SYMLINK_NOFOLLOW) != 0 || entry.st_dev != st.st_dev ||
        entry.st_ino != st.st_ino) {
      return false;
    }
  }
  for (int depth = 0; depth < PATH_MAX / 2; ++depth) {
    if (is_writable(at, writable)) return true;
    UniqueFd up(::openat(dir.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
    struct stat above {};
    if (!up || ::fstat(up.get(), &above) != 0) return false;
    if (above.st_dev == at.st_dev && above.st_ino == at.st_ino) return false;  // the root
    dir = std::move(up);
    at = above;
  }
  return false;
}

// chmod's setuid and setgid bits: a bit the file already has may be passed back (chmod keeps a
// directory's setgid bit, cp -a copies it), and setgid may be set on a directory (its group is
// inherited, no privilege is); anything else would let a tool of a root toolsrv make a root-owned
// program setuid root.
bool setid_allowed(mode_t mode, const struct stat& st) {
  const mode_t added = mode & ~st.st_mode & (S_ISUID | S_ISGID);
  return added == 0 || (S_ISDIR(st.st_mode) && added == S_ISGID);
}

// What to set, read from the tool's memory.
struct Values {
  timespec ts[2] = {};
  const timespec* times = nullptr;  // null: now
  std::string name;                 // of an extended attribute
  std::vector<char> value;
};

// The new times of a utime, utimes, futimesat or utimensat call; `times` stays null for "now".
long read_times(pid_t tid, Op op, std::uint64_t at, Values& v) {
  if (at == 0) return 0;
  if (op == Op::timespecs) {
    if (!tracee::read(tid, at, v.ts, sizeof v.ts)) return -EFAULT;
  } else if (op == Op::timevals) {
    timeval tv[2];
    if (!tracee::read(tid, at, tv, sizeof tv)) return -EFAULT;
    for (int i = 0; i < 2; ++i) {
      if (tv[i].tv_usec < 0 || tv[i].tv_usec >= 1000000) return -EINVAL;
      v.ts[i] = {tv[i].tv_sec, tv[i].tv_usec * 1000};
    }
  } else {
    struct utimbuf u {};
    if (!tracee::read(tid, at, &u, sizeof u)) return -EFAULT;
    v.ts[0] = {u.actime, 0};
    v.ts[1] = {u.modtime, 0};
  }
  v.times = v.ts;
  return 0;
}

long read_values(pid_t tid, const seccomp_data& d, const Shape& s, Values& v) {
  const auto arg = [&](int i) { return d.args[s.value + i]; };
  switch (s.op) {
    case Op::mode:
    case Op::owner: return 0;
    case Op::timespecs:
    case Op::timevals:
    case Op::utimbuf: return read_times(tid, s.op, arg(0), v);
    case Op::xattr_set:
    case Op::xattr_remove: break;
  }
  if (const long e = tracee::read_string(tid, arg(0), XATTR_NAME_MAX + 1, -ERANGE, v.name); e != 0) return e;
  if (v.name.empty()) return -ERANGE;
  if (s.op == Op::xattr_remove) return 0;
  const auto size = static_cast<std::size_t>(arg(2));
  if (size > XATTR_SIZE_MAX) return -E2BIG;
  v.value.resize(size);
  return size == 0 || tracee::read(tid, arg(1), v.value.data(), size) ? 0 : -EFAULT;
}

// The change itself, through `fd`: the tool's own descriptor when `direct`, else the O_PATH one.
long apply(const seccomp_data& d, const Shape& s, const Values& v, bool direct, int fd, const struct stat& st) {
  const auto arg = [&](int i) { return d.args[s.value + i]; };
  const std::string via = "/proc/self/fd/" + std::to_string(fd);  // the file itself, for O_PATH
  int r = -1;
  switch (s.op) {
    case Op::mode: {
      const auto mode = static_cast<mode_t>(arg(0) & 07777);
      if (!setid_allowed(mode, st)) return -EPERM;
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
    case Op::utimbuf: r = direct ? ::futimens(fd, v.times) : ::utimensat(fd, "", v.times, AT_EMPTY_PATH); break;
    case Op::xattr_set:
    case Op::xattr_remove:
      if (!direct && S_ISLNK(st.st_mode)) return -EPERM;  // as the kernel answers a tool for a symlink
      if (s.op == Op::xattr_remove) r = direct ? ::fremovexattr(fd, v.name.c_str()) : ::removexattr(via.c_str(), v.name.c_str());
      else if (direct) r = ::fsetxattr(fd, v.name.c_str(), v.value.data(), v.value.size(), static_cast<int>(arg(3)));
      else r = ::setxattr(via.c_str(), v.name.c_str(), v.value.data(), v.value.size(), static_cast<int>(arg(3)));
      break;
  }
  return r == 0 ? 0 : -errno;
}

}  // namespace

bool is_fileattr_call(int nr) { return shape_of(nr) != nullptr; }

long change_fileattr(pid_t tid, const seccomp_data& d, const std::vector<FileId>& writable,
                     const tracee::Waiting& waiting) {
  const Shape* s = shape_of(static_cast<int>(d.nr));
  if (!s || d.arch != AUDIT_ARCH_X86_64) return -EPERM;
  const int flags = s->flags >= 0 ? static_cast<int>(d.args[s->flags]) : 0;
  if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)) return -EINVAL;
  const bool nofollow = s->nofollow || (flags & AT_SYMLINK_NOFOLLOW);
  bool direct = s->path < 0;
  const bool times = s->op == Op::timespecs || s->op == Op::timevals;
  if (times && s->dirfd >= 0 && d.args[s->path] == 0) {  // utimensat and futimesat of (fd, NULL): the fd's file
    if (static_cast<int>(d.args[s->dirfd]) == AT_FDCWD) return -EFAULT;
    if (flags != 0) return -EINVAL;
    direct = true;
  }
  Named n;
  Values v;
  if (const long e = take_named(tid, d, *s, direct, flags, waiting, n); e != 0) return e;
  if (const long e = read_values(tid, d, *s, v); e != 0) return e;
  if (!waiting()) return -EACCES;  // what was read is of the thread that waits
  const AsTheTool as_tool;
  if (!as_tool.ok()) return -EACCES;
  UniqueFd target = std::move(n.fd);
  if (!direct) {
    if (const long e = resolve(n, nofollow, target); e != 0) return e;
  }
  struct stat st {};
  if (::fstat(target.get(), &st) != 0) return -EACCES;
  if (!may_change(target.get(), st, writable)) return -EACCES;
  return apply(d, *s, v, direct, target.get(), st);
}

}  // namespace toolsrv
