#include "toolsrv/notifier.hpp"

#include <vector>

namespace toolsrv {

Subscription& Subscription::operator=(Subscription&& other) noexcept {
  if (this != &other) {
    reset();
    state_ = std::move(other.state_);
    id_ = other.id_;
    other.id_ = 0;
  }
  return *this;
}

Subscription::~Subscription() { reset(); }

void Subscription::reset() {
  if (auto state = state_.lock()) {
    std::lock_guard lock(state->mu);
    state->waiters.erase(id_);
  }
  state_.reset();
  id_ = 0;
}

Notifier::Notifier() : state_(std::make_shared<Subscription::State>()) {}

std::uint64_t Notifier::version() const {
  std::lock_guard lock(state_->mu);
  return state_->version;
}

Subscription Notifier::when_changed(std::uint64_t seen, std::function<void()> wake) {
  {
    std::lock_guard lock(state_->mu);
    if (state_->version <= seen) {
      const auto id = state_->next_id++;
      state_->waiters.emplace(id, std::move(wake));
      return Subscription(state_, id);
    }
  }
  wake();
  return {};
}

void Notifier::notify() {
  std::vector<std::function<void()>> fire;
  {
    std::lock_guard lock(state_->mu);
    ++state_->version;
    for (auto& [id, fn] : state_->waiters) fire.push_back(std::move(fn));
    state_->waiters.clear();
  }
  for (auto& fn : fire) fn();
}

}  // namespace toolsrv
