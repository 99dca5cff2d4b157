#pragma once
/// Memo<T>: the outcome of a computation run on a thread pool (blocking work: HTTP fetches,
/// directory scans), kept until drop(); a failure only for a while (a provider that did not
/// answer is not asked again on every read, but one started after olliesrv is found without an
/// `invalidate`). Concurrent first readers share one computation. Waiting costs
/// a suspended coroutine (virtfs::Signal), never a thread; a cancelled waiter (Tflush) leaves the
/// computation running, and its outcome is kept for the next reader.

#include <asio/awaitable.hpp>
#include <asio/post.hpp>
#include <asio/thread_pool.hpp>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "lib9p/result.hpp"
#include "virtfs/signal.hpp"

namespace ollie {

template <class T>
class Memo {
 public:
  using Load = std::function<p9::Result<T>()>;
  using Clock = std::chrono::steady_clock;

  /// `failure_kept`: how long a failed outcome is kept.
  explicit Memo(Clock::duration failure_kept = std::chrono::seconds(30)) : failure_kept_(failure_kept) {}

  /// Starts the computation on `pool` unless an outcome is kept or one is running.
  void prefetch(asio::thread_pool& pool, Load load) const { (void)begin(pool, std::move(load)); }

  /// The kept outcome, else that of the running computation, else of a new one on `pool`.
  asio::awaitable<p9::Result<T>> get(asio::thread_pool& pool, Load load) const {
    auto got = co_await get(pool, std::move(load), Clock::duration::max());
    co_return std::move(*got);
  }

  /// As get, waiting at most `patience`: nullopt when the computation has not ended by then (it
  /// goes on, and its outcome is kept for the next reader).
  asio::awaitable<std::optional<p9::Result<T>>> get(asio::thread_pool& pool, Load load, Clock::duration patience) const {
    auto s = s_;
    auto f = begin(pool, std::move(load));
    const auto end = patience == Clock::duration::max() ? Clock::time_point::max() : Clock::now() + patience;
    for (;;) {
      const auto seen = f->done.version();
      {
        std::lock_guard lock(s->mu);
        if (f->outcome) co_return *f->outcome;
      }
      const auto now = Clock::now();
      if (now >= end) co_return std::nullopt;
      if (end == Clock::time_point::max()) co_await f->done.wait(seen);
      else co_await f->done.wait(seen, end - now);
    }
  }

  /// Forgets the outcome; a computation still running delivers to its waiters but is not kept.
  void drop() const {
    std::lock_guard lock(s_->mu);
    s_->current.reset();
  }

 private:
  struct Flight {
    virtfs::Signal done;
    std::optional<p9::Result<T>> outcome;  ///< under State::mu
    Clock::time_point finished;             ///< under State::mu, with the outcome
  };
  struct State {
    std::mutex mu;
    std::shared_ptr<Flight> current;  ///< running or done; null after drop()
  };

  std::shared_ptr<Flight> begin(asio::thread_pool& pool, Load load) const {
    auto s = s_;
    std::shared_ptr<Flight> f;
    {
      std::lock_guard lock(s->mu);
      const auto& c = s->current;
      if (c && !(c->outcome && !*c->outcome && Clock::now() - c->finished >= failure_kept_)) return c;
      f = s->current = std::make_shared<Flight>();
    }
    asio::post(pool, [s, f, load = std::move(load)] {
      std::optional<p9::Result<T>> r;
      try {
        r.emplace(load());
      } catch (const std::exception& e) {
        r.emplace(p9::error(e.what()));
      }
      {
        std::lock_guard lock(s->mu);
        f->outcome = std::move(r);
        f->finished = Clock::now();
      }
      f->done.notify();
    });
    return f;
  }

  Clock::duration failure_kept_;
  std::shared_ptr<State> s_ = std::make_shared<State>();
};

}  // namespace ollie
