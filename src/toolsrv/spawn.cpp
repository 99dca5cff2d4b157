#include "toolsrv/spawn.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "toolsrv/landlock.hpp"
#include "toolsrv/unixsock.hpp"

namespace toolsrv {
namespace {

// Steps of the child, reported with errno over the error pipe.
enum Step : int { step_pgrp = 1, step_pdeathsig, step_parent_gone, step_sigmask, step_nnp, step_landlock, step_caps, step_unix, step_unshare, step_dup, step_close, step_chdir, step_exec };

const char* step_name(int step) {
  switch (step) {
    case step_pgrp: return "setpgid";
    case step_pdeathsig: return "prctl PR_SET_PDEATHSIG";
    case step_parent_gone: return "parent exited";
    case step_sigmask: return "sigprocmask";
    case step_nnp: return "prctl PR_SET_NO_NEW_PRIVS";
    case step_landlock: return "landlock_restrict_self";
    case step_caps: return "dropping capabilities";
    case step_unix: return "seccomp unix filter";
    case step_unshare: return "unshare CLONE_FILES";
    case step_dup: return "dup2";
    case step_close: return "close_range";
    case step_chdir: return "chdir";
    case step_exec: return "exec";
  }
  return "spawn";
}

// The child's code runs on a stack AddressSanitizer does not know (child_stack_top): it is left
// uninstrumented, or ASan's bookkeeping for a call that does not return (its __asan_handle_no_return)
// takes that stack for a corrupt one.

[[noreturn, gnu::no_sanitize_address]] void child_fail(int errfd, int step) noexcept {
  const int msg[2] = {step, errno};
  (void)!::write(errfd, msg, sizeof msg);
  ::_exit(127);
}

// Moves `fd` to a number >= 3 so dup2 onto 0-2 cannot clobber another pipe end.
[[gnu::no_sanitize_address]] int above_stdio(int fd) noexcept { return fd >= 3 ? fd : ::fcntl(fd, F_DUPFD_CLOEXEC, 3); }

// What the child needs, on the parent's stack (the child shares our memory until it execs).
struct Child {
  const SpawnSpec* spec;
  const UnixFilter* unix_filter;  // made before the clone (its first use builds it): the child allocates nothing
  pid_t parent;
  std::uint64_t reset;
  char* const* argv;
  char* const* envp;
  int in_r, out_w, err_w, errfd;
  int listener = -1;  // set by the child: the filter's listener, in the descriptor table we share
};

[[noreturn, gnu::no_sanitize_address]] void run_child(Child& c) noexcept {
  const SpawnSpec& spec = *c.spec;
  const int errfd = c.errfd;
  if (::setpgid(0, 0) != 0) child_fail(errfd, step_pgrp);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(errfd, step_pdeathsig);
  if (::getppid() != c.parent) {
    errno = ESRCH;
    child_fail(errfd, step_parent_gone);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG && sig <= 64; ++sig)  // bit sig-1 is signal sig
    if (c.reset >> (sig - 1) & 1) (void)::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) child_fail(errfd, step_sigmask);
  if (spec.no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) child_fail(errfd, step_nnp);
  if (spec.ruleset_fd >= 0) {
    if (const int e = landlock_restrict_self(spec.ruleset_fd); e != 0) {
      errno = e;
      child_fail(errfd, step_landlock);
    }
  }
  // A sandboxed tool has no capabilities: run by root (a container), CAP_SYS_PTRACE would let it
  // read /proc/<pid>/environ of olliesrv and of other agents' tools past Landlock's ptrace scope
  // (their keys and secrets), CAP_DAC_OVERRIDE other users' files. Emptying the sets is enough:
  // under no_new_privs an exec grants nothing the process did not hold (root's full file set is
  // cut to the empty permitted set), so the bounding set, 41 prctl calls, is left as it is.
  if (spec.no_new_privs) {
    (void)::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = {};
    if (::syscall(SYS_capset, &header, none) != 0) child_fail(errfd, step_caps);
  }
  if (c.unix_filter) {
    // Made in the descriptor table we share with toolsrv, so toolsrv holds the listener with no
    // hand-over (a hand-over through a socket would need a hole in the filter, and a second
    // filter to close it: each filter is a BPF program compiled by the kernel, the dearest step
    // of a spawn). Then the child takes a table of its own for the rest.
    const int l = c.unix_filter->install();
    if (l < 0) {
      errno = -l;
      child_fail(errfd, step_unix);
    }
    c.listener = l;
    if (::unshare(CLONE_FILES) != 0) child_fail(errfd, step_unshare);
  }
  int in_r = c.in_r, out_w = c.out_w, err_w = c.err_w;
  in_r = above_stdio(in_r);
  out_w = above_stdio(out_w);
  err_w = above_stdio(err_w);
  if (in_r < 0 || out_w < 0 || err_w < 0) child_fail(errfd, step_dup);
  if (::dup2(in_r, 0) < 0 || ::dup2(out_w, 1) < 0 || ::dup2(err_w, 2) < 0) child_fail(errfd, step_dup);
  // Every descriptor above 2 closes at exec, the error pipe among them.
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) child_fail(errfd, step_close);
  const int cwd_fd = spec.cwd_dir ? spec.cwd_dir->get() : -1;  // reads only: async-signal-safe
  if ((cwd_fd >= 0 ? ::fchdir(cwd_fd) : ::chdir(spec.cwd.c_str())) != 0) child_fail(errfd, step_chdir);
  ::execve(c.argv[0], c.argv, c.envp);
  child_fail(errfd, step_exec);
}

[[gnu::no_sanitize_address]] int child_main(void* c) { run_child(*static_cast<Child*>(c)); }

// The child's stack: one per spawning thread, reused (the thread waits while the child runs on it).
char* child_stack_top() {
  constexpr std::size_t size = 64 * 1024;
  thread_local const std::unique_ptr<char[]> stack(new char[size]);
  return stack.get() + size;  // new[] of this size is aligned for any type; the stack grows down
}

std::vector<char*> c_array(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::uint64_t non_default_signals() {
  constexpr std::uint64_t all = ~std::uint64_t{0};
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return all;
  char buf[4096];
  std::size_t got = 0;
  for (ssize_t n; got < sizeof buf - 1 && (n = ::read(fd, buf + got, sizeof buf - 1 - got)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  buf[got] = '\0';
  std::uint64_t set = 0;
  for (const char* key : {"\nSigIgn:", "\nSigCgt:"}) {
    const char* at = std::strstr(buf, key);
    if (!at) return all;
    at += std::strlen(key);
    char* end = nullptr;
    errno = 0;
    set |= std::strtoull(at, &end, 16);
    if (errno != 0 || end == at) return all;
  }
  return set;
}

p9::Result<Spawned> spawn(const SpawnSpec& spec, std::uint64_t reset) {
  if (spec.argv.empty()) return p9::error("spawn: empty argv");
  int in[2], out[2], err[2], ep[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return p9::error(std::string("pipe: ") + std::strerror(errno));
  UniqueFd in_r(in[0]), in_w(in[1]);
  if (::pipe2(out, O_CLOEXEC) != 0) return p9::error(std::string("pipe: ") + std::strerror(errno));
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return p9::error(std::string("pipe: ") + std::strerror(errno));
  UniqueFd err_r(err[0]), err_w(err[1]);
  // Read without waiting: the clone returns once the child exec'd past the point of no return or
  // exited, after any report it wrote. Waiting for the pipe's end instead (its close at the exec)
  // kept this thread ~50 us longer, and woke it on the vCPU where the tool was starting.
  if (::pipe2(ep, O_CLOEXEC | O_NONBLOCK) != 0) return p9::error(std::string("pipe: ") + std::strerror(errno));
  UniqueFd ep_r(ep[0]), ep_w(ep[1]);
  auto argv = c_array(spec.argv);
  auto envp = c_array(spec.env);
  Child c{.spec = &spec,
          .unix_filter = spec.unix_filter ? &UnixFilter::get() : nullptr,
          .parent = ::getpid(),
          .reset = reset,
          .argv = argv.data(),
          .envp = envp.data(),
          .in_r = in_r.get(),
          .out_w = out_w.get(),
          .err_w = err_w.get(),
          .errfd = ep_w.get()};
  // As vfork, on a stack of its own: the child borrows our memory until it execs, so nothing of
  // this (large, threaded) process is copied, and we wait meanwhile. With the unix filter it also
  // shares our descriptor table until the filter is in. Every signal stays blocked meanwhile, so
  // no handler of ours runs in the child; the child resets dispositions and the mask before exec.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const int flags = CLONE_VM | CLONE_VFORK | (spec.unix_filter ? CLONE_FILES : 0) | SIGCHLD;
  const pid_t pid = ::clone(child_main, child_stack_top(), flags, &c);
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return p9::error(std::string("clone: ") + std::strerror(fork_errno));
  UniqueFd listener(c.listener);

  (void)::setpgid(pid, pid);  // also here, so a kill right after start cannot miss the group
  in_r.reset();
  out_w.reset();
  err_w.reset();
  ep_w.reset();

  int msg[2] = {0, 0};
  ssize_t n;
  do n = ::read(ep_r.get(), msg, sizeof msg);
  while (n < 0 && errno == EINTR);
  if (n > 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    std::string what = step_name(msg[0]);
    if (msg[0] == step_exec) what += " " + spec.argv[0];
    else if (msg[0] == step_chdir) what += " " + spec.cwd;
    return p9::error(what + ": " + std::strerror(msg[1]));
  }

  Spawned s;
  s.pid = pid;
  s.pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!s.pidfd) {
    const int e = errno;
    ::kill(-pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    return p9::error(std::string("pidfd_open: ") + std::strerror(e));
  }
  s.unix_listener = std::move(listener);
  for (int fd : {in_w.get(), out_r.get(), err_r.get()}) ::fcntl(fd, F_SETFL, O_NONBLOCK);  // a pipe end has no other flag
  s.stdin_w = std::move(in_w);
  s.stdout_r = std::move(out_r);
  s.stderr_r = std::move(err_r);
  return s;
}

}  // namespace toolsrv
