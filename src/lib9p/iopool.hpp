#pragma once
/// The threads of a daemon: one io_context per thread, so that a connection (given to one
/// context by the Server) keeps all of its work on one thread. And the SIGINT/SIGTERM watcher.
/// A thread that has just run a handler may poll for the next one for up to 50 µs instead of
/// blocking, when it has measured that to be quicker (iopool.cpp, Waiter); an idle thread blocks.

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace p9 {

class IoPool {
 public:
  /// threads 0: one per core.
  explicit IoPool(unsigned threads);
  ~IoPool();
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  std::vector<asio::io_context*> contexts() const;
  /// Starts one thread per context.
  void start();
  /// Lets the threads end once their work runs out (call after the Server's stop()), from any
  /// thread. Idempotent.
  void release();
  /// Waits until release() was called, then joins the threads. Contexts still busy `grace`
  /// after that (a handler that ignores cancellation) are stopped, so a daemon always exits.
  void join(std::chrono::seconds grace = std::chrono::seconds(3));

 private:
  std::mutex mu_;
  std::condition_variable released_cv_;
  bool released_ = false;
  std::vector<std::unique_ptr<asio::io_context>> ios_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
};

/// Calls `stop` on the first SIGINT or SIGTERM, from a thread of its own, until destroyed.
class StopSignals {
 public:
  explicit StopSignals(std::function<void()> stop);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace p9
