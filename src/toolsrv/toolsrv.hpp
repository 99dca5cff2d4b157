#pragma once
/// toolsrv: the per-session 9P2000 tool server (spec §6). This is the whole daemon minus argument
/// parsing and the reading of the secret, so tests run it in-process with short timers.

#include <chrono>
#include <memory>
#include <string>

#include "lib9p/result.hpp"
#include "toolsrv/lifecycle.hpp"

namespace toolsrv {

struct Options {
  std::string address;      ///< `unix!<socket>`
  std::string cwd;          ///< the session cwd (absolute directory)
  std::string config_root;  ///< sandbox.yaml and the default tools/
  std::string secret;       ///< 64 hex digits every attach must present
  std::string bin_path;     ///< directory of the toolsrv executable ({OLLIE_BIN_PATH})
  std::chrono::steady_clock::duration startup_grace = startup_grace_default;
  std::chrono::steady_clock::duration idle_timeout = idle_timeout_default;
  unsigned threads = 2;     ///< io threads
};

class Toolsrv {
 public:
  explicit Toolsrv(Options opt);
  /// shutdown(), wait(), then kills every process group still running.
  ~Toolsrv();
  Toolsrv(const Toolsrv&) = delete;
  Toolsrv& operator=(const Toolsrv&) = delete;

  /// Creates the session, checks the socket's directory (0700, ours), listens, starts the
  /// io threads and the lifecycle clock.
  p9::Status start();
  /// Stops from any thread: every process group killed, socket removed, connections closed.
  /// Idempotent.
  void shutdown();
  /// Blocks until shutdown() ran (by a signal, the lifecycle, or a caller) and the io threads
  /// have ended.
  void wait();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// main() after argument parsing: runs until SIGINT, SIGTERM or a lifecycle timeout; returns
/// the exit status.
int run(Options opt);

}  // namespace toolsrv
