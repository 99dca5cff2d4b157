#pragma once
/// Blocking work (files, fsync, backend resolution) on the hub's blocking pool, awaited from an
/// I/O thread: the one way olliesrv keeps such calls off the threads that serve 9P.

#include <asio/co_spawn.hpp>
#include <asio/use_awaitable.hpp>
#include <optional>
#include <type_traits>

#include "hub.hpp"

namespace ollie {

/// `f()` on the hub's blocking pool; its result, if any. Once started, `f` runs to its end even
/// if the awaiting request is flushed.
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

}  // namespace ollie
