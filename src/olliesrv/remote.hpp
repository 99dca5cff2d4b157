#pragma once
/// Starting a remote session's toolsrv over ssh (spec §6.11): the tarball (tools/, sandbox.yaml,
/// the static toolsrv and ollie-9p), one ssh master with PR_SET_PDEATHSIG that carries the
/// secret, the bootstrap script and the tarball on its stdin, and, once the bootstrap reports
/// `OLLIE_LISTEN_READY`, the two Unix-socket forwards added through the master's control
/// socket. The toolsrv client (toolhost.cpp) then dials the local end as for a local toolsrv.
/// Nothing here blocks an I/O thread: ssh and tar are children whose pipes and pidfds are
/// watched by Asio.

#include <sys/types.h>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <functional>
#include <string>
#include <vector>

#include "lib9p/result.hpp"

namespace ollie::remote {

/// The session's ssh control socket ($XDG_RUNTIME_DIR/ollie/fwd/<sid>.ssh).
std::string control_path(const std::string& session_id);

/// `fd` moved to a number >= 10, close-on-exec, so that a child's dup2 onto 0-3 cannot clobber it
/// (the ssh master's pipes here, toolsrv's socket and secret in toolhost.cpp); -1 stays -1.
int high_fd(int fd);

/// `[user@]host` as session/new accepts it (§4.1): no option, space or shell character.
bool valid_destination(const std::string& d);

struct Target {
  std::string destination;  ///< [user@]host
  std::string session_id, cwd;
  std::string local_sock;   ///< the session's toolsrv socket path (§6.1): the -L forward's local end
  std::string config_root;  ///< the local config root: its tools/ and sandbox.yaml are packed
  std::string static_dir;   ///< holds the static toolsrv and ollie-9p
  std::vector<std::string> env;  ///< ssh's environment (olliesrv's minus the backend secrets)
  /// Listens on the session's forwarded socket (idempotent); the -R forward's local end.
  std::function<p9::Status(const std::string& path)> listen;
};

/// What a bootstrap gives: OLLIE_ADDR for the session's tools (the remote end of the reverse
/// forward), and the session cwd as the tool host has it (`~` expanded with that host's HOME).
struct Started {
  std::string addr, cwd;
};

/// Bootstraps and forwards. `adopt` receives the ssh master (pid and an owned pidfd) as soon as
/// it runs, so its owner kills and reaps it whatever happens next; a failure is
/// `remote: <reason>`, but a cwd that is no directory there is `cwd: <p>: not a directory` (§4.1).
asio::awaitable<p9::Result<Started>> start(asio::any_io_executor ex, Target t, std::string secret,
                                               std::function<void(pid_t, int)> adopt);

}  // namespace ollie::remote
