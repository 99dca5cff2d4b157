#pragma once
/// Blocking work (files, fsync, backend resolution, prompt commands) on a pool, awaited from an
/// I/O thread: the one way olliesrv keeps such calls off the threads that serve 9P.

#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <system_error>
#include <type_traits>

#include "hub.hpp"

namespace ollie {

/// `f()` on the hub's blocking pool; its result, if any. Once started, `f` runs to its end even
/// if the awaiting request is flushed, and the request waits for it.
template <class T, class F>
asio::awaitable<T> off_io(Hub& hub, F f) {
  if constexpr (std::is_void_v<T>) {
    // Named, not a temporary: GCC 12 destroys a temporary closure of a co_await expression twice.
    auto run = [f = std::move(f)]() -> asio::awaitable<void> {
      f();
      co_return;
    };
    co_await asio::co_spawn(hub.blocking, run, asio::use_awaitable);
  } else {
    // optional: co_spawn needs a default-constructible result.
    auto run = [f = std::move(f)]() -> asio::awaitable<std::optional<T>> { co_return f(); };
    auto r = co_await asio::co_spawn(hub.blocking, run, asio::use_awaitable);
    co_return std::move(*r);
  }
}

/// `f()` on `pool`, for work that may take long (a command, a provider's answer): a
/// cancellation of the awaiting coroutine (Tflush, stop) ends the wait at once, calls `hurry`
/// (to tell `f` to end early) and throws operation_aborted. `f` then runs on unawaited: it
/// must own what it uses. The wait is a timer the work cancels when it is done. Pass `f` and
/// `hurry` as named objects (GCC 12, as for off_io).
template <class T, class F>
asio::awaitable<T> off_io_cancellable(asio::thread_pool& pool, F f, std::function<void()> hurry = {}) {
  struct Shared {
    explicit Shared(const asio::any_io_executor& ex) : done(ex, asio::steady_timer::time_point::max()) {}
    asio::steady_timer done;
    std::conditional_t<std::is_void_v<T>, bool, std::optional<T>> value{};
    std::exception_ptr error;
  };
  // Nothing starts for a waiter already gone.
  auto cs = co_await asio::this_coro::cancellation_state;
  if (cs.cancelled() != asio::cancellation_type::none) throw std::system_error(asio::error::operation_aborted);
  // No temporary in a co_await expression (GCC 12 destroys those twice): the executor first.
  const asio::any_io_executor ex = co_await asio::this_coro::executor;
  auto sh = std::make_shared<Shared>(ex);
  asio::post(pool, [sh, f = std::move(f)]() mutable {
    try {
      if constexpr (std::is_void_v<T>) f();
      else sh->value.emplace(f());
    } catch (...) {
      sh->error = std::current_exception();
    }
    asio::post(sh->done.get_executor(), [sh] { sh->done.cancel(); });
  });
  (void)co_await sh->done.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  if (cs.cancelled() != asio::cancellation_type::none) {
    if (hurry) hurry();
    throw std::system_error(asio::error::operation_aborted);
  }
  if (sh->error) std::rethrow_exception(sh->error);
  if constexpr (!std::is_void_v<T>) co_return std::move(*sh->value);
}

}  // namespace ollie
