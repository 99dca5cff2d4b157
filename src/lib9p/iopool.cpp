#include "iopool.hpp"

#include <asio/signal_set.hpp>
#include <condition_variable>
#include <mutex>
#include <spdlog/spdlog.h>

namespace p9 {

IoPool::IoPool(unsigned threads) {
  unsigned n = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < n; i++) {
    ios_.push_back(std::make_unique<asio::io_context>(1));
    work_.push_back(asio::make_work_guard(*ios_.back()));
  }
}

IoPool::~IoPool() {
  release();
  join();
}

std::vector<asio::io_context*> IoPool::contexts() const {
  std::vector<asio::io_context*> v;
  for (auto& io : ios_) v.push_back(io.get());
  return v;
}

void IoPool::start() {
  for (auto& io : ios_) threads_.emplace_back([io = io.get()] { io->run(); });
}

void IoPool::release() {
  std::lock_guard lk(mu_);
  if (released_) return;
  released_ = true;
  for (auto& w : work_) w.reset();
  released_cv_.notify_all();
}

void IoPool::join(std::chrono::seconds grace) {
  {
    std::unique_lock lk(mu_);
    released_cv_.wait(lk, [&] { return released_; });
  }
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lk(mu);
    if (!cv.wait_for(lk, grace, [&] { return done; })) {
      spdlog::warn("connections still busy after {} s: stopping anyway", grace.count());
      for (auto& io : ios_) io->stop();
    }
  });
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  {
    std::lock_guard lk(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
}

struct StopSignals::Impl {
  asio::io_context io;
  asio::signal_set signals{io, SIGINT, SIGTERM};
  std::thread thread;
};

StopSignals::StopSignals(std::function<void()> stop) : impl_(std::make_unique<Impl>()) {
  impl_->signals.async_wait([stop = std::move(stop)](std::error_code ec, int sig) {
    if (ec) return;
    spdlog::info("signal {}", sig);
    stop();
  });
  impl_->thread = std::thread([io = &impl_->io] { io->run(); });
}

StopSignals::~StopSignals() {
  impl_->io.stop();
  impl_->thread.join();
}

}  // namespace p9
