#pragma once
/// spawn: clone (as vfork, on a stack of its own) and exec one tool process as spec §6.6 says.
/// Between clone and exec the child (on our memory) makes only async-signal-safe system calls:
/// own process group, parent-death signal, the reset of the signals we handle or ignore and of
/// the mask, no_new_privs, landlock_restrict_self, the Unix-socket seccomp filter (unixsock.hpp)
/// made in our descriptor table and then a table of its own, the pipes onto 0-2, every other
/// descriptor close-on-exec, chdir (fchdir to a held cwd), execve. A failing step is reported
/// over a close-on-exec pipe and nothing is executed.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib9p/result.hpp"
#include "toolsrv/fd.hpp"

namespace toolsrv {

/// What to run and how.
struct SpawnSpec {
  std::vector<std::string> argv;  ///< argv[0] is the path executed (no PATH search)
  std::vector<std::string> env;   ///< KEY=VALUE, the whole environment
  std::string cwd;                ///< chdir here, unless cwd_dir is set (then it only names it)
  std::shared_ptr<const UniqueFd> cwd_dir;  ///< the held cwd: fchdir to it, never resolved again
  int ruleset_fd = -1;            ///< Landlock ruleset to enforce; -1 = unconfined
  bool no_new_privs = true;       ///< false only for an approved bypass call
  bool unix_filter = false;       ///< the seccomp filter of unixsock.hpp, after Landlock (needs no_new_privs)
};

/// A started child: its pid (also its process group), a pidfd to reap it, and our pipe ends.
struct Spawned {
  pid_t pid = -1;
  UniqueFd pidfd;
  UniqueFd stdin_w;   ///< non-blocking
  UniqueFd stdout_r;  ///< non-blocking
  UniqueFd stderr_r;  ///< non-blocking
  UniqueFd unix_listener;  ///< the filter's seccomp notification descriptor (unix_filter)
};

/// The signals whose disposition is not SIG_DFL (bit n-1 for signal n), from /proc/self/status
/// (SigIgn and SigCgt, process-wide); all of them when the file cannot be read. A child resets
/// those, a handful, where resetting each of the 64 was most of its system calls.
std::uint64_t non_default_signals();

/// Clones and execs, the signals of `reset` (non_default_signals()) set back to SIG_DFL in the
/// child. Fails (the child reaped, nothing run) with `<step>: <strerror>`, e.g.
/// `exec /x/tool: Permission denied`, `chdir /gone: No such file or directory`,
/// `landlock_restrict_self: ...`. Must be called from a thread that lives as long as the children
/// should (PR_SET_PDEATHSIG follows the forking thread).
p9::Result<Spawned> spawn(const SpawnSpec& spec, std::uint64_t reset);

}  // namespace toolsrv
