// What fids buffer is capped per fid and charged to their connection, released when the bytes
// are consumed or the fid dies.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "lib9p/client.hpp"
#include "support/demofs.hpp"
#include "support/testserver.hpp"

using namespace virtfs;

TEST(Buffer, ChargesItsConnectionAndReleasesOnTakeAndDestruction) {
  auto conn = std::make_shared<std::size_t>(0);
  Buffer a(conn);
  {
    Buffer b(conn);
    ASSERT_TRUE(a.append("hello"));
    ASSERT_TRUE(b.append("world!"));
    EXPECT_EQ(*conn, 11u);
  }
  EXPECT_EQ(*conn, 5u);  // b died unconsumed
  EXPECT_EQ(a.take(), "hello");
  EXPECT_EQ(*conn, 0u);
  Buffer none(nullptr);  // a connection without accounting
  EXPECT_TRUE(none.append("x"));
}

TEST(Buffer, PerFidAndPerConnectionCaps) {
  auto conn = std::make_shared<std::size_t>(MAX_CONN_BUFFERED - 10);
  Buffer a(conn);
  EXPECT_EQ(a.append(std::string(11, 'x')).ename(), conn_buffers_full);
  EXPECT_TRUE(a.append(std::string(10, 'x')));
  Buffer b(nullptr);
  EXPECT_EQ(b.append(std::string(MAX_WRITE + 1, 'x')).ename(), "write too large");
}

// Thousands of connections, each under its own cap, still meet the process' cap: a sandboxed
// tool that opened many connections to pin memory gets a clear refusal, and the bytes released
// are writable again.
TEST(Buffer, AllConnectionsTogetherMeetTheProcessCap) {
  std::vector<std::unique_ptr<Buffer>> held;
  const std::string chunk(MAX_WRITE, 'x');
  p9::Status last;
  for (std::size_t i = 0; i <= MAX_ALL_BUFFERED / MAX_WRITE && last; i++) {
    held.push_back(std::make_unique<Buffer>(std::make_shared<std::size_t>(0)));  // a connection each
    last = held.back()->append(chunk);
  }
  EXPECT_EQ(last.ename(), all_buffers_full);
  EXPECT_EQ(held.size(), MAX_ALL_BUFFERED / MAX_WRITE + 1);
  held.front()->clear();
  EXPECT_TRUE(held.back()->append(chunk));
}

namespace {

// The adapter driven directly, as lib9p would, with one connection count for several fids.
struct Conn : ::testing::Test {
  std::shared_ptr<testing_support::DemoState> st = std::make_shared<testing_support::DemoState>();
  std::shared_ptr<Adapter<testing_support::DemoCtx>> fs = testing_support::demo_fs(st);
  std::shared_ptr<std::size_t> buffered = std::make_shared<std::size_t>(0);

  std::unique_ptr<p9::Fid> opened(const std::string& name, std::uint8_t mode) {
    auto f = std::make_unique<p9::Fid>();
    f->conn_buffered = buffered;
    EXPECT_TRUE(fs->attach(*f, nullptr, "glenda", ""));
    EXPECT_TRUE(fs->walk1(*f, name));
    EXPECT_TRUE(fs->open(*f, mode));
    f->omode = mode;
    return f;
  }
  /// The same as agent1, an agent principal, on this connection.
  std::unique_ptr<p9::Fid> agent_opened(const std::string& name, std::uint8_t mode) {
    p9::Fid afid;
    afid.conn_buffered = buffered;
    EXPECT_TRUE(fs->auth(afid, "agent1", ""));
    afid.omode = p9::ORDWR;
    answer(afid, p9::Twrite, "key-agent1");
    auto f = std::make_unique<p9::Fid>();
    f->conn_buffered = buffered;
    EXPECT_TRUE(fs->attach(*f, &afid, "agent1", ""));
    EXPECT_TRUE(fs->walk1(*f, name));
    EXPECT_TRUE(fs->open(*f, mode));
    f->omode = mode;
    return f;
  }
  p9::Fcall answer(p9::Fid& f, std::uint8_t type, std::string data = {}, std::uint32_t count = 100) {
    p9::Fcall t;
    t.type = type;
    t.count = count;
    t.data = std::move(data);
    auto r = fs->answer_now(f, t);
    EXPECT_TRUE(r);
    return r ? *r : p9::Fcall{};
  }
};

// The root of a new connection to the server, attached as glenda.
p9::Result<p9::CFid> glenda_root(testing_support::TestServer& srv) {
  auto c = p9::Client::dial(srv.addr());
  if (!c) return c.error();
  return (*c)->attach("glenda");
}

}  // namespace

TEST_F(Conn, WritesPastTheConnectionCapAreRefusedUntilBuffersGo) {
  const std::string piece(8u << 20, 'x');
  std::vector<std::unique_ptr<p9::Fid>> fids;
  for (int i = 0; i < 4; i++) {
    fids.push_back(opened("sink", p9::OWRITE));
    EXPECT_EQ(answer(*fids.back(), p9::Twrite, piece).type, p9::Rwrite);
    EXPECT_EQ(answer(*fids.back(), p9::Twrite, piece).type, p9::Rwrite);
  }
  EXPECT_EQ(*buffered, MAX_CONN_BUFFERED);
  auto rdwr = opened("ctl", p9::ORDWR);
  EXPECT_EQ(answer(*rdwr, p9::Twrite, "x").ename, conn_buffers_full);
  EXPECT_EQ(answer(*fids[0], p9::Tclunk).type, p9::Rclunk);  // the handler consumed its buffer
  EXPECT_EQ(*buffered, 48u << 20);
  fids[1].reset();  // dropped without clunk (a hang-up)
  EXPECT_EQ(*buffered, 32u << 20);
  EXPECT_EQ(answer(*rdwr, p9::Twrite, "x").type, p9::Rwrite);  // a pending request is charged too
  EXPECT_EQ(*buffered, (32u << 20) + 1);
  auto ev = opened("event", p9::ORDWR);
  EXPECT_EQ(answer(*ev, p9::Twrite, "session.").type, p9::Rwrite);  // and a stream's filter
  EXPECT_EQ(*buffered, (32u << 20) + 9);
  p9::Fcall t;
  t.type = p9::Tread;
  t.count = 100;
  ASSERT_FALSE(fs->answer_now(*ev, t));  // the first read takes the filter (and then waits)
  EXPECT_EQ(*buffered, (32u << 20) + 1);
  fids.clear();
  rdwr.reset();
  EXPECT_EQ(*buffered, 0u);
}

// What the server made for a fid's reads (a Read's snapshot, an Rdwr's reply) is held as long
// as the fid: another principal's is charged like written bytes (an agent reading a 4 MB log.raw
// from thousands of fids pinned gigabytes), the hostowner's is not (a long log.raw stays hers).
TEST_F(Conn, WhatReadsHoldIsChargedForEveryoneButTheHostowner) {
  {
    std::lock_guard lk(st->mu);
    st->counter_text = std::string(8u << 20, 'x');
  }
  std::vector<std::unique_ptr<p9::Fid>> fids;
  for (int i = 0; i < 8; i++) {
    fids.push_back(agent_opened("counter", p9::OREAD));
    EXPECT_EQ(answer(*fids.back(), p9::Tread).type, p9::Rread);
  }
  EXPECT_EQ(*buffered, MAX_CONN_BUFFERED);
  auto ninth = agent_opened("counter", p9::OREAD);
  EXPECT_EQ(answer(*ninth, p9::Tread).ename, conn_reads_full);
  fids[0].reset();  // dropped: its snapshot goes, and its charge with it
  EXPECT_EQ(*buffered, MAX_CONN_BUFFERED - (8u << 20));
  EXPECT_EQ(answer(*ninth, p9::Tread).type, p9::Rread);
  auto mine = opened("counter", p9::OREAD);
  EXPECT_EQ(answer(*mine, p9::Tread).type, p9::Rread);
  EXPECT_EQ(*buffered, MAX_CONN_BUFFERED);
  fids.clear();
  ninth.reset();
  EXPECT_EQ(*buffered, 0u);
}

// The process' count refuses other principals' bytes, never the hostowner's: an agent that
// filled it locked the hostowner out of every write, `stop` and `kill` included.
TEST(Buffer, TheProcessCapNeverRefusesTheHostowner) {
  std::vector<std::unique_ptr<Buffer>> held;
  const std::string chunk(MAX_WRITE, 'x');
  p9::Status last;
  while (last) {
    held.push_back(std::make_unique<Buffer>(std::make_shared<std::size_t>(0)));
    last = held.back()->append(chunk);
  }
  EXPECT_EQ(last.ename(), all_buffers_full);
  Buffer hostowners(std::make_shared<std::size_t>(0), true);
  EXPECT_TRUE(hostowners.append(chunk));
}

// The same bound end to end: the real server gives every fid of a connection one count, so
// four Write fids filled to their 16 MiB leave no room for a fifth, on that connection only;
// a clunk runs its handler and gives the room back.
TEST(ConnBuffers, TheRealServerCapsWhatOneConnectionBuffers) {
  auto st = std::make_shared<testing_support::DemoState>();
  testing_support::TestServer srv(testing_support::demo_fs(st));
  auto root = glenda_root(srv);
  ASSERT_TRUE(root) << root.ename();
  auto sink = [&](const p9::CFid& r) {
    auto f = r.walk("sink");
    EXPECT_TRUE(f) << f.ename();
    EXPECT_TRUE(f->open(p9::OWRITE));
    return std::move(*f);
  };
  std::vector<p9::CFid> full;
  const std::string chunk(MAX_WRITE, 'x');
  for (int i = 0; i < 4; i++) {
    full.push_back(sink(*root));
    auto w = full.back().write(chunk);
    ASSERT_TRUE(w) << i << ": " << w.ename();
  }
  auto fifth = sink(*root);
  auto refused = fifth.write("y");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.ename(), conn_buffers_full);

  auto other_root = glenda_root(srv);  // another connection has its own room
  ASSERT_TRUE(other_root) << other_root.ename();
  auto theirs = sink(*other_root);
  EXPECT_TRUE(theirs.write("z"));

  ASSERT_TRUE(full.back().clunk());  // the handler takes the bytes
  EXPECT_TRUE(fifth.write("y"));
  std::lock_guard lk(st->mu);
  ASSERT_EQ(st->writes.size(), 1u);
  EXPECT_EQ(st->writes.front().size(), MAX_WRITE);
}

// A request cut off by a refused piece never takes effect (spec §1.7): the Write handler does not
// run at clunk, which answers the refusal; its bytes are given back at once; later pieces of it
// are refused too.
TEST_F(Conn, AWriteCutOffByARefusedPieceNeverRuns) {
  auto sink = opened("sink", p9::OWRITE);
  EXPECT_EQ(answer(*sink, p9::Twrite, std::string(MAX_WRITE - 1, 'x')).type, p9::Rwrite);
  EXPECT_EQ(answer(*sink, p9::Twrite, "yz").ename, "write too large");
  EXPECT_EQ(*buffered, 0u);
  EXPECT_EQ(answer(*sink, p9::Twrite, "z").ename, "write too large");
  EXPECT_EQ(answer(*sink, p9::Tclunk).ename, "write too large");
  std::lock_guard lk(st->mu);
  EXPECT_TRUE(st->writes.empty());
}

// The same for a Rdwr request, through the real server: the read that would run the handler
// answers the refusal instead, and the fid then takes a new request.
TEST(ConnBuffers, ARdwrRequestCutOffByARefusedPieceNeverRuns) {
  auto st = std::make_shared<testing_support::DemoState>();
  testing_support::TestServer srv(testing_support::demo_fs(st));
  auto root = glenda_root(srv);
  ASSERT_TRUE(root) << root.ename();
  auto ctl = root->walk("ctl");
  ASSERT_TRUE(ctl) << ctl.ename();
  ASSERT_TRUE(ctl->open(p9::ORDWR));
  ASSERT_TRUE(ctl->write(std::string(MAX_WRITE - 1, 'a')));
  auto refused = ctl->pwrite(0, "bc");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.ename(), "write too large");
  auto r = ctl->pread(0, 100);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "write too large");
  {
    std::lock_guard lk(st->mu);
    EXPECT_TRUE(st->requests.empty());
  }
  ASSERT_TRUE(ctl->pwrite(0, "again"));
  auto again = ctl->pread(0, 100);
  ASSERT_TRUE(again) << again.ename();
  EXPECT_EQ(*again, "reply:AGAIN");
  std::lock_guard lk(st->mu);
  ASSERT_EQ(st->requests.size(), 1u);
  EXPECT_EQ(st->requests.front(), "again");
}
