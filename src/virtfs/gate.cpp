#include "gate.hpp"

namespace virtfs {

Gate::Pass::~Pass() {
  if (!g_) return;  // moved from
  {
    std::lock_guard lk(g_->mu_);
    g_->held_--;
  }
  g_->freed_.notify();
}

asio::awaitable<Gate::Pass> Gate::enter(std::size_t limit) {
  for (;;) {
    const auto seen = freed_.version();
    {
      std::lock_guard lk(mu_);
      if (held_ < limit) {
        held_++;
        break;
      }
    }
    co_await freed_.wait(seen);
  }
  co_return Pass(shared_from_this());
}

}  // namespace virtfs
