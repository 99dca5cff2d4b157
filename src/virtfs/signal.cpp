#include "signal.hpp"

#include <algorithm>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

namespace virtfs {

struct Signal::Waiter {
  explicit Waiter(const asio::any_io_executor& ex) : timer(ex) {}
  asio::steady_timer timer;
};

std::uint64_t Signal::version() const {
  std::lock_guard lk(mu_);
  return version_;
}

void Signal::notify() {
  std::vector<std::weak_ptr<Waiter>> wake;
  {
    std::lock_guard lk(mu_);
    version_++;
    wake.swap(waiters_);
  }
  // A timer is touched only on its own executor (the waiting coroutine's strand).
  for (auto& weak : wake)
    if (auto w = weak.lock()) asio::post(w->timer.get_executor(), [w] { w->timer.cancel(); });
}

asio::awaitable<bool> Signal::wait(std::uint64_t seen, duration timeout) {
  auto w = std::make_shared<Waiter>(co_await asio::this_coro::executor);
  {
    std::lock_guard lk(mu_);
    if (version_ != seen) co_return true;
    w->timer.expires_after(timeout);
    waiters_.push_back(w);
  }
  co_await w->timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  {
    std::lock_guard lk(mu_);
    std::erase_if(waiters_, [&](const std::weak_ptr<Waiter>& x) { return x.expired() || x.lock() == w; });
  }
  auto cs = co_await asio::this_coro::cancellation_state;
  if (cs.cancelled() != asio::cancellation_type::none) throw std::system_error(asio::error::operation_aborted);
  co_return version() != seen;
}

}  // namespace virtfs
