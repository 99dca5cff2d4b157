#pragma once
/// Handoff<T>: the one way a result made by a callback (on any thread) reaches the coroutine
/// that awaits it. set() from anywhere; `co_await get()` resumes the waiter on its own executor.
/// The wait costs a suspended coroutine and a timer, never a thread, and is cancelled with the
/// awaiting coroutine (Tflush, `||` with a timer, a cancellation_signal).

#include <asio/awaitable.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>

namespace p9 {

template <class T>
class Handoff {
 public:
  /// Hands v over, from any thread. Only the first value counts.
  void set(T v) {
    std::shared_ptr<asio::steady_timer> waiter;
    {
      std::lock_guard lk(mu_);
      if (given_) return;
      given_ = true;
      value_.emplace(std::move(v));
      waiter = waiter_.lock();
    }
    if (waiter) asio::post(waiter->get_executor(), [waiter] { waiter->cancel(); });
  }

  /// The value, once; waits for it on the calling coroutine's executor. A value already there
  /// is returned even to a cancelled coroutine; otherwise cancellation (before or during the
  /// wait) throws std::system_error(operation_aborted).
  asio::awaitable<T> get() {
    auto timer = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor,
                                                      asio::steady_timer::time_point::max());
    asio::cancellation_state state = co_await asio::this_coro::cancellation_state;
    const bool cancelled = state.cancelled() != asio::cancellation_type::none;
    {
      std::lock_guard lk(mu_);
      if (value_) co_return take();
      if (cancelled) throw std::system_error(asio::error::operation_aborted);
      waiter_ = timer;
    }
    (void)co_await timer->async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    std::lock_guard lk(mu_);
    if (value_) co_return take();
    throw std::system_error(asio::error::operation_aborted);
  }

 private:
  T take() {
    T v = std::move(*value_);
    value_.reset();
    return v;
  }

  std::mutex mu_;
  bool given_ = false;
  std::optional<T> value_;
  // Owned by the waiting coroutine: a frame destroyed without resuming takes it along.
  std::weak_ptr<asio::steady_timer> waiter_;
};

}  // namespace p9
