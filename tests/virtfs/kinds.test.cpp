// Every file kind of spec §1.7 over a real socket, driven the way ollie-9p and plan9port's 9p drive them.
#include <gtest/gtest.h>

#include <chrono>

#include "support/demofs.hpp"
#include "support/testserver.hpp"

using namespace p9;
using testing_support::Raw;
using testing_support::tflush;

namespace {

struct Kinds : ::testing::Test {
  std::shared_ptr<testing_support::DemoState> st = std::make_shared<testing_support::DemoState>();
  testing_support::TestServer srv{testing_support::demo_fs(st)};
  std::unique_ptr<Raw> c = attached("glenda");

  std::unique_ptr<Raw> attached(const std::string& uname) {
    auto r = std::make_unique<Raw>(srv.sock);
    r->version();
    if (uname == "glenda") {
      EXPECT_EQ(r->attach(0, uname).type, Rattach);
      return r;
    }
    Fcall t;
    t.type = Tauth;
    t.afid = 100;
    t.uname = uname;
    EXPECT_EQ(r->rpc(t).type, Rauth);
    EXPECT_EQ(r->write(100, 0, "key-" + uname).type, Rwrite);
    EXPECT_EQ(r->attach(0, uname, 100).type, Rattach);
    return r;
  }
  void open(std::uint32_t fid, const std::string& name, std::uint8_t mode, Raw* on = nullptr) {
    on = on ? on : c.get();
    ASSERT_EQ(on->walk(0, fid, {name}).type, Rwalk) << name;
    auto r = on->open(fid, mode);
    ASSERT_EQ(r.type, Ropen) << name << ": " << r.ename;
  }
  std::vector<std::string> writes() {
    std::lock_guard lk(st->mu);
    return st->writes;
  }
};

}  // namespace

// ---- Read -----------------------------------------------------------------------------------

TEST_F(Kinds, ReadIsASnapshotPerFid) {
  st->counter_text = "first version";
  open(1, "counter", OREAD);
  EXPECT_EQ(c->read(1, 0, 5).data, "first");
  st->counter_text = "second version";
  EXPECT_EQ(c->read(1, 5, 100).data, " version");  // same snapshot, by offset
  EXPECT_EQ(c->read(1, 0, 100).data, "first version");
  EXPECT_EQ(c->read(1, 13, 100).data, "");  // EOF
  open(2, "counter", OREAD);
  EXPECT_EQ(c->read(2, 0, 100).data, "second version");  // re-open for fresh content
}

// ---- Write ----------------------------------------------------------------------------------

TEST_F(Kinds, WriteRunsOnceAtClunkWithEveryPiece) {
  open(1, "sink", OWRITE | OTRUNC);  // what 9p write sends
  std::string prompt;
  for (int i = 0; i < 5; i++) {
    std::string piece(4096, static_cast<char>('a' + i));
    auto r = c->write(1, i * 4096, piece);
    ASSERT_EQ(r.count, 4096u);
    prompt += piece;
  }
  EXPECT_TRUE(writes().empty());
  ASSERT_EQ(c->clunk(1).type, Rclunk);
  ASSERT_EQ(writes().size(), 1u);
  EXPECT_EQ(writes()[0], prompt);
}

TEST_F(Kinds, WriteIgnoresOffsets) {
  open(1, "sink", OWRITE);
  c->write(1, 100, "one ");
  c->write(1, 0, "two");
  c->clunk(1);
  ASSERT_EQ(writes().size(), 1u);
  EXPECT_EQ(writes()[0], "one two");
}

TEST_F(Kinds, EmptyWriteDoesNotRunTheHandler) {
  open(1, "sink", OWRITE);
  c->clunk(1);
  open(1, "sink", OWRITE);
  c->write(1, 0, "");
  c->clunk(1);
  EXPECT_TRUE(writes().empty());
}

TEST_F(Kinds, WriteHandlerErrorIsTheClunkError) {
  open(1, "sink", OWRITE);
  c->write(1, 0, "fail\n");
  EXPECT_EQ(c->clunk(1).ename, "sink refused: fail");
}

TEST_F(Kinds, HalfWrittenRequestIsDroppedOnHangUp) {
  {
    auto other = attached("glenda");
    open(1, "sink", OWRITE, other.get());
    other->write(1, 0, "half");
  }
  c->walk(0, 9, {});  // a round trip, so the server has seen the other hang up
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(writes().empty());
}

TEST_F(Kinds, WriteTooLarge) {
  open(1, "sink", OWRITE);
  std::string mb(8168, 'x');
  Fcall r;
  for (std::size_t sent = 0; sent <= (16u << 20); sent += mb.size()) {
    r = c->write(1, 0, mb);
    if (r.type == Rerror) break;
  }
  EXPECT_EQ(r.ename, "write too large");
}

TEST_F(Kinds, ReadWriteFileServesBoth) {
  open(1, "note", OWRITE | OTRUNC);
  c->write(1, 0, "remember");
  c->clunk(1);
  open(1, "note", OREAD);
  EXPECT_EQ(c->read(1, 0).data, "remember");
}

// ---- Rdwr -----------------------------------------------------------------------------------

TEST_F(Kinds, RdwrWriteThenRead) {  // ollie-9p rdwr
  open(1, "ctl", ORDWR);
  c->write(1, 0, "status ");
  c->write(1, 7, "please");
  EXPECT_EQ(c->read(1, 13, 4).data, "repl");  // the reply from its start, whatever the offset
  EXPECT_EQ(c->read(1, 17, 100).data, "y:STATUS PLEASE");
  EXPECT_EQ(c->read(1, 32, 100).data, "");
  EXPECT_EQ(c->read(1, 0, 100).data, "reply:STATUS PLEASE");  // offset 0 restarts
  ASSERT_EQ(st->requests.size(), 1u);
}

TEST_F(Kinds, RdwrPendingRequestRunsAtClunk) {  // echo stop | 9p write ctl
  open(1, "ctl", OWRITE | OTRUNC);
  c->write(1, 0, "stop\n");
  ASSERT_EQ(c->clunk(1).type, Rclunk);
  ASSERT_EQ(st->requests.size(), 1u);
  EXPECT_EQ(st->requests[0], "stop\n");
  open(1, "ctl", OWRITE);
  c->write(1, 0, "bad verb");
  EXPECT_EQ(c->clunk(1).ename, "unknown command: bad");  // the error reaches the writer
}

TEST_F(Kinds, RdwrAsPlan9portDrivesIt) {  // 9p rdwr: read first, then write-line/read pairs
  open(1, "ctl", ORDWR);
  EXPECT_EQ(c->read(1, 0).data, "");  // never written: nothing, at once
  c->write(1, 0, "one");
  EXPECT_EQ(c->read(1, 0).data, "reply:ONE");
  c->write(1, 9, "two");  // written at the offset its last read reached
  EXPECT_EQ(c->read(1, 0).data, "reply:TWO");
  c->write(1, 9, "");  // an empty line
  EXPECT_EQ(c->read(1, 0).data, "reply:");
  EXPECT_EQ(c->clunk(1).type, Rclunk);
  EXPECT_EQ(st->requests.size(), 3u);  // clunk after the last read runs nothing more
}

TEST_F(Kinds, RdwrErrorIsTheReadError) {
  open(1, "ctl", ORDWR);
  c->write(1, 0, "bad");
  EXPECT_EQ(c->read(1, 0).ename, "unknown command: bad");
  // The error is the request's reply: read again from the start, it is the same (§1.7), and the
  // handler does not run again; a new request replaces it.
  EXPECT_EQ(c->read(1, 0).ename, "unknown command: bad");
  EXPECT_EQ(c->read(1, 5).ename, "unknown command: bad");
  ASSERT_EQ(st->requests.size(), 1u);
  c->write(1, 0, "good");
  EXPECT_EQ(c->read(1, 0).data, "reply:GOOD");
  EXPECT_EQ(c->read(1, 0).data, "reply:GOOD");
}

TEST_F(Kinds, RdwrDefaultRequest) {
  open(1, "deflt", OREAD);
  EXPECT_EQ(c->read(1, 0).data, "got status\n");
  open(2, "deflt", ORDWR);
  c->write(2, 0, "x");
  EXPECT_EQ(c->read(2, 0).data, "got x\n");
}

TEST_F(Kinds, FlushCancelsARdwrHandler) {
  open(1, "slow", ORDWR);
  c->write(1, 0, "go");
  c->send(Raw::tread(1, 0, 100, 3));
  c->send(tflush(4, 3));
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, Rflush);
  EXPECT_EQ(r->tag, 4);
}

// ---- BlockOnce ------------------------------------------------------------------------------

TEST_F(Kinds, BlockOnceWaitsForAChange) {
  open(1, "state", OREAD);
  c->send(Raw::tread(1, 0, 100, 2));
  EXPECT_FALSE(c->recv(200));  // blocked: the value is what it was at open
  st->set_value("idle");       // an identical rewrite wakes nobody
  EXPECT_FALSE(c->recv(200));
  st->set_value("thinking");
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->data, "thinking");
  EXPECT_EQ(c->read(1, 3, 100).data, "nking");  // the rest of the last value
  EXPECT_EQ(c->read(1, 8, 100).data, "");
}

TEST_F(Kinds, BlockOnceReturnsAtOnceWhenTheValueAlreadyChanged) {
  open(1, "state", OREAD);
  st->set_value("calling: x");
  EXPECT_EQ(c->read(1, 0).data, "calling: x");
}

TEST_F(Kinds, BlockOnceHeartbeatAfterFiveSeconds) {
  open(1, "state", OREAD);
  open(2, "feed", ORDWR);
  auto t0 = std::chrono::steady_clock::now();
  c->send(Raw::tread(1, 0, 100, 5));
  c->send(Raw::tread(2, 0, 100, 6));
  std::map<std::uint16_t, std::string> got;
  for (int i = 0; i < 2; i++) {
    auto r = c->recv(10000);
    ASSERT_TRUE(r);
    got[r->tag] = r->data;
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(4900));
  EXPECT_EQ(got[5], "heartbeat:idle");  // the plain Read content
  EXPECT_EQ(got[6], "");                // no Read content: 0 bytes
}

TEST_F(Kinds, WriteBlockOnceFeedsItsOwnReaders) {
  open(1, "feed", OREAD);
  c->send(Raw::tread(1, 0, 100, 2));
  auto w = attached("glenda");
  open(1, "feed", OWRITE, w.get());
  w->write(1, 0, "typed text");
  w->clunk(1);
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->data, "typed text");
}

TEST_F(Kinds, FlushEndsABlockOnceWait) {
  open(1, "state", OREAD);
  c->send(Raw::tread(1, 0, 100, 2));
  c->send(tflush(3, 2));
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, Rflush);
}

// ---- Stream ---------------------------------------------------------------------------------

TEST_F(Kinds, StreamDeliversBytesAsTheyArriveThenEOF) {
  st->log->append("early\n");
  open(1, "log", OREAD);
  open(2, "log", OREAD);
  EXPECT_EQ(c->read(1, 0).data, "early\n");
  c->send(Raw::tread(1, 0, 100, 7));
  EXPECT_FALSE(c->recv(200));
  st->log->append("more\n");
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->data, "more\n");
  EXPECT_EQ(c->read(2, 999, 3).data, "ear");  // each fid has its own position; offsets ignored
  st->log->close();
  EXPECT_EQ(c->read(1, 0).data, "");  // the producer ended
  EXPECT_EQ(c->read(2, 0).data, "ly\nmore\n");
  EXPECT_EQ(c->read(2, 0).data, "");
}

TEST_F(Kinds, FlushEndsAStreamWait) {
  open(1, "log", OREAD);
  c->send(Raw::tread(1, 0, 100, 2));
  c->send(tflush(3, 2));
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, Rflush);
}

// ---- Streaming Rdwr -------------------------------------------------------------------------

TEST_F(Kinds, StreamingRdwrFilterWrittenBeforeTheFirstRead) {
  open(1, "event", ORDWR);
  st->log->append("agent.1 state\n");  // the stream starts at open, before the filter is known
  c->write(1, 0, "session.");
  st->log->append("session.1 new\n");
  EXPECT_EQ(c->read(1, 0).data, "session.1 new\n");
  EXPECT_EQ(c->write(1, 0, "agent.").ename, "filter already set");
}

// A fid opened to write only has no stream to filter: its write is taken and changes nothing
// (it crashed olliesrv: any agent could write its `event` file).
TEST_F(Kinds, StreamingRdwrOpenedToWriteOnlyTakesTheWriteAndNothingElse) {
  open(1, "event", OWRITE);
  EXPECT_EQ(c->write(1, 0, "x\n").count, 2u);
  EXPECT_EQ(c->clunk(1).type, Rclunk);
  open(2, "event", OREAD);
  st->log->append("a\n");
  EXPECT_EQ(c->read(2, 0).data, "a\n");
}

TEST_F(Kinds, StreamingRdwrWithoutAFilterGetsEverything) {
  open(1, "event", OREAD);
  st->log->append("a\nb\n");
  EXPECT_EQ(c->read(1, 0).data, "a\nb\n");
}

TEST_F(Kinds, StreamingRdwrBadFilterIsTheFirstReadError) {
  open(1, "event", ORDWR);
  c->write(1, 0, "a*b");
  EXPECT_EQ(c->read(1, 0).ename, "bad pattern: a*b");
}

// ---- Permissions ----------------------------------------------------------------------------

TEST_F(Kinds, HostownerGetsTheOwnerBits) {
  open(1, "secret", OREAD);
  EXPECT_EQ(c->read(1, 0).data, "s3cr3t\n");
  EXPECT_EQ(c->walk(0, 2, {"private", "x"}).wqid.size(), 2u);
}

TEST_F(Kinds, AgentsGetGroupOrOtherBits) {
  auto a = attached("agent1");
  ASSERT_EQ(a->walk(0, 1, {"secret"}).type, Rwalk);
  EXPECT_EQ(a->open(1, OREAD).ename, "permission denied");
  ASSERT_EQ(a->walk(0, 2, {"hello"}).type, Rwalk);
  EXPECT_EQ(a->open(2, OREAD).type, Ropen);
  ASSERT_EQ(a->walk(0, 3, {"hello"}).type, Rwalk);
  EXPECT_EQ(a->open(3, OWRITE).ename, "permission denied");
  EXPECT_EQ(a->open(3, OREAD | OTRUNC).ename, "permission denied");  // OTRUNC asks for write (open(9p))
  ASSERT_EQ(a->walk(0, 4, {"event"}).type, Rwalk);
  EXPECT_EQ(a->open(4, ORDWR).type, Ropen);  // 0666
}

TEST_F(Kinds, SubagentsGetTheOtherBits) {
  auto a = attached("agent1");
  ASSERT_EQ(a->walk(0, 1, {"team"}).type, Rwalk);
  EXPECT_EQ(a->open(1, OREAD).type, Ropen);  // group agent: r
  auto s = attached("sub1");
  ASSERT_EQ(s->walk(0, 1, {"team"}).type, Rwalk);
  EXPECT_EQ(s->open(1, OREAD).ename, "permission denied");  // group subagent: the other bits
  ASSERT_EQ(s->walk(0, 2, {"hello"}).type, Rwalk);
  EXPECT_EQ(s->open(2, OREAD).type, Ropen);
}

TEST_F(Kinds, WalkNeedsExecuteOnTheDirectory) {
  auto a = attached("agent1");
  EXPECT_EQ(a->walk(0, 1, {"private"}).type, Rwalk);  // looking up "private" in / (0555) is fine
  EXPECT_EQ(a->walk(0, 1, {"private", "x"}).ename, "duplicate fid");
  auto r = a->walk(0, 2, {"private", "x"});
  ASSERT_EQ(r.type, Rwalk);
  EXPECT_EQ(r.wqid.size(), 1u);  // refused inside private (0700): the walk ends there
  EXPECT_EQ(a->walk(1, 3, {"x"}).ename, "permission denied");
}

TEST_F(Kinds, OwnerOfANodeGetsTheOwnerBits) {
  auto a = attached("agent1");
  Fcall s;
  s.type = Tstat;
  ASSERT_EQ(a->walk(0, 1, {"item", "a", "value"}).wqid.size(), 3u);
  s.fid = 1;
  auto d = decode_dir(a->rpc(s).stat);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->uid, "owner-a");
  EXPECT_EQ(d->gid, "agent");
  EXPECT_EQ(d->muid, "owner-a");
}

TEST_F(Kinds, ORCLOSEIsRefused) {
  ASSERT_EQ(c->walk(0, 1, {"note"}).type, Rwalk);
  EXPECT_EQ(c->open(1, OWRITE | ORCLOSE).ename, "permission denied");
  ASSERT_EQ(c->walk(0, 2, {}).type, Rwalk);  // a directory opened to read, with ORCLOSE: the same
  EXPECT_EQ(c->open(2, OREAD | ORCLOSE).ename, "permission denied");
}

// ---- wstat ----------------------------------------------------------------------------------

TEST_F(Kinds, TruncateAndTouchWstatsAreAcceptedOnWritableFiles) {  // Linux v9fs: `>` and touch
  ASSERT_EQ(c->walk(0, 1, {"note"}).type, Rwalk);
  Fcall t;
  t.type = Twstat;
  t.fid = 1;
  Dir d = Dir::null();
  d.length = 0;
  d.mtime = 1234;
  t.stat = *encode_dir(d);
  EXPECT_EQ(c->rpc(t).type, Rwstat);
  ASSERT_EQ(c->walk(0, 2, {"hello"}).type, Rwalk);  // 0444: not writable
  t.fid = 2;
  EXPECT_EQ(c->rpc(t).ename, "permission denied");
  d = Dir::null();
  d.length = 5;
  t.fid = 1;
  t.stat = *encode_dir(d);
  EXPECT_EQ(c->rpc(t).ename, "wstat not supported");
  d = Dir::null();
  d.mode = 0777;
  t.stat = *encode_dir(d);
  EXPECT_EQ(c->rpc(t).ename, "wstat not supported");
  // Fields set to their current values change nothing, so it succeeds (§1.5: `chmod 444` of a
  // 0444 file, `cp -p`), on a file the principal may not even write.
  Fcall s;
  s.type = Tstat;
  s.fid = 2;
  auto now = decode_dir(c->rpc(s).stat);
  ASSERT_TRUE(now);
  d = Dir::null();
  d.mode = now->mode;
  d.uid = now->uid;
  d.gid = now->gid;
  t.fid = 2;
  t.stat = *encode_dir(d);
  EXPECT_EQ(c->rpc(t).type, Rwstat);
  d.mode = now->mode | 0222;
  t.stat = *encode_dir(d);
  EXPECT_EQ(c->rpc(t).ename, "wstat not supported");
  // The current name is one of those fields: a client that writes back a whole Rstat entry with
  // new times (Go's plan9/client, dirwstat of a dirstat) touches the file.
  d = Dir::null();
  d.name = "note";
  d.mtime = 123;
  t.fid = 1;
  t.stat = *encode_dir(d);
  EXPECT_EQ(c->rpc(t).type, Rwstat);
  s.fid = 2;
  now = decode_dir(c->rpc(s).stat);
  ASSERT_TRUE(now);
  t.fid = 2;
  t.stat = *encode_dir(*now);
  EXPECT_EQ(c->rpc(t).type, Rwstat);
}
