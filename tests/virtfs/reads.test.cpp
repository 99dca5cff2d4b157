// Reads that arrive together: one Rdwr handler run answers every read in flight on its fid,
// and a zero-count read never waits.
#include <gtest/gtest.h>

#include "support/demofs.hpp"
#include "support/testserver.hpp"

using namespace p9;
using testing_support::Raw;
using testing_support::tflush;

namespace {

// A Rdwr handler that waits until the test opens the gate, like proc/new waits for its process.
struct Gate {
  std::mutex mu;
  int runs = 0;
  bool open = false;
  std::shared_ptr<virtfs::Signal> opened = std::make_shared<virtfs::Signal>();

  void release() {
    {
      std::lock_guard lk(mu);
      open = true;
    }
    opened->notify();
  }
  int ran() {
    std::lock_guard lk(mu);
    return runs;
  }
};

struct GateCtx {
  std::shared_ptr<Gate> gate;
};

asio::awaitable<p9::Result<std::string>> call(GateCtx& c, std::string req) {
  int run = 0;
  {
    std::lock_guard lk(c.gate->mu);
    run = ++c.gate->runs;
  }
  for (;;) {
    auto seen = c.gate->opened->version();
    {
      std::lock_guard lk(c.gate->mu);
      if (c.gate->open) break;
    }
    co_await c.gate->opened->wait(seen);
  }
  co_return "reply to " + req + " (run " + std::to_string(run) + ")\n";
}

std::shared_ptr<p9::FileServer> gate_fs(std::shared_ptr<Gate> gate) {
  using D = virtfs::Dsl<GateCtx>;
  using namespace virtfs;
  auto tree = build(D::Dir("/", Mode{0555},
      D::Leaf("call", Mode{0600}, Rdwr(call)),
      D::Leaf("status", Mode{0600}, DefaultRequest{"status"}, Rdwr(call))));
  if (!tree) throw std::runtime_error(tree.ename());
  Access<GateCtx> access;
  access.hostowner = "glenda";
  access.attach = [](const AttachRequest& r) -> p9::Result<Principal> { return Principal{r.uname, "", true}; };
  access.root = [gate](const Principal&) { return GateCtx{gate}; };
  return std::make_shared<Adapter<GateCtx>>(std::move(*tree), std::move(access));
}

struct Reads : ::testing::Test {
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  testing_support::TestServer srv{gate_fs(gate)};
  Raw c{srv.sock};

  void SetUp() override {
    c.version();
    ASSERT_EQ(c.attach(0, "glenda").type, Rattach);
  }
  void open(std::uint32_t fid, const std::string& name, std::uint8_t mode) {
    ASSERT_EQ(c.walk(0, fid, {name}).type, Rwalk);
    ASSERT_EQ(c.open(fid, mode).type, Ropen);
  }
  std::map<std::uint16_t, Fcall> replies(int n) {
    std::map<std::uint16_t, Fcall> got;
    for (int i = 0; i < n; i++) {
      auto r = c.recv();
      if (!r) break;
      got[r->tag] = *r;
    }
    return got;
  }
};

}  // namespace

TEST_F(Reads, TwoReadsInFlightShareOneHandlerRun) {  // e.g. proc/new
  open(1, "call", ORDWR);
  ASSERT_EQ(c.write(1, 0, "go").type, Rwrite);
  c.send(Raw::tread(1, 0, 100, 2));
  c.send(Raw::tread(1, 0, 100, 3));
  EXPECT_FALSE(c.recv(300));  // the second read waits for the call's reply, too
  gate->release();
  auto got = replies(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[2].data, "reply to go (run 1)\n");
  EXPECT_EQ(got[3].data, "reply to go (run 1)\n");
  EXPECT_EQ(gate->ran(), 1);
}

TEST_F(Reads, TwoReadsOfADefaultRequestShareOneHandlerRun) {
  open(1, "status", OREAD);
  c.send(Raw::tread(1, 0, 100, 2));
  c.send(Raw::tread(1, 0, 100, 3));
  EXPECT_FALSE(c.recv(300));
  gate->release();
  auto got = replies(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[2].data, "reply to status (run 1)\n");
  EXPECT_EQ(got[3].data, "reply to status (run 1)\n");
  EXPECT_EQ(gate->ran(), 1);
  EXPECT_EQ(c.read(1, 0).data, "reply to status (run 1)\n");  // and later reads keep it
  EXPECT_EQ(gate->ran(), 1);
}

TEST_F(Reads, AReadInFlightContinuesWhereTheRunningReadEnds) {
  open(1, "call", ORDWR);
  c.write(1, 0, "go");
  c.send(Raw::tread(1, 0, 6, 2));
  c.send(Raw::tread(1, 6, 100, 3));  // a non-zero offset continues the reply
  gate->release();
  auto got = replies(2);
  EXPECT_EQ(got[2].data, "reply ");
  EXPECT_EQ(got[3].data, "to go (run 1)\n");
}

TEST_F(Reads, AWriteWhileTheHandlerRunsStartsTheNextRequest) {  // §1.7
  open(1, "call", ORDWR);
  ASSERT_EQ(c.write(1, 0, "A").type, Rwrite);
  c.send(Raw::tread(1, 0, 100, 2));
  EXPECT_FALSE(c.recv(200));  // running
  ASSERT_EQ(c.write(1, 0, "B").type, Rwrite);
  gate->release();
  auto got = replies(1);
  EXPECT_EQ(got[2].data, "reply to A (run 1)\n");
  ASSERT_EQ(c.write(1, 0, "C").type, Rwrite);  // B was written after A's reply was asked for
  EXPECT_EQ(c.read(1, 0).data, "reply to BC (run 2)\n");
}

TEST_F(Reads, FlushingTheRunningReadInterruptsTheOthers) {
  open(1, "call", ORDWR);
  c.write(1, 0, "go");
  c.send(Raw::tread(1, 0, 100, 2));
  c.send(Raw::tread(1, 0, 100, 3));
  EXPECT_FALSE(c.recv(200));
  c.send(tflush(4, 2));
  auto got = replies(2);
  ASSERT_TRUE(got.contains(3));
  EXPECT_EQ(got[3].ename, "interrupted");  // the handler that would have answered it was cancelled
  EXPECT_EQ(got[4].type, Rflush);
  EXPECT_EQ(gate->ran(), 1);
}

// ---- zero-count reads -----------------------------------------------------------------------

struct ZeroCount : ::testing::Test {
  std::shared_ptr<testing_support::DemoState> st = std::make_shared<testing_support::DemoState>();
  testing_support::TestServer srv{testing_support::demo_fs(st)};
  Raw c{srv.sock};

  void SetUp() override {
    c.version();
    ASSERT_EQ(c.attach(0, "glenda").type, Rattach);
  }
  void open(std::uint32_t fid, const std::string& name, std::uint8_t mode) {
    ASSERT_EQ(c.walk(0, fid, {name}).type, Rwalk);
    ASSERT_EQ(c.open(fid, mode).type, Ropen);
  }
  std::optional<Fcall> read0(std::uint32_t fid) {
    c.send(Raw::tread(fid, 0, 0, 9));
    return c.recv(2000);
  }
};

TEST_F(ZeroCount, AStreamWithDataWaitingAnswersAtOnce) {
  st->log->append("waiting\n");
  open(1, "log", OREAD);
  auto r = read0(1);
  ASSERT_TRUE(r) << "a zero-count read blocked";
  EXPECT_EQ(r->type, Rread);
  EXPECT_EQ(r->data, "");
  EXPECT_EQ(c.read(1, 0).data, "waiting\n");  // nothing was consumed
}

TEST_F(ZeroCount, AnEmptyStreamAndAnUnchangedBlockOnceAnswerAtOnce) {
  open(1, "log", OREAD);
  open(2, "state", OREAD);
  auto r = read0(1);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->data, "");
  r = read0(2);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->data, "");
  st->set_value("thinking");
  EXPECT_EQ(c.read(2, 0).data, "thinking");  // the change is still there for a real read
}

TEST_F(ZeroCount, AFilterStaysSettableAfterAZeroCountRead) {
  open(1, "event", ORDWR);
  ASSERT_TRUE(read0(1));
  EXPECT_EQ(c.write(1, 0, "session.").type, Rwrite);
}
