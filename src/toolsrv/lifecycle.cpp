#include "toolsrv/lifecycle.hpp"

#include <spdlog/spdlog.h>

namespace toolsrv {

Lifecycle::Lifecycle(clock::duration startup_grace, clock::duration idle_timeout, std::function<void()> expire)
    : idle_timeout_(idle_timeout), expire_(std::move(expire)), deadline_(clock::now() + startup_grace) {
  thread_ = std::thread([this] { loop(); });
}

Lifecycle::~Lifecycle() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Lifecycle::attached() {
  std::lock_guard lk(mu_);
  if (attached_) return;
  attached_ = true;
  rearm_locked();
}

void Lifecycle::connections(std::size_t open) {
  std::lock_guard lk(mu_);
  open_ = open;
  if (attached_) rearm_locked();
}

// Once attached: no deadline while a connection is open, the idle timeout from the moment the
// last one closed. Before that the startup deadline stands whatever connects.
void Lifecycle::rearm_locked() {
  if (open_ > 0) deadline_.reset();
  else if (!deadline_) deadline_ = clock::now() + idle_timeout_;
  cv_.notify_all();
}

void Lifecycle::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    if (stopping_) return;
    if (!deadline_) {
      cv_.wait(lk);
      continue;
    }
    auto when = *deadline_;
    if (clock::now() < when) {
      cv_.wait_until(lk, when);
      continue;
    }
    spdlog::info(attached_ ? "no connection left: idle timeout" : "no client attached: startup grace over");
    deadline_.reset();
    lk.unlock();
    expire_();
    return;
  }
}

}  // namespace toolsrv
