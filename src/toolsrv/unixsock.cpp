#include "toolsrv/unixsock.hpp"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/close_range.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <utility>

#include "toolsrv/fileattr.hpp"
#include "toolsrv/paths.hpp"
#include "toolsrv/tracee.hpp"

namespace toolsrv {
namespace {

// ---- the filter ----

constexpr std::uint32_t x32_bit = 0x40000000;
// i386 numbers (int 0x80 from a 64-bit process): the socket calls are refused there, since their
// arguments (socketcall's in memory) cannot be handled as the native ones are.
constexpr std::uint32_t i386_socketcall = 102, i386_connect = 362, i386_sendto = 369, i386_sendmsg = 370,
                        i386_sendmmsg = 345;
// io_uring performs connect and sendmsg without a system call the filter would see.
constexpr std::uint32_t nr_io_uring_setup = 425, nr_io_uring_enter = 426, nr_io_uring_register = 427;
// Landlock does not govern a file's mode, owner, times or extended attributes: those calls go to
// fileattr.hpp (the setuid and setgid bits too). The *xattrat calls (Linux 6.13) and file_setattr
// (6.17) are not handled: ENOSYS, so callers fall back to the older calls. i386's calls of the
// kind are refused whole.
constexpr std::uint32_t nr_setxattrat = 463, nr_removexattrat = 466, nr_file_setattr = 469;
constexpr std::uint32_t i386_fileattr[] = {15 /* chmod */,  94 /* fchmod */,   306 /* fchmodat */, 16 /* lchown */,
                                           95 /* fchown */, 182 /* chown */,   198 /* lchown32 */, 207 /* fchown32 */,
                                           212 /* chown32 */, 298 /* fchownat */, 30 /* utime */, 271 /* utimes */,
                                           299 /* futimesat */, 320 /* utimensat */, 412 /* utimensat_time64 */,
                                           226 /* setxattr */, 227 /* lsetxattr */, 228 /* fsetxattr */,
                                           235 /* removexattr */, 236 /* lremovexattr */, 237 /* fremovexattr */};

constexpr std::uint32_t off_nr = offsetof(seccomp_data, nr);
constexpr std::uint32_t off_arch = offsetof(seccomp_data, arch);
constexpr std::uint32_t arg_lo(int i) { return offsetof(seccomp_data, args) + 8 * i; }
constexpr std::uint32_t arg_hi(int i) { return arg_lo(i) + 4; }

// A small assembler: jumps name labels, resolved when the program is done (all forward).
class Bpf {
 public:
  void load(std::uint32_t off) { add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, off)); }
  void ret(std::uint32_t action) { add(BPF_STMT(BPF_RET | BPF_K, action)); }
  // if (A == k) goto yes (else fall through)
  void if_eq(std::uint32_t k, const std::string& yes) { jump(BPF_JEQ, k, yes, ""); }
  // if (A != k) goto no
  void if_ne(std::uint32_t k, const std::string& no) { jump(BPF_JEQ, k, "", no); }
  void if_ge(std::uint32_t k, const std::string& yes) { jump(BPF_JGE, k, yes, ""); }
  void label(const std::string& name) { labels_[name] = code_.size(); }
  std::vector<sock_filter> done() {
    for (const auto& [at, yes, no] : fixups_) {
      if (!yes.empty()) code_[at].jt = offset(at, yes);
      if (!no.empty()) code_[at].jf = offset(at, no);
    }
    return code_;
  }

 private:
  void add(sock_filter f) { code_.push_back(f); }
  // A conditional jump reaches at most 255 instructions ahead.
  std::uint8_t offset(std::size_t at, const std::string& label) const {
    const std::size_t to = labels_.at(label);
    if (to <= at || to - at - 1 > 255) throw std::logic_error("seccomp filter: jump to " + label + " out of reach");
    return static_cast<std::uint8_t>(to - at - 1);
  }
  void jump(std::uint16_t op, std::uint32_t k, const std::string& yes, const std::string& no) {
    fixups_.push_back({code_.size(), yes, no});
    add(BPF_JUMP(BPF_JMP | op | BPF_K, k, 0, 0));
  }
  struct Fixup {
    std::size_t at;
    std::string yes, no;
  };
  std::vector<sock_filter> code_;
  std::map<std::string, std::size_t> labels_;
  std::vector<Fixup> fixups_;
};

constexpr std::uint32_t ret_errno(int e) { return SECCOMP_RET_ERRNO | (static_cast<std::uint32_t>(e) & SECCOMP_RET_DATA); }

using Dispatch = std::vector<std::pair<std::uint32_t, std::string>>;  // system call number, label

// A binary search of v[from, to) (sorted by number) on the number in A: to the label of an equal
// one, else ALLOW. `arch` names the labels, so each architecture has its own.
void dispatch(Bpf& b, const std::string& arch, const Dispatch& v, std::size_t from, std::size_t to) {
  if (to - from <= 3) {
    for (std::size_t i = from; i < to; ++i) b.if_eq(v[i].first, v[i].second);
    b.ret(SECCOMP_RET_ALLOW);
    return;
  }
  const std::size_t mid = from + (to - from) / 2;
  const std::string upper = arch + "_at" + std::to_string(v[mid].first);
  b.if_ge(v[mid].first, upper);
  dispatch(b, arch, v, from, mid);
  b.label(upper);
  dispatch(b, arch, v, mid, to);
}

// The numbers of one architecture, searched. When the filter is installed, the kernel runs it once
// for every system call number of both architectures (about 900 runs) to cache those it allows
// whatever their arguments, and every call it cannot cache runs it again: a search keeps each run
// to a few comparisons where a list walked them all (the i386 list, walked, cost ~25 us a spawn).
void search(Bpf& b, const std::string& arch, Dispatch v) {
  std::sort(v.begin(), v.end());
  if (std::adjacent_find(v.begin(), v.end(), [](auto& x, auto& y) { return x.first == y.first; }) != v.end())
    throw std::logic_error("seccomp filter: an " + arch + " number listed twice");
  dispatch(b, arch, v, 0, v.size());
}

std::vector<sock_filter> filter_program() {
  Bpf b;
  b.load(off_arch);
  b.if_ne(AUDIT_ARCH_X86_64, "foreign");
  b.load(off_nr);
  b.if_ge(x32_bit, "enosys");
  Dispatch native{{__NR_connect, "notify"}, {__NR_sendmmsg, "notify"}, {__NR_sendto, "sendto"}, {__NR_sendmsg, "notify"}};
  for (const auto nr : {nr_io_uring_setup, nr_io_uring_enter, nr_io_uring_register, nr_setxattrat, nr_removexattrat,
                        nr_file_setattr})
    native.emplace_back(nr, "enosys");
  for (const int nr : {__NR_chmod, __NR_fchmod, __NR_fchmodat, nr_fchmodat2, __NR_chown, __NR_lchown, __NR_fchown,
                       __NR_fchownat, __NR_utime, __NR_utimes, __NR_futimesat, __NR_utimensat, __NR_setxattr,
                       __NR_lsetxattr, __NR_fsetxattr, __NR_removexattr, __NR_lremovexattr, __NR_fremovexattr})
    native.emplace_back(static_cast<std::uint32_t>(nr), "notify");
  search(b, "x86_64", std::move(native));
  // sendto without an address (pointer or length 0) reads nothing from memory: the peer was
  // checked when the socket was connected.
  b.label("sendto");
  b.load(arg_lo(4));
  b.if_ne(0, "sendto_len");
  b.load(arg_hi(4));
  b.if_eq(0, "allow");
  b.label("sendto_len");
  b.load(arg_lo(5));
  b.if_eq(0, "allow");
  b.ret(SECCOMP_RET_USER_NOTIF);
  b.label("foreign");
  b.if_ne(AUDIT_ARCH_I386, "kill");
  b.load(off_nr);
  Dispatch i386;
  for (const auto nr : {i386_socketcall, i386_connect, i386_sendto, i386_sendmsg, i386_sendmmsg}) i386.emplace_back(nr, "eacces");
  for (const auto nr : {nr_io_uring_setup, nr_io_uring_enter, nr_io_uring_register}) i386.emplace_back(nr, "enosys");
  for (const auto nr : i386_fileattr) i386.emplace_back(nr, "eperm");
  for (const auto nr : {static_cast<std::uint32_t>(nr_fchmodat2), nr_setxattrat, nr_removexattrat, nr_file_setattr})
    i386.emplace_back(nr, "eperm");
  search(b, "i386", std::move(i386));
  b.label("notify");
  b.ret(SECCOMP_RET_USER_NOTIF);
  b.label("enosys");
  b.ret(ret_errno(ENOSYS));
  b.label("eacces");
  b.ret(ret_errno(EACCES));
  b.label("eperm");
  b.ret(ret_errno(EPERM));
  b.label("allow");
  b.ret(SECCOMP_RET_ALLOW);
  b.label("kill");
  b.ret(SECCOMP_RET_KILL_PROCESS);
  return b.done();
}

// ---- small helpers ----

int sock_int(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  return ::getsockopt(fd, level, name, &v, &len) == 0 ? v : -1;
}

// Whether the tool's descriptor `fd` is close-on-exec (its fdinfo flags carry O_CLOEXEC).
bool tool_fd_cloexec(pid_t tid, int fd) {
  const UniqueFd info(::open(("/proc/" + std::to_string(tid) + "/fdinfo/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC));
  char buf[512];
  const auto n = info ? ::read(info.get(), buf, sizeof buf - 1) : -1;
  if (n <= 0) return true;
  buf[n] = 0;
  const char* flags = std::strstr(buf, "flags:");
  return !flags || (std::strtoul(flags + 6, nullptr, 8) & O_CLOEXEC) != 0;
}

// ---- the connector: connects and sends for the guard with no_new_privs ----

// Its peers (olliesrv among them) take the connecting process from SO_PEERCRED; toolsrv itself
// runs without no_new_privs, so a connect made by toolsrv would pass for the user's own.
enum ConnOp : int { op_connect_new = 1, op_connect_held, op_sendto_held };
constexpr std::size_t send_max = 65536;  // datagram bytes toolsrv forwards to a named socket

struct ConnRequest {
  int op;
  int type;       // op_connect_new: the socket type
  int flags;      // op_connect_new: O_NONBLOCK to keep; op_sendto_held: send flags
  int passcred;   // op_connect_new: SO_PASSCRED to copy
  std::uint32_t len;  // op_sendto_held: data bytes after the request
};

struct ConnReply {
  long result;  // >= 0, or -errno
};

// Receives up to two descriptors with a message; async-signal-safe.
ssize_t recv_with_fds(int sock, void* buf, std::size_t len, int* fds, int max_fds) {
  iovec iov{buf, len};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  for (int i = 0; i < max_fds; ++i) fds[i] = -1;
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const int count = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (i < max_fds) fds[i] = fd;
      else ::close(fd);
    }
  }
  return n;
}

ssize_t send_with_fds(int sock, const void* buf, std::size_t len, const int* fds, int count) {
  iovec iov{const_cast<void*>(buf), len};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (count > 0) {
    m.msg_control = control;
    m.msg_controllen = CMSG_SPACE(count * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(count * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, count * sizeof(int));
  }
  ssize_t n;
  do n = ::sendmsg(sock, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n;
}

// "/proc/self/fd/<fd>" as a socket address, without allocating.
socklen_t proc_fd_address(int fd, sockaddr_un& sa) {
  sa = {};
  sa.sun_family = AF_UNIX;
  static constexpr char prefix[] = "/proc/self/fd/";
  std::memcpy(sa.sun_path, prefix, sizeof prefix - 1);
  char digits[16];
  int n = 0;
  do digits[n++] = static_cast<char>('0' + fd % 10);
  while ((fd /= 10) > 0 && n < 15);
  std::size_t at = sizeof prefix - 1;
  while (n > 0) sa.sun_path[at++] = digits[--n];
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + at + 1);
}

// The connector's whole life: system calls only (it is a fork of a threaded process).
[[noreturn]] void connector_main(int sock) noexcept {
  static char buf[sizeof(ConnRequest) + send_max];
  while (true) {
    int fds[2];
    const auto n = recv_with_fds(sock, buf, sizeof buf, fds, 2);
    if (n <= 0) ::_exit(0);  // toolsrv closed its end
    ConnReply reply{-EINVAL};
    int out = -1;
    ConnRequest rq;
    if (static_cast<std::size_t>(n) >= sizeof rq && fds[0] >= 0) {
      std::memcpy(&rq, buf, sizeof rq);
      sockaddr_un sa;
      const socklen_t sa_len = proc_fd_address(fds[0], sa);
      const auto* sa_ptr = reinterpret_cast<const sockaddr*>(&sa);
      if (rq.op == op_connect_new) {
        out = ::socket(AF_UNIX, rq.type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (out < 0) reply.result = -errno;
        else {
          if (rq.passcred > 0) (void)::setsockopt(out, SOL_SOCKET, SO_PASSCRED, &rq.passcred, sizeof rq.passcred);
          if (::connect(out, sa_ptr, sa_len) == 0) {
            if (!(rq.flags & O_NONBLOCK)) (void)::fcntl(out, F_SETFL, ::fcntl(out, F_GETFL) & ~O_NONBLOCK);
            reply.result = 0;
          } else {
            reply.result = -errno;
            ::close(out);
            out = -1;
          }
        }
      } else if (rq.op == op_connect_held && fds[1] >= 0) {
        reply.result = ::connect(fds[1], sa_ptr, sa_len) == 0 ? 0 : -errno;
      } else if (rq.op == op_sendto_held && fds[1] >= 0 && sizeof rq + rq.len <= static_cast<std::size_t>(n)) {
        const auto sent = ::sendto(fds[1], buf + sizeof rq, rq.len, rq.flags | MSG_DONTWAIT | MSG_NOSIGNAL, sa_ptr, sa_len);
        reply.result = sent >= 0 ? sent : -errno;
      }
    }
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
    (void)send_with_fds(sock, &reply, sizeof reply, &out, out >= 0 ? 1 : 0);
    if (out >= 0) ::close(out);
  }
}

class Connector {
 public:
  ~Connector() { stop(); }

  // One request, answered at once: the connector makes non-blocking calls only.
  ConnReply call(const ConnRequest& rq, const void* data, int opath, int held, UniqueFd* out) {
    if (!sock_ && !start()) return {-EACCES};
    std::vector<char> msg(sizeof rq + (data ? rq.len : 0));
    std::memcpy(msg.data(), &rq, sizeof rq);
    if (data && rq.len) std::memcpy(msg.data() + sizeof rq, data, rq.len);
    const int fds[2] = {opath, held};
    if (send_with_fds(sock_.get(), msg.data(), msg.size(), fds, held >= 0 ? 2 : 1) < 0) {
      stop();
      return {-EACCES};
    }
    ConnReply reply{-EACCES};
    int got[2];
    if (recv_with_fds(sock_.get(), &reply, sizeof reply, got, 2) != static_cast<ssize_t>(sizeof reply)) {
      stop();
      return {-EACCES};
    }
    if (got[1] >= 0) ::close(got[1]);
    if (out) out->reset(got[0]);
    else if (got[0] >= 0) ::close(got[0]);
    return reply;
  }

 private:
  bool start() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return false;
    int sndbuf = static_cast<int>(2 * (sizeof(ConnRequest) + send_max));
    (void)::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    (void)::setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof sndbuf);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Dies with the guard's thread (the thread that forked it) or with the pair's end.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(1);
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(1);
      (void)::prctl(PR_SET_DUMPABLE, 0);  // no tool attaches to it, nor reads its descriptors
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig = 1; sig < NSIG; ++sig) (void)::sigaction(sig, &dfl, nullptr);  // none of toolsrv's handlers
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      if (::dup2(sv[1], 3) < 0) ::_exit(1);
      ::close_range(4, ~0U, 0);
      connector_main(3);
    }
    ::close(sv[1]);
    if (pid < 0) {
      ::close(sv[0]);
      return false;
    }
    sock_.reset(sv[0]);
    pid_ = pid;
    return true;
  }

  void stop() {
    sock_.reset();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {}
      pid_ = -1;
    }
  }

  UniqueFd sock_;
  pid_t pid_ = -1;
};

// ---- one notification ----

using Notif = seccomp_notif;
using Resp = seccomp_notif_resp;

enum Watched : std::uint64_t { watched_event = 0, watched_listener = 1, watched_pending = 2 };
std::uint64_t watch_tag(Watched k, int fd) { return (static_cast<std::uint64_t>(k) << 32) | static_cast<std::uint32_t>(fd); }

bool tcp_like(int domain, int type, int protocol) {
  return (domain == AF_INET || domain == AF_INET6) && type == SOCK_STREAM &&
         (protocol == IPPROTO_TCP || protocol == 262 /* IPPROTO_MPTCP */);
}

// Landlock's connect rule for TCP, applied where toolsrv connects for the tool.
bool tcp_port_allowed(const UnixAccess& a, const sockaddr_storage& addr, socklen_t len) {
  if (!a.tcp_connect) return true;
  std::uint16_t port;
  if (addr.ss_family == AF_INET && len >= sizeof(sockaddr_in)) port = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  else if (addr.ss_family == AF_INET6 && len >= sizeof(sockaddr_in6)) port = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  else return addr.ss_family == AF_UNSPEC;
  return std::find(a.tcp_connect->begin(), a.tcp_connect->end(), port) != a.tcp_connect->end();
}

}  // namespace

bool unix_notify_available() {
  static const bool available = [] {
    std::uint32_t action = SECCOMP_RET_USER_NOTIF;
    return ::syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0;
  }();
  return available;
}

// ---- UnixFilter ----

const UnixFilter& UnixFilter::get() {
  static const UnixFilter f;
  return f;
}

UnixFilter::UnixFilter() : filter_(filter_program()) {}

int UnixFilter::install() const noexcept {
  sock_fprog filter{static_cast<unsigned short>(filter_.size()), const_cast<sock_filter*>(filter_.data())};
  const long listener = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &filter);
  return listener < 0 ? -errno : static_cast<int>(listener);
}

// ---- UnixGuard ----

struct UnixGuard::Watch {
  UniqueFd listener;
  std::shared_ptr<const UnixAccess> access;
};

/// A connect or send of the tool's own socket that waits for the socket (EINPROGRESS, EAGAIN).
struct UnixGuard::Pending {
  int listener = -1;
  std::uint64_t id = 0;
  UniqueFd held;
  /// Called when the socket is ready: the reply (>= 0 or -errno), or -EAGAIN to wait again.
  std::function<long()> attempt;
};

namespace {

class Server {
 public:
  Server(int epoll, std::map<int, std::unique_ptr<UnixGuard::Watch>>& watches,
         std::map<int, std::unique_ptr<UnixGuard::Pending>>& pending)
      : epoll_(epoll), watches_(watches), pending_(pending) {}

  // Serves up to UnixGuard::per_round notifications of `w`; false when the filter is gone.
  bool serve(UnixGuard::Watch& w, std::uint32_t events) {
    if (events & EPOLLIN) {
      for (int i = 0; i < UnixGuard::per_round; ++i) {
        pollfd pfd{w.listener.get(), POLLIN, 0};
        if (i > 0 && ::poll(&pfd, 1, 0) != 1) break;
        if (pfd.revents & (POLLHUP | POLLERR) && !(pfd.revents & POLLIN)) return false;
        Notif req{};
        if (::ioctl(w.listener.get(), SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
          if (errno == EINTR || errno == ENOENT) continue;  // the tool was interrupted meanwhile
          return false;
        }
        handle(w, req);
      }
      return true;
    }
    return !(events & (EPOLLHUP | EPOLLERR));
  }

  // A pending connect or send whose socket is ready.
  void ready(int fd) {
    const auto it = pending_.find(fd);
    if (it == pending_.end()) return;
    auto& p = *it->second;
    const long r = p.attempt();
    if (r == -EAGAIN) return;
    if (watches_.count(p.listener)) reply(p.listener, p.id, r);
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    pending_.erase(it);
  }

 private:
  static void reply(int listener, std::uint64_t id, long result) {
    Resp r{};
    r.id = id;
    if (result < 0) r.error = static_cast<int>(result);
    else r.val = result;
    (void)::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &r);  // ENOENT: the tool is gone or interrupted
  }
  static void go_on(int listener, std::uint64_t id) {
    Resp r{};
    r.id = id;
    r.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    (void)::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &r);
  }
  static bool valid(int listener, std::uint64_t id) {
    auto v = id;
    return ::ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &v) == 0;
  }

  struct Call {
    int listener;
    const Notif& req;
    const UnixAccess& access;
    pid_t tid;
    UniqueFd held;  // the tool's socket (its args[0]), fetched with pidfd_getfd
    int domain = -1, type = -1, protocol = -1;
  };

  void handle(UnixGuard::Watch& w, const Notif& req) {
    const int listener = w.listener.get();
    if (is_fileattr_call(static_cast<int>(req.data.nr))) {
      const auto waiting = [listener, &req] { return valid(listener, req.id); };
      return reply(listener, req.id, change_fileattr(static_cast<pid_t>(req.pid), req.data, w.access->writable, waiting));
    }
    Call c{listener, req, *w.access, static_cast<pid_t>(req.pid), {}};
    if (const long e = fetch(c); e != 0) return reply(c.listener, req.id, e);
    switch (req.data.nr) {
      case __NR_connect: return on_connect(c);
      case __NR_sendto: return on_sendto(c);
      case __NR_sendmsg: return on_sendmsg(c);
      case __NR_sendmmsg: return on_sendmmsg(c);
    }
    reply(c.listener, req.id, -ENOSYS);
  }

  // The tool's socket; 0 or -errno to reply.
  static long fetch(Call& c) {
    if (c.req.data.arch != AUDIT_ARCH_X86_64) return -EACCES;
    const auto waiting = [&c] { return valid(c.listener, c.req.id); };
    if (const long e = tracee::take_fd(c.tid, static_cast<int>(c.req.data.args[0]), waiting, c.held); e != 0) return e;
    c.domain = sock_int(c.held.get(), SOL_SOCKET, SO_DOMAIN);
    if (c.domain < 0) return -ENOTSOCK;
    c.type = sock_int(c.held.get(), SOL_SOCKET, SO_TYPE);
    c.protocol = sock_int(c.held.get(), SOL_SOCKET, SO_PROTOCOL);
    return 0;
  }

  // An address of the tool's memory (at most a sockaddr_storage, as the kernel reads); 0 or -errno.
  static long read_address(const Call& c, std::uint64_t at, std::int64_t len, sockaddr_storage& out, socklen_t& out_len) {
    out = {};
    const auto n = static_cast<std::int32_t>(len);  // an int in the kernel
    if (n < 0 || n > static_cast<std::int32_t>(sizeof out)) return -EINVAL;
    if (!tracee::read(c.tid, at, &out, static_cast<std::size_t>(n))) return -EFAULT;
    out_len = static_cast<socklen_t>(n);
    return valid(c.listener, c.req.id) ? 0 : -EACCES;
  }

  enum class Unix { path, abstract, other };
  static Unix unix_kind(const sockaddr_storage& a, socklen_t len) {
    if (a.ss_family != AF_UNIX || len <= offsetof(sockaddr_un, sun_path)) return Unix::other;
    return reinterpret_cast<const sockaddr_un&>(a).sun_path[0] == '\0' ? Unix::abstract : Unix::path;
  }

  // The pathname socket of `a` opened O_PATH in the tool's view and checked against the policy;
  // -errno as connect would fail (ENOENT, ECONNREFUSED for a non-socket) or EACCES.
  static long open_allowed(const Call& c, const sockaddr_storage& a, socklen_t len, UniqueFd& out) {
    const auto& sun = reinterpret_cast<const sockaddr_un&>(a);
    const std::size_t max = len - offsetof(sockaddr_un, sun_path);
    const std::string path(sun.sun_path, strnlen(sun.sun_path, max));
    // The tool's root and mount namespace must be toolsrv's, or its paths mean other files.
    if (!tracee::shares_view(c.tid)) return -EACCES;
    UniqueFd dir;
    const auto waiting = [&c] { return valid(c.listener, c.req.id); };
    if (path.front() != '/' && tracee::open_cwd(c.tid, waiting, dir) != 0) return -EACCES;
    // toolsrv opens where Landlock hides things from the tool: only a path the list names, or
    // one beneath a listed directory, may say why it is no socket (a listed one yet to appear
    // is ENOENT); elsewhere every failure is EACCES, so whether a file exists stays hidden.
    const auto listed = [&] {
      const std::string where = clean_path(path.front() == '/' ? path : fd_path(dir.get()) + "/" + path);
      return std::any_of(c.access.sockets.begin(), c.access.sockets.end(),
                         [&](const std::string& allowed) { return is_within(where, allowed); });
    };
    out.reset(::openat(dir ? dir.get() : AT_FDCWD, path.c_str(), O_PATH | O_CLOEXEC));
    if (!out) {
      const int e = errno;
      return listed() ? -e : -EACCES;
    }
    if (!valid(c.listener, c.req.id)) return -EACCES;  // the cwd was of the waiting thread
    struct stat st {};
    if (::fstat(out.get(), &st) != 0) return -EACCES;
    if (!S_ISSOCK(st.st_mode)) return listed() ? -ECONNREFUSED : -EACCES;
    // Where the socket really is, against the entries as they led when the call began: a link
    // planted since on the way (the tool can write the cwd above `.run/app.sock`) leads nowhere.
    const std::string real = fd_path(out.get());
    for (const auto& allowed : c.access.sockets)
      if (is_within(real, allowed)) return 0;
    spdlog::debug("toolsrv: unix socket refused for pid {}: {}", c.tid, path);
    return -EACCES;
  }

  void on_connect(Call& c) {
    sockaddr_storage a;
    socklen_t len = 0;
    if (const long e = read_address(c, c.req.data.args[1], static_cast<std::int64_t>(c.req.data.args[2]), a, len); e != 0) {
      return reply(c.listener, c.req.id, e);
    }
    if (c.domain == AF_UNIX) {
      switch (unix_kind(a, len)) {
        case Unix::abstract: return reply(c.listener, c.req.id, -EACCES);
        case Unix::path: return connect_path(c, a, len);
        case Unix::other: break;  // AF_UNSPEC (dissolve), or what the kernel refuses itself
      }
    } else if (tcp_like(c.domain, c.type, c.protocol) && !tcp_port_allowed(c.access, a, len)) {
      return reply(c.listener, c.req.id, -EACCES);
    }
    connect_held(c, a, len);
  }

  void connect_path(Call& c, const sockaddr_storage& a, socklen_t len) {
    UniqueFd target;
    if (const long e = open_allowed(c, a, len, target); e != 0) return reply(c.listener, c.req.id, e);
    ConnRequest rq{};
    if (c.type == SOCK_DGRAM) {
      rq.op = op_connect_held;
      return reply(c.listener, c.req.id, connector_.call(rq, nullptr, target.get(), c.held.get(), nullptr).result);
    }
    rq.op = op_connect_new;
    rq.type = c.type;
    rq.flags = ::fcntl(c.held.get(), F_GETFL);
    rq.passcred = sock_int(c.held.get(), SOL_SOCKET, SO_PASSCRED);
    UniqueFd sock;
    const auto r = connector_.call(rq, nullptr, target.get(), -1, &sock);
    if (r.result != 0 || !sock) return reply(c.listener, c.req.id, r.result != 0 ? r.result : -EACCES);
    seccomp_notif_addfd add{};
    add.id = c.req.id;
    add.flags = SECCOMP_ADDFD_FLAG_SETFD;
    add.srcfd = static_cast<std::uint32_t>(sock.get());
    add.newfd = static_cast<std::uint32_t>(c.req.data.args[0]);
    add.newfd_flags = tool_fd_cloexec(c.tid, static_cast<int>(c.req.data.args[0])) ? O_CLOEXEC : 0;
    if (::ioctl(c.listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add) < 0) return reply(c.listener, c.req.id, -EACCES);
    reply(c.listener, c.req.id, 0);  // connect returns 0, not the descriptor ADDFD_FLAG_SEND would give
  }

  // connect(2) on the tool's own socket, by toolsrv; a blocking one is waited for here.
  void connect_held(Call& c, const sockaddr_storage& a, socklen_t len) {
    const int fd = c.held.get();
    const int fl = ::fcntl(fd, F_GETFL);
    const bool blocking = fl >= 0 && !(fl & O_NONBLOCK);
    if (blocking) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    const int r = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), len);
    const int e = errno;
    if (blocking) ::fcntl(fd, F_SETFL, fl);
    if (r == 0) return reply(c.listener, c.req.id, 0);
    if (!blocking || (e != EINPROGRESS && e != EALREADY)) return reply(c.listener, c.req.id, -e);
    wait(c, EPOLLOUT, [fd] {
      const int err = sock_int(fd, SOL_SOCKET, SO_ERROR);
      return err == 0 ? 0L : -static_cast<long>(err < 0 ? EIO : err);
    });
  }

  void wait(Call& c, std::uint32_t events, std::function<long()> attempt) {
    if (pending_.size() >= UnixGuard::pending_max) return reply(c.listener, c.req.id, -EAGAIN);
    const int fd = c.held.get();
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = watch_tag(watched_pending, fd);
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) return reply(c.listener, c.req.id, -EAGAIN);
    auto p = std::make_unique<UnixGuard::Pending>();
    p->listener = c.listener;
    p->id = c.req.id;
    p->held = std::move(c.held);
    p->attempt = std::move(attempt);
    pending_[fd] = std::move(p);
  }

  void on_sendto(Call& c) {
    sockaddr_storage a;
    socklen_t len = 0;
    if (const long e = read_address(c, c.req.data.args[4], static_cast<std::int64_t>(c.req.data.args[5]), a, len); e != 0) {
      return reply(c.listener, c.req.id, e);
    }
    const auto flags = static_cast<int>(c.req.data.args[3]);
    const auto want = static_cast<std::size_t>(c.req.data.args[2]);
    if (c.domain == AF_UNIX) {
      if (c.type != SOCK_DGRAM) return reply(c.listener, c.req.id, -EISCONN);
      const auto kind = unix_kind(a, len);
      if (kind != Unix::path) return reply(c.listener, c.req.id, kind == Unix::abstract ? -EACCES : -EINVAL);
      if (want > send_max) return reply(c.listener, c.req.id, -EMSGSIZE);
      std::vector<char> data(want);
      if (!tracee::read(c.tid, c.req.data.args[1], data.data(), want)) return reply(c.listener, c.req.id, -EFAULT);
      return send_path(c, a, len, data, flags);
    }
    if (tcp_like(c.domain, c.type, c.protocol) && (flags & MSG_FASTOPEN) && !tcp_port_allowed(c.access, a, len)) {
      return reply(c.listener, c.req.id, -EACCES);
    }
    // A stream takes part of a long write; a datagram larger than this fails as the kernel's would.
    const std::size_t n = std::min(want, send_max);
    if (want > n && c.type != SOCK_STREAM) return reply(c.listener, c.req.id, -EMSGSIZE);
    auto data = std::make_shared<std::vector<char>>(n);
    if (!tracee::read(c.tid, c.req.data.args[1], data->data(), n)) return reply(c.listener, c.req.id, -EFAULT);
    const int fd = c.held.get();
    const int fl = ::fcntl(fd, F_GETFL);
    const bool blocking = fl >= 0 && !(fl & O_NONBLOCK) && !(flags & MSG_DONTWAIT);
    auto attempt = [fd, data, a, len, flags] {
      const auto r = ::sendto(fd, data->data(), data->size(), flags | MSG_DONTWAIT | MSG_NOSIGNAL,
                              reinterpret_cast<const sockaddr*>(&a), len);
      return r >= 0 ? static_cast<long>(r) : -static_cast<long>(errno);
    };
    const long r = attempt();
    if (r != -EAGAIN || !blocking) return reply(c.listener, c.req.id, r);
    wait(c, EPOLLOUT, attempt);
  }

  void send_path(Call& c, const sockaddr_storage& a, socklen_t len, const std::vector<char>& data, int flags) {
    UniqueFd target;
    if (const long e = open_allowed(c, a, len, target); e != 0) return reply(c.listener, c.req.id, e);
    ConnRequest rq{};
    rq.op = op_sendto_held;
    rq.flags = flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL);
    rq.len = static_cast<std::uint32_t>(data.size());
    reply(c.listener, c.req.id, connector_.call(rq, data.data(), target.get(), c.held.get(), nullptr).result);
  }

  void on_sendmsg(Call& c) {
    // Only a named datagram to a Unix datagram socket is toolsrv's to check; other messages
    // carry no path the kernel would resolve.
    if (c.domain != AF_UNIX || c.type != SOCK_DGRAM) return go_on(c.listener, c.req.id);
    msghdr m{};
    if (!tracee::read(c.tid, c.req.data.args[1], &m, sizeof m)) return reply(c.listener, c.req.id, -EFAULT);
    if (!m.msg_name || m.msg_namelen == 0) return go_on(c.listener, c.req.id);
    sockaddr_storage a;
    socklen_t len = 0;
    const auto name_len = std::min<std::int64_t>(m.msg_namelen, sizeof a);  // the kernel truncates too
    if (const long e = read_address(c, reinterpret_cast<std::uint64_t>(m.msg_name), name_len, a, len); e != 0) {
      return reply(c.listener, c.req.id, e);
    }
    const auto kind = unix_kind(a, len);
    if (kind != Unix::path) return reply(c.listener, c.req.id, kind == Unix::abstract ? -EACCES : -EINVAL);
    // Descriptors or credentials sent to a named socket would have to be re-created here.
    if (m.msg_controllen != 0) return reply(c.listener, c.req.id, -EACCES);
    if (m.msg_iovlen > 1024) return reply(c.listener, c.req.id, -EMSGSIZE);
    std::vector<iovec> iov(m.msg_iovlen);
    if (!tracee::read(c.tid, reinterpret_cast<std::uint64_t>(m.msg_iov), iov.data(), iov.size() * sizeof(iovec))) {
      return reply(c.listener, c.req.id, -EFAULT);
    }
    std::vector<char> data;
    for (const auto& v : iov) {
      if (v.iov_len > send_max - data.size()) return reply(c.listener, c.req.id, -EMSGSIZE);
      const auto at = data.size();
      data.resize(at + v.iov_len);
      if (!tracee::read(c.tid, reinterpret_cast<std::uint64_t>(v.iov_base), data.data() + at, v.iov_len)) {
        return reply(c.listener, c.req.id, -EFAULT);
      }
    }
    send_path(c, a, len, data, static_cast<int>(c.req.data.args[2]));
  }

  void on_sendmmsg(Call& c) {
    if (c.domain != AF_UNIX || c.type != SOCK_DGRAM) return go_on(c.listener, c.req.id);
    // Named datagrams in a batch are refused rather than forwarded one by one.
    const auto count = std::min<std::uint64_t>(c.req.data.args[2], 1024);
    std::vector<mmsghdr> v(count);
    if (!tracee::read(c.tid, c.req.data.args[1], v.data(), v.size() * sizeof(mmsghdr))) return reply(c.listener, c.req.id, -EFAULT);
    for (const auto& m : v) {
      if (m.msg_hdr.msg_name && m.msg_hdr.msg_namelen != 0) return reply(c.listener, c.req.id, -EACCES);
    }
    go_on(c.listener, c.req.id);
  }

  int epoll_;
  std::map<int, std::unique_ptr<UnixGuard::Watch>>& watches_;
  std::map<int, std::unique_ptr<UnixGuard::Pending>>& pending_;
  Connector connector_;
};

}  // namespace

UnixGuard::UnixGuard() {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = watch_tag(watched_event, event_.get());
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, event_.get(), &ev);
  thread_ = std::thread([this] { loop(); });
}

UnixGuard::~UnixGuard() {
  stopping_ = true;
  wake();
  thread_.join();
}

void UnixGuard::wake() {
  const std::uint64_t one = 1;
  (void)!::write(event_.get(), &one, sizeof one);
}

// Registered here, on the caller's thread: waking the guard's thread to do it was a context switch
// of every sandboxed call. That thread takes the watch from incoming_ before it serves an event.
void UnixGuard::adopt(UniqueFd listener, std::shared_ptr<const UnixAccess> access) {
  std::lock_guard lock(mu_);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = watch_tag(watched_listener, listener.get());
  // Not served, the listener closes here: the tool's connects and sends then fail (ENOSYS).
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener.get(), &ev) != 0) return;
  incoming_.emplace_back(std::move(listener), std::move(access));
}

void UnixGuard::loop() {
  std::map<int, std::unique_ptr<Watch>> watches;
  std::map<int, std::unique_ptr<Pending>> pending;
  Server server(epoll_.get(), watches, pending);
  auto drop = [&](int fd) {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    watches.erase(fd);
  };
  while (!stopping_) {
    epoll_event events[64];
    const int n = ::epoll_wait(epoll_.get(), events, 64, -1);
    {
      std::lock_guard lock(mu_);  // the listeners adopted (and registered) since
      for (auto& [listener, access] : incoming_) {
        const int lfd = listener.get();
        watches[lfd] = std::make_unique<Watch>(Watch{std::move(listener), std::move(access)});
      }
      incoming_.clear();
    }
    for (int i = 0; i < n; ++i) {
      const auto kind = static_cast<Watched>(events[i].data.u64 >> 32);
      const int fd = static_cast<int>(events[i].data.u64 & 0xffffffff);
      if (kind == watched_event) {
        std::uint64_t v;
        (void)!::read(event_.get(), &v, sizeof v);
      } else if (kind == watched_listener) {
        const auto it = watches.find(fd);
        if (it != watches.end() && !server.serve(*it->second, events[i].events)) drop(fd);
      } else {
        server.ready(fd);
      }
    }
    // Waits of filters that are gone have nobody to answer.
    for (auto it = pending.begin(); it != pending.end();) {
      if (watches.count(it->second->listener)) {
        ++it;
        continue;
      }
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->first, nullptr);
      it = pending.erase(it);
    }
  }
}

}  // namespace toolsrv
