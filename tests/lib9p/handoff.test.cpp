// Handoff: a value set on one thread reaches the coroutine awaiting it on another, on the
// waiter's own executor; the wait is cancellable.
#include "lib9p/handoff.hpp"

#include <gtest/gtest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "support/coro.hpp"

using namespace std::chrono_literals;

using testing_support::OneThread;

TEST(Handoff, ResumesTheWaiterOnItsOwnThreadWithAValueSetFromAnother) {
  OneThread t;
  auto h = std::make_shared<p9::Handoff<std::string>>();
  auto got = asio::co_spawn(
      t.io,
      [h, &t]() -> asio::awaitable<std::pair<std::string, bool>> {
        auto v = co_await h->get();
        co_return std::pair{v, t.on_it()};
      },
      asio::use_future);
  std::this_thread::sleep_for(20ms);  // let it wait first
  h->set("done");
  ASSERT_EQ(got.wait_for(5s), std::future_status::ready);
  auto [v, on_its_thread] = got.get();
  EXPECT_EQ(v, "done");
  EXPECT_TRUE(on_its_thread);
}

TEST(Handoff, AValueSetBeforeTheWaitIsReturnedAtOnceAndOnlyTheFirstCounts) {
  OneThread t;
  p9::Handoff<int> h;
  h.set(1);
  h.set(2);
  auto got = asio::co_spawn(t.io, h.get(), asio::use_future);
  ASSERT_EQ(got.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(got.get(), 1);
}

TEST(Handoff, CancellingTheWaiterThrowsOperationAborted) {
  OneThread t;
  auto h = std::make_shared<p9::Handoff<int>>();
  asio::cancellation_signal sig;
  auto ended = t.start(h->get(), sig);
  std::this_thread::sleep_for(20ms);
  t.cancel(sig);
  ASSERT_EQ(ended.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(testing_support::aborted(ended.get()));
  h->set(3);  // nobody waits any more: harmless
}

TEST(Handoff, LosesARaceWithATimerThroughTheOrOperator) {
  using namespace asio::experimental::awaitable_operators;
  OneThread t;
  auto h = std::make_shared<p9::Handoff<int>>();
  auto got = asio::co_spawn(
      t.io,
      [h]() -> asio::awaitable<std::size_t> {
        asio::steady_timer timer(co_await asio::this_coro::executor, 30ms);
        auto r = co_await (h->get() || timer.async_wait(asio::use_awaitable));
        co_return r.index();
      },
      asio::use_future);
  ASSERT_EQ(got.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(got.get(), 1u);
}
