#pragma once
/// Signal: a change counter that coroutines wait on. Producers call notify() from any thread;
/// a waiter wakes on the next notify, on its timeout, or on cancellation (Tflush), costing a
/// suspended coroutine and a timer, never a thread.

#include <asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>

namespace virtfs {

class Signal {
 public:
  using duration = std::chrono::steady_clock::duration;

  std::uint64_t version() const;
  /// Bumps the version and wakes every waiter.
  void notify();
  /// Waits until the version differs from seen or timeout passes. Returns true when it changed.
  /// Throws std::system_error(operation_aborted) when the awaiting coroutine is cancelled.
  asio::awaitable<bool> wait(std::uint64_t seen, duration timeout = std::chrono::hours(24 * 365));

 private:
  struct Waiter;
  mutable std::mutex mu_;
  std::uint64_t version_ = 0;
  // Owned by the waiting coroutines: a frame destroyed without resuming (its io_context torn
  // down) takes its timer with it, and notify() skips it. A list: a waiter that times out or is
  // cancelled leaves by its own position (a scan per leaver made 65,000 flushed reads of one
  // stream cost minutes of the server's time).
  std::list<std::weak_ptr<Waiter>> waiters_;
};

}  // namespace virtfs
