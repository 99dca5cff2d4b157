#pragma once
/// When toolsrv exits on its own (spec §6.1): `startup_grace` after start if no client ever
/// attached, `idle_timeout` after the last connection closed once one has. One thread waits for
/// the deadline; the events come from any thread and only take a lock.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace toolsrv {

/// The spec's durations.
inline constexpr std::chrono::seconds startup_grace_default{60};
inline constexpr std::chrono::seconds idle_timeout_default{30};

class Lifecycle {
 public:
  using clock = std::chrono::steady_clock;

  /// Starts the startup-grace clock; `expire` runs once, on the lifecycle's thread, when a
  /// deadline passes.
  Lifecycle(clock::duration startup_grace, clock::duration idle_timeout, std::function<void()> expire);
  /// Stops the thread; `expire` does not run after this.
  ~Lifecycle();
  Lifecycle(const Lifecycle&) = delete;
  Lifecycle& operator=(const Lifecycle&) = delete;

  /// A client attached: the startup grace no longer applies.
  void attached();
  /// The number of attached connections changed (lib9p's ServerOptions::on_connections).
  void connections(std::size_t open);

 private:
  void loop();
  void rearm_locked();

  const clock::duration idle_timeout_;
  std::function<void()> expire_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool attached_ = false;
  bool stopping_ = false;
  std::size_t open_ = 0;
  std::optional<clock::time_point> deadline_;
  std::thread thread_;
};

}  // namespace toolsrv
