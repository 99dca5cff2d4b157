// A Gate lets `limit` holders in at once; the rest wait in line until a Pass is given back, and
// a waiter that is cancelled (a Tflush) leaves the line without taking a place.
#include <gtest/gtest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <optional>
#include <vector>

#include "virtfs/gate.hpp"

using virtfs::Gate;

namespace {

struct Line {
  asio::io_context io;
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  std::vector<std::optional<Gate::Pass>> passes = std::vector<std::optional<Gate::Pass>>(4);
  std::vector<int> entered;
  std::vector<int> aborted;

  void join(int k, std::size_t limit, asio::cancellation_slot slot = {}) {
    asio::co_spawn(
        io,
        [this, k, limit]() -> asio::awaitable<void> {
          try {
            auto pass = co_await gate->enter(limit);
            passes[k].emplace(std::move(pass));
            entered.push_back(k);
          } catch (const std::system_error&) {
            aborted.push_back(k);
          }
        },
        asio::bind_cancellation_slot(slot, asio::detached));
  }
  void settle() {
    io.restart();
    io.poll();
  }
};

}  // namespace

TEST(Gate, TheLimitGetInAndTheNextWaitsForAPassGivenBack) {
  Line l;
  for (int k = 0; k < 3; k++) l.join(k, 2);
  l.settle();
  EXPECT_EQ(l.entered, (std::vector<int>{0, 1}));
  l.passes[1].reset();
  l.settle();
  EXPECT_EQ(l.entered, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(l.passes[2]);
}

TEST(Gate, ACancelledWaiterLeavesTheLineWithoutAPlace) {
  Line l;
  asio::cancellation_signal flush;
  l.join(0, 1);
  l.join(1, 1, flush.slot());
  l.join(2, 1);
  l.settle();
  EXPECT_EQ(l.entered, (std::vector<int>{0}));
  flush.emit(asio::cancellation_type::terminal);
  l.settle();
  EXPECT_EQ(l.aborted, (std::vector<int>{1}));
  l.passes[0].reset();
  l.settle();
  EXPECT_EQ(l.entered, (std::vector<int>{0, 2}));  // the flushed one took nothing
  l.passes[2].reset();
  l.join(3, 1);
  l.settle();
  EXPECT_EQ(l.entered, (std::vector<int>{0, 2, 3}));
}
