#pragma once
/// What Landlock does not govern about a file: its mode, its owner, its times and its extended
/// attributes. The guard's filter (unixsock.hpp) sends every chmod, chown, utime and setxattr
/// family call of a sandboxed tool here, and toolsrv makes the change for the tool when the file
/// lies under a writable directory Landlock was given (an `rw` or `rwx` rule: `{CWD}`,
/// `{TMPDIR}`, ...), or is that directory; elsewhere the call fails with EACCES. A writable
/// *file* (`/dev/null`) may be written, not changed: chmod 000 /dev/null stays refused. chmod's
/// setuid and setgid bits are refused (EPERM) but where a file already has them or setgid is set
/// on a directory.
///
/// The file is found as the kernel would find it for the tool (its cwd, its descriptors, its own
/// /proc/self, its root and mount namespace, which must be toolsrv's), opened O_PATH, checked as
/// Landlock checks (its directories walked up by inode, compared with the rules' files) and
/// changed through that descriptor, never by its path again: a symlink swapped after the check
/// changes nothing. The path, the values and the tool's descriptors are taken with
/// toolsrv's own credentials (Yama may refuse a tool that left its parent otherwise); the lookup,
/// the check and the change are made with toolsrv's effective capabilities dropped for the while,
/// so a tool of a root toolsrv can do no more than it could itself (no chown to another user, no
/// traversal of another user's 0700 directory); a descriptor the tool holds is used as is (an
/// O_PATH one gives EBADF, as the kernel would).

#include <linux/seccomp.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "toolsrv/tracee.hpp"
#include "toolsrv/unixsock.hpp"

namespace toolsrv {

/// fchmodat2 (Linux 6.6), newer than the system headers.
constexpr int nr_fchmodat2 = 452;

/// Whether `nr` (x86-64) is one of the calls fileattr handles.
bool is_fileattr_call(int nr);

/// Answers one such call of thread `tid`: the call's result (0) or -errno. `writable` are the
/// files of the call's rw and rwx rules (UnixAccess::writable).
long change_fileattr(pid_t tid, const seccomp_data& call, const std::vector<FileId>& writable,
                     const tracee::Waiting& waiting);

}  // namespace toolsrv
