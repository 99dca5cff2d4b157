// Memo (src/olliesrv/memo.hpp): the root's `models`, `agents` and `tools` are computed once and
// kept; a failure (a provider down) is kept for a while only, so a provider started after
// olliesrv is found without a root `invalidate`.
#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/detached.hpp>
#include <atomic>
#include <optional>
#include <thread>

#include "olliesrv/memo.hpp"

using namespace std::chrono_literals;

namespace {

p9::Result<std::string> read(const ollie::Memo<std::string>& m, asio::thread_pool& pool,
                             ollie::Memo<std::string>::Load load) {
  asio::io_context io;
  std::optional<p9::Result<std::string>> out;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> { out.emplace(co_await m.get(pool, load)); }, asio::detached);
  io.run();
  return *out;
}

}  // namespace

TEST(Memo, ASuccessIsKeptAFailureOnlyForAWhile) {
  asio::thread_pool pool(1);
  std::atomic<int> calls{0};
  std::atomic<bool> up{false};
  ollie::Memo<std::string> m(200ms);
  auto load = [&]() -> p9::Result<std::string> {
    calls++;
    if (!up) return p9::error("down");
    return std::string("list");
  };
  EXPECT_EQ(read(m, pool, load).ename(), "down");
  up = true;
  EXPECT_EQ(read(m, pool, load).ename(), "down");  // not asked again on every read
  EXPECT_EQ(calls, 1);
  std::this_thread::sleep_for(250ms);
  EXPECT_EQ(*read(m, pool, load), "list");  // asked again once the failure is old
  EXPECT_EQ(calls, 2);
  up = false;
  std::this_thread::sleep_for(250ms);
  EXPECT_EQ(*read(m, pool, load), "list");  // a success is kept until drop()
  EXPECT_EQ(calls, 2);
  m.drop();
  EXPECT_EQ(read(m, pool, load).ename(), "down");
  EXPECT_EQ(calls, 3);
  pool.join();
}
