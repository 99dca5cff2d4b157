// The asynchronous lib9p client against the real toolsrv binary, as olliesrv's agents will use
// it: Tauth with the secret, proc/new as one awaited call, and a cancelled call whose process
// group toolsrv kills.
#include "lib9p/async_client.hpp"

#include <gtest/gtest.h>

#include "daemon.hpp"
#include "support/coro.hpp"

using namespace toolsrv::test;
using testing_support::aborted;
using testing_support::must;

namespace {

struct ToolsrvAsync : ::testing::Test {
  Daemon d;
  testing_support::OneThread t;

  void SetUp() override { ASSERT_TRUE(d.listening()) << d.err_text(); }

  asio::awaitable<p9::AsyncFid> mount(std::shared_ptr<p9::AsyncClient>& c) {
    c = must(co_await p9::AsyncClient::dial(t.io.get_executor(), d.addr()), "dial");
    auto root = must(co_await c->attach_with_secret("olliesrv", test_secret), "attach");
    auto ctl = must(co_await root.walk("ctl"), "walk ctl");
    must(co_await ctl.open(p9::OWRITE), "open ctl");
    must(co_await ctl.write("load a1 shell\n"), "load");
    must(co_await ctl.clunk(), "clunk ctl");
    co_return root;
  }
};

}  // namespace

TEST_F(ToolsrvAsync, AttachesWithTheSecretAndRunsProcNewAsOneCall) {
  auto out = t.run([&]() -> asio::awaitable<std::string> {
    std::shared_ptr<p9::AsyncClient> c;
    auto root = co_await mount(c);
    auto wrong = co_await c->attach_with_secret("olliesrv", std::string(64, '0'));
    EXPECT_FALSE(wrong);
    co_return must(co_await root.call("proc/new", "tool=shell\nagent=a1\n\n{\"cmd\":\"echo hi\"}", 1u << 20), "proc/new");
  }());
  EXPECT_NE(out.find("hi\n"), std::string::npos) << out;
}

TEST_F(ToolsrvAsync, ACancelledCallIsFlushedAndToolsrvKillsItsProcess) {
  std::shared_ptr<p9::AsyncClient> c;
  auto root = t.run(mount(c));
  asio::cancellation_signal sig;
  auto ended = t.start(root.call("proc/new", "tool=shell\nagent=a1\ntimeout=0\n\n{\"cmd\":\"echo started > child; sleep 1000\"}", 1u << 20), sig);
  ASSERT_TRUE(eventually([&] { return read_file(d.cwd + "/child") == "started\n"; }));
  t.cancel(sig);
  ASSERT_EQ(ended.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  EXPECT_TRUE(aborted(ended.get()));
  auto wait = t.run([&]() -> asio::awaitable<std::string> {
    auto f = must(co_await root.walk("proc/1/wait"), "walk wait");
    must(co_await f.open(p9::OREAD), "open wait");
    co_return must(co_await f.read_all(1u << 20), "read wait");
  }());
  EXPECT_EQ(wait, "pid=1\nstatus=signaled\nsignal=9\nstdout=0\nstderr=0\n");
  t.run([&]() -> asio::awaitable<void> {  // dropped on the io thread
    root = {};
    c.reset();
    co_return;
  }());
}
