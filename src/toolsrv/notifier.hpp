#pragma once
/// Notifier: a version counter with one-shot wake-up callbacks, so a 9P layer (Asio or not) can
/// wait for a growing stream or a state change without a thread per waiter and without polling.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace toolsrv {

/// Cancels its callback when destroyed or reset (e.g. on Tflush); harmless after it fired.
class Subscription {
 public:
  Subscription() = default;
  Subscription(Subscription&&) noexcept = default;
  Subscription& operator=(Subscription&& other) noexcept;
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;
  ~Subscription();

  /// Drops the callback if it has not fired yet.
  void reset();

 private:
  friend class Notifier;
  struct State;
  Subscription(std::weak_ptr<State> state, std::uint64_t id) : state_(std::move(state)), id_(id) {}
  std::weak_ptr<State> state_;
  std::uint64_t id_ = 0;
};

/// Version counter; notify() bumps it and fires every pending callback once.
class Notifier {
 public:
  Notifier();

  /// The current version; starts at 0.
  std::uint64_t version() const;

  /// Calls `wake` once, as soon as version() > seen: at once on the caller's thread if that holds
  /// already, else on the thread that calls notify(). `wake` must be quick (post, don't work) and
  /// must not call back into the object being watched while it holds a lock.
  Subscription when_changed(std::uint64_t seen, std::function<void()> wake);

  /// Bumps the version and fires the pending callbacks (outside the lock).
  void notify();

 private:
  std::shared_ptr<Subscription::State> state_;
};

struct Subscription::State {
  std::mutex mu;
  std::uint64_t version = 0;
  std::uint64_t next_id = 1;
  std::map<std::uint64_t, std::function<void()>> waiters;
};

}  // namespace toolsrv
