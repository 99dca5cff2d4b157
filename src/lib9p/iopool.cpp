#include "iopool.hpp"

#include <sys/resource.h>

#include <asio/signal_set.hpp>
#include <algorithm>
#include <chrono>
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

namespace {

// How an I/O thread waits for its next handler. Blocking in epoll_wait costs a sleep and a
// wake-up per request; polling (epoll_wait with no timeout) for a few microseconds after a
// handler catches a client that answers at once from another core, without them (measured on the
// project's 2-core VM: the next request came 25-40 µs after a reply when polling, 50-100 µs when
// blocking). But a spinning thread holds up a client that the scheduler put on the same core
// (there blocking measured 15-20 µs, spinning 60-90), and competes with anything else that wants
// the core. So the thread measures both: how long it waits for the next handler when it blocks
// and when it spins (a moving average each), and spins only while spinning is measured to be the
// quicker. To follow a change it tries the other way once every 128 waits; a spin tried that way
// and found slower again doubles the interval, up to 4096 waits (on a shared core a spin holds up
// the client). A spin lasts at most `window`, so a thread that was idle before and is idle after
// spends at most that much CPU.
class Waiter {
 public:
  using Clock = std::chrono::steady_clock;
  using Micros = std::chrono::microseconds;
  static constexpr Micros window{50};

  explicit Waiter(asio::io_context& io) : io_(io) {}

  // Runs io until it is out of work or stopped, as io.run() does.
  void run() {
    for (;;) {
      bool spinning = avg_[1] < avg_[0];
      bool trial = --until_trial_ == 0;
      bool spin = spinning != trial;
      auto t0 = Clock::now();
      bool ran = spin && poll_for(t0 + window);
      if (!ran && !io_.run_one()) return;
      // Under 2 µs there was no wait: a handler was already queued. A wait is counted as at most
      // 4 windows, so a long idle time does not leave the average stuck above the window.
      auto waited = std::min(std::chrono::duration_cast<Micros>(Clock::now() - t0), cap);
      if (waited >= Micros(2)) avg_[spin] += (waited - avg_[spin]) / 4;
      if (trial) {
        bool worse = spin && waited >= avg_[0];
        trial_every_ = worse ? std::min(trial_every_ * 2, 4096u) : 128;
        until_trial_ = trial_every_;
      }
    }
  }

 private:
  static constexpr Micros cap = window * 4;

  // Polls until a handler runs (true) or the deadline passes or io stops (false). A poll takes
  // about a microsecond; after a longer gap the thread asks the kernel whether it was preempted.
  // If so the core is wanted by someone else, whose time slice can stall a request for
  // milliseconds (which the capped average would not show): spinning counts as the slowest until
  // measured otherwise.
  bool poll_for(Clock::time_point deadline) {
    for (auto t = Clock::now();;) {
      if (io_.poll()) return true;
      if (io_.stopped()) return false;
      auto now = Clock::now();
      if (now - t > window / 2 && preempted()) {
        avg_[1] = cap;
        return false;
      }
      if (now >= deadline) return false;
      t = now;
    }
  }

  // Whether the thread was switched out involuntarily since the last call.
  bool preempted() {
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    bool more = ru.ru_nivcsw != nivcsw_;
    nivcsw_ = ru.ru_nivcsw;
    return more;
  }

  asio::io_context& io_;
  Micros avg_[2] = {cap, cap};  // the average wait: [0] blocking, [1] spinning
  unsigned trial_every_ = 128, until_trial_ = 128;  // waits between tries of the other way
  long nivcsw_ = 0;
};

}  // namespace

void IoPool::start() {
  for (auto& io : ios_) threads_.emplace_back([io = io.get()] { Waiter(*io).run(); });
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
