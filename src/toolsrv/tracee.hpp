#pragma once
/// A waiting tool as the guard sees it (unixsock.hpp, fileattr.hpp): its memory, its descriptors
/// and its view of the filesystem. Every reach into the tool is checked against the notification
/// it answers (`waiting`: SECCOMP_IOCTL_NOTIF_ID_VALID), so a thread id reused by another process
/// reads nothing of it.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "toolsrv/fd.hpp"

namespace toolsrv::tracee {

/// Whether the thread is still the one that waits for the answer.
using Waiting = std::function<bool()>;

/// `len` bytes of the tool's memory at `addr`; false when any of them cannot be read.
bool read(pid_t tid, std::uint64_t addr, void* out, std::size_t len);

/// The NUL-terminated string at `addr`, read a page at a time (so a string that ends just before
/// an unmapped page reads): 0, -EFAULT, -EACCES when the tool's memory may not be read (a tool
/// that made itself non-dumpable, when toolsrv has no CAP_SYS_PTRACE), or `too_long` when no NUL
/// comes within `max` bytes (the NUL counted, as PATH_MAX counts it).
long read_string(pid_t tid, std::uint64_t addr, std::size_t max, long too_long, std::string& out);

/// The tool's descriptor `fd`, duplicated into toolsrv (pidfd_getfd): 0, -EBADF when the tool has
/// no such descriptor, or -EACCES.
long take_fd(pid_t tid, int fd, const Waiting& waiting, UniqueFd& out);

/// Whether the tool's root directory and mount namespace are toolsrv's: only then does a path of
/// the tool name the file it names for toolsrv.
bool shares_view(pid_t tid);

/// `path` with a leading /proc/self, /proc/thread-self, /dev/fd, /dev/stdin, /dev/stdout or
/// /dev/stderr made the tool's own (/proc/<tid>/...): opened by toolsrv they would be toolsrv's.
std::string own_proc(pid_t tid, const std::string& path);

/// The tool's working directory, opened O_PATH: 0 or -EACCES.
long open_cwd(pid_t tid, const Waiting& waiting, UniqueFd& out);

}  // namespace toolsrv::tracee
