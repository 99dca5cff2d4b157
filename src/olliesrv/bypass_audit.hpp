#pragma once
/// The bypass audit log (beyond the spec; doc/sandbox.md): every bypass decision as one JSON line
/// appended to `<data root>/bypass.audit.jsonl` (mode 0600). Lines are queued by the caller and
/// written on the hub's blocking pool, in order, so no I/O thread waits for the disk. The log is
/// bounded: past max_size it is renamed to `bypass.audit.jsonl.1` (replacing the previous one)
/// and a new one begins; at most max_queued lines wait, more are counted and reported by a
/// `{"dropped":<n>}` line.

#include <asio/thread_pool.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace ollie {

class BypassAudit {
 public:
  static constexpr std::size_t max_size = 8u << 20;
  static constexpr std::size_t max_queued = 4096;

  /// `path`: the log file; its directory is created 0700 when missing.
  BypassAudit(asio::thread_pool& pool, std::string path);
  /// Writes what still waits (olliesrv's end: the pool may not run it any more).
  ~BypassAudit();
  BypassAudit(const BypassAudit&) = delete;
  BypassAudit& operator=(const BypassAudit&) = delete;

  /// Queues one record (a JSON object) with `time` (RFC 3339, UTC) added first.
  void append(nlohmann::json record);

  const std::string& path() const { return state_->path; }

 private:
  struct State {
    std::string path;
    std::mutex mu;
    std::deque<std::string> queue;
    std::uint64_t dropped = 0;
    bool writing = false;
  };
  static void drain(const std::shared_ptr<State>& s);
  /// Writes one batch of lines (the blocking part).
  static void write(const std::string& path, const std::string& batch);

  asio::thread_pool& pool_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

/// `2026-12-01T14:07:05Z` for a Unix time.
std::string rfc3339(std::int64_t unix_seconds);

}  // namespace ollie
