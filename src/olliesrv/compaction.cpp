#include "compaction.hpp"

#include "agent.hpp"

namespace ollie {

bool compactable(const Agent& a) {
  std::lock_guard lock(a.mu);
  return a.history.size() > HOT_ZONE;
}

asio::awaitable<p9::Result<std::size_t>> compact(std::shared_ptr<Agent> a, std::shared_ptr<Session> s) {
  (void)a;
  (void)s;
  co_return p9::error("compact: not available yet");
}

}  // namespace ollie
