#pragma once
/// olliesrv: the 9P2000 server of sessions, agents and backends. This is the whole daemon
/// minus argument parsing, so tests run it in-process on a socket of their own.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "event.hpp"
#include "lib9p/result.hpp"

namespace ollie {

struct Options {
  std::vector<std::string> addresses;  ///< dial strings; default unix!$NAMESPACE/ollie
  bool insecure_tcp = false;           ///< accept tcp! addresses (any peer may attach as the hostowner)
  unsigned threads = 0;                ///< io threads; 0 = one per core
  std::optional<std::size_t> max_connections;  ///< connections served at once; default lib9p's (half of RLIMIT_NOFILE)
  std::string toolsrv;                 ///< the toolsrv executable; default: beside olliesrv's
  std::chrono::milliseconds retry_unit{1000};  ///< one second of §8.2's retry waits (tests shorten it)
  std::chrono::milliseconds toolsrv_idle{30000};  ///< a local session's toolsrv stops after this long unneeded (tests shorten it)
};

class Olliesrv {
 public:
  explicit Olliesrv(Options opt);
  ~Olliesrv();
  Olliesrv(const Olliesrv&) = delete;
  Olliesrv& operator=(const Olliesrv&) = delete;

  /// Listens on every address and starts the io threads.
  p9::Status start();
  /// Graceful stop, from any thread: listeners closed and sockets removed, connections closed
  /// once their last replies are written. Idempotent.
  void shutdown();
  /// Whether shutdown() was called (a stop signal, root `ctl kill`).
  bool stopping() const;
  /// Blocks until shutdown() completed and every io thread has ended.
  void wait();

  Bus& bus();
  struct Hub& hub();
  const std::string& hostowner() const;
  /// The namespace declaration's help text (root `help`).
  const std::string& help() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// main(): parses nothing, runs until SIGINT, SIGTERM or `ctl kill`; returns the exit status.
int run(Options opt);

}  // namespace ollie
