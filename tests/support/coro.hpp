#pragma once
// Test support for coroutines: an io_context run by one thread of its own (as olliesrv's agents
// have it), with ways to run a coroutine there and wait for its result or its end.

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <future>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <type_traits>

#include "lib9p/result.hpp"

namespace testing_support {

struct OneThread {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};

  /// Stops the context (whatever still waits is destroyed with it) and joins the thread.
  ~OneThread() {
    work.reset();
    io.stop();
    thread.join();
  }
  bool on_it() const { return thread.get_id() == std::this_thread::get_id(); }

  /// Runs a here; the future has its result (co_spawn's own want a default-constructible T).
  template <class T>
  std::future<T> start(asio::awaitable<T> a) {
    auto p = std::make_shared<std::promise<T>>();
    auto f = p->get_future();
    asio::co_spawn(io, [p, a = std::move(a)]() mutable -> asio::awaitable<void> {
      try {
        if constexpr (std::is_void_v<T>) {
          co_await std::move(a);
          p->set_value();
        } else {
          p->set_value(co_await std::move(a));
        }
      } catch (...) {
        p->set_exception(std::current_exception());
      }
    }, asio::detached);
    return f;
  }

  /// Runs a here, cancellable through sig; the future has how it ended (null: it returned).
  template <class T>
  std::future<std::exception_ptr> start(asio::awaitable<T> a, asio::cancellation_signal& sig) {
    auto p = std::make_shared<std::promise<std::exception_ptr>>();
    auto f = p->get_future();
    asio::co_spawn(io, [a = std::move(a)]() mutable -> asio::awaitable<void> { (void)co_await std::move(a); },
                   asio::bind_cancellation_slot(sig.slot(), [p](std::exception_ptr e) { p->set_value(e); }));
    return f;
  }

  /// Emits a terminal cancellation on sig from this thread, as Asio wants.
  void cancel(asio::cancellation_signal& sig) {
    asio::post(io, [&sig] { sig.emit(asio::cancellation_type::terminal); });
  }

  /// Runs a here and waits for its result (10 s at most).
  template <class T>
  T run(asio::awaitable<T> a) {
    auto f = start(std::move(a));
    if (f.wait_for(std::chrono::seconds(10)) != std::future_status::ready) throw std::runtime_error("timed out");
    return f.get();
  }
};

/// The value, or an exception naming what failed (ends the coroutine, fails the test).
template <class T>
T must(p9::Result<T> r, const std::string& what) {
  if (!r) throw std::runtime_error(what + ": " + r.ename());
  return std::move(*r);
}

inline void must(p9::Status st, const std::string& what) {
  if (!st) throw std::runtime_error(what + ": " + st.ename());
}

/// Whether a coroutine ended with operation_aborted (it was cancelled).
inline bool aborted(std::exception_ptr e) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const std::system_error& x) {
    return x.code() == asio::error::operation_aborted;
  } catch (...) {
  }
  return false;
}

}  // namespace testing_support
