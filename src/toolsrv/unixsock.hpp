#pragma once
/// Pathname Unix sockets under a Landlock that cannot mediate them (below ABI 9, spec §7.3.2):
/// a seccomp filter, installed in the tool's process after Landlock and inherited by everything
/// it starts, hands connect, sendto with an address, sendmsg and sendmmsg to toolsrv through
/// seccomp user notification. UnixGuard, a thread of toolsrv, decides each one and, for what it
/// allows, acts on the tool's behalf:
///
/// - connect to a pathname socket: resolved in the tool's view (its cwd; its root and mount
///   namespace must be toolsrv's), opened O_PATH (so a symlink or a path swapped after the check
///   changes nothing), checked against the call's `unix` list, then connected through
///   /proc/self/fd/<the O_PATH descriptor> by toolsrv's connector process (no_new_privs, so a
///   server that asks SO_PEERCRED, as olliesrv does, sees a sandboxed peer); a stream or seqpacket
///   socket is a new one installed over the tool's descriptor (SECCOMP_IOCTL_NOTIF_ADDFD), a
///   datagram socket is the tool's own. Abstract addresses are refused: toolsrv cannot connect
///   them inside the tool's Landlock domain, and letting the kernel go on after a check of the
///   tool's memory would let a second thread rewrite the address into a path.
/// - connect of any other socket (TCP, UDP, ...): performed by toolsrv on the tool's own socket
///   (never continued in the kernel, for the same reason), with Landlock's TCP port rules applied
///   here; a blocking connect is waited for without blocking anything.
/// - sendto with an address: likewise (a datagram to a pathname socket through the connector).
/// - sendmsg with an address on a Unix datagram socket: as sendto; other sendmsg and sendmmsg
///   calls continue in the kernel (see doc/sandbox.md for what that leaves).
/// - chmod, chown, utime and setxattr calls, which no Landlock ABI governs: fileattr.hpp. The
///   filter is therefore installed at every ABI, not only below 9, and chmod's setuid and setgid
///   bits are toolsrv's to decide too.
///
/// Refused calls fail with EACCES. Notifications are served one at a time, at most
/// per_round of one filter before the next filter's, and at most pending_max waits are open.

#include <linux/filter.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lib9p/result.hpp"
#include "toolsrv/fd.hpp"

namespace toolsrv {

/// Whether the kernel has seccomp user notification (SECCOMP_RET_USER_NOTIF); asked once.
bool unix_notify_available();

/// A file by its identity, as Landlock's rules hold it.
struct FileId {
  dev_t dev;
  ino_t ino;
  bool operator==(const FileId&) const = default;
};

/// What one call's processes may reach.
struct UnixAccess {
  /// Absolute paths (SandboxPlan::unix_sockets, resolved as the call began): a socket, or a
  /// directory whose sockets (beneath, at any depth) are allowed. A socket is allowed when the
  /// kernel's own path of it is one of them or beneath one.
  std::vector<std::string> sockets;
  /// TCP connect ports Landlock would allow: nullopt = any, else only these (empty = none).
  std::optional<std::vector<std::uint16_t>> tcp_connect;
  /// The files of the rw and rwx rules Landlock was given (SandboxPlan::rules: st_dev, st_ino):
  /// beneath those that are directories, a file's mode, owner, times and extended attributes may
  /// change (fileattr.hpp).
  std::vector<FileId> writable;
};

/// The filter: one BPF program, the same for every spawn (what a call may reach is the guard's
/// UnixAccess, not the filter's).
class UnixFilter {
 public:
  static const UnixFilter& get();
  /// In the child, after no_new_privs and Landlock: installs the filter and returns its listener
  /// (close-on-exec), or -errno. Async-signal-safe. spawn() shares the child's descriptor table
  /// until then, so the listener is toolsrv's too: nothing has to carry it over.
  int install() const noexcept;

 private:
  UnixFilter();
  std::vector<sock_filter> filter_;
};

class UnixGuard {
 public:
  /// Notifications of one filter handled before the next filter's turn.
  static constexpr int per_round = 8;
  /// Connects and sends waiting for a socket at once; beyond it a call gets EAGAIN.
  static constexpr std::size_t pending_max = 256;

  UnixGuard();
  /// Stops the thread and the connector; tools still under a filter then get ENOSYS.
  ~UnixGuard();
  UnixGuard(const UnixGuard&) = delete;
  UnixGuard& operator=(const UnixGuard&) = delete;

  /// Serves `listener` (one call's filter) with `access` until no process is left under it.
  void adopt(UniqueFd listener, std::shared_ptr<const UnixAccess> access);

  struct Watch;
  struct Pending;

 private:
  void loop();
  void wake();

  UniqueFd epoll_, event_;
  mutable std::mutex mu_;
  std::vector<std::pair<UniqueFd, std::shared_ptr<const UnixAccess>>> incoming_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace toolsrv
