#include "signal.hpp"

#include <algorithm>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <vector>

namespace virtfs {

struct Signal::Waiter {
  explicit Waiter(const asio::any_io_executor& ex) : timer(ex) {}
  asio::steady_timer timer;
  std::list<std::weak_ptr<Waiter>>::iterator at;  // in waiters_ until a notify takes them all
};

std::uint64_t Signal::version() const {
  std::lock_guard lk(mu_);
  return version_;
}

void Signal::notify() {
  std::list<std::weak_ptr<Waiter>> wake;
  {
    std::lock_guard lk(mu_);
    version_++;
    wake.swap(waiters_);
  }
  // A timer is touched only on its own executor (the waiting coroutine's strand). One post per
  // executor, not per waiter: a thousand readers of one stream over a few connections cost a few
  // posts per change.
  std::vector<std::pair<asio::any_io_executor, std::vector<std::shared_ptr<Waiter>>>> groups;
  for (auto& weak : wake) {
    auto w = weak.lock();
    if (!w) continue;
    auto ex = w->timer.get_executor();
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == ex; });
    if (g == groups.end()) g = groups.emplace(groups.end(), std::move(ex), std::vector<std::shared_ptr<Waiter>>{});
    g->second.push_back(std::move(w));
  }
  for (auto& [ex, ws] : groups)
    asio::post(ex, [ws = std::move(ws)] {
      for (const auto& w : ws) w->timer.cancel();
    });
}

asio::awaitable<bool> Signal::wait(std::uint64_t seen, duration timeout) {
  auto w = std::make_shared<Waiter>(co_await asio::this_coro::executor);
  {
    std::lock_guard lk(mu_);
    if (version_ != seen) co_return true;
    w->timer.expires_after(timeout);
    w->at = waiters_.insert(waiters_.end(), w);
  }
  co_await w->timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  bool changed;
  {
    std::lock_guard lk(mu_);
    changed = version_ != seen;
    // A notify since we queued took every entry, ours too: only a timeout or a cancellation
    // leaves ours behind.
    if (!changed) waiters_.erase(w->at);
  }
  auto cs = co_await asio::this_coro::cancellation_state;
  if (cs.cancelled() != asio::cancellation_type::none) throw std::system_error(asio::error::operation_aborted);
  co_return changed;
}

}  // namespace virtfs
