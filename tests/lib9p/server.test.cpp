// The server's protocol behaviour over a real Unix socket, frame by frame (9p-interop.md §3, §4).
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "lib9p/errors.hpp"
#include "support/demofs.hpp"
#include "support/testserver.hpp"

using namespace p9;
using testing_support::Raw;

namespace {

struct Server9p : ::testing::Test {
  std::shared_ptr<testing_support::DemoState> st = std::make_shared<testing_support::DemoState>();
  testing_support::TestServer srv{testing_support::demo_fs(st)};

  std::unique_ptr<Raw> attached() {
    auto c = std::make_unique<Raw>(srv.sock);
    c->version();
    EXPECT_EQ(c->attach(0, "glenda").type, Rattach);
    return c;
  }
};

Fcall req(std::uint8_t type, std::uint16_t tag = 0) {
  Fcall f;
  f.type = type;
  f.tag = tag;
  return f;
}

}  // namespace

TEST_F(Server9p, VersionEchoesNotagAndTakesTheSmallerMsize) {
  Raw c(srv.sock);
  auto r = c.version(8192);
  EXPECT_EQ(r.type, Rversion);
  EXPECT_EQ(r.tag, NOTAG);
  EXPECT_EQ(r.version, "9P2000");
  EXPECT_EQ(r.msize, 8192u);
  r = c.version(1 << 20);
  EXPECT_EQ(r.msize, MAX_MSIZE);
}

TEST_F(Server9p, VersionSuffixesAreAnswered9P2000) {
  Raw c(srv.sock);
  EXPECT_EQ(c.version(8192, "9P2000.u").version, "9P2000");
  EXPECT_EQ(c.version(8192, "9P2000.L").version, "9P2000");
}

TEST_F(Server9p, UnknownVersionGetsRversionUnknown) {
  Raw c(srv.sock);
  auto r = c.version(8192, "XYZ");
  EXPECT_EQ(r.type, Rversion);
  EXPECT_EQ(r.version, "unknown");
  // Nothing else is served until a version is agreed.
  EXPECT_EQ(c.attach(0, "glenda").ename, err::no_version);
}

TEST_F(Server9p, MsizeTooSmallIsRefused) {
  Raw c(srv.sock);
  auto r = c.version(128);
  EXPECT_EQ(r.type, Rerror);
  EXPECT_EQ(r.ename, "msize too small");
}

TEST_F(Server9p, SecondVersionClunksEveryFid) {
  auto c = attached();
  EXPECT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);
  c->version();
  EXPECT_EQ(c->walk(0, 2, {}).ename, err::unknown_fid);
  EXPECT_EQ(c->attach(0, "glenda").type, Rattach);  // fid 0 is free again
}

TEST_F(Server9p, AuthAsHostownerIsNotRequired) {
  Raw c(srv.sock);
  c.version();
  auto t = req(Tauth);
  t.afid = 5;
  t.uname = "glenda";
  auto r = c.rpc(t);
  EXPECT_EQ(r.type, Rerror);
  EXPECT_EQ(r.ename, "authentication not required");
}

TEST_F(Server9p, AttachOnAFidInUseIsDuplicateFid) {
  auto c = attached();
  auto r = c->attach(0, "glenda");
  EXPECT_EQ(r.ename, "duplicate fid");
  EXPECT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);  // the existing fid is untouched
}

TEST_F(Server9p, AttachReturnsTheRootDirectory) {
  Raw c(srv.sock);
  c.version();
  auto r = c.attach(0, "glenda");
  ASSERT_EQ(r.type, Rattach);
  EXPECT_EQ(r.qid.type, QTDIR);
  auto s = req(Tstat);
  s.fid = 0;
  auto sr = c.rpc(s);
  ASSERT_EQ(sr.type, Rstat);
  auto d = decode_dir(sr.stat);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->name, "/");
  EXPECT_EQ(d->mode, DMDIR | 0555);
  EXPECT_EQ(d->uid, "glenda");
  EXPECT_EQ(d->length, 0u);
}

TEST_F(Server9p, UnknownUserCannotAttach) {
  Raw c(srv.sock);
  c.version();
  EXPECT_EQ(c.attach(0, "mallory").ename, "unknown user: mallory");
}

TEST_F(Server9p, UnknownFid) {
  auto c = attached();
  EXPECT_EQ(c->walk(9, 10, {}).ename, "unknown fid");
  EXPECT_EQ(c->clunk(9).ename, "unknown fid");
  EXPECT_EQ(c->read(9, 0).ename, "unknown fid");
}

TEST_F(Server9p, WalkWithNoNamesClones) {
  auto c = attached();
  auto r = c->walk(0, 1, {});
  EXPECT_EQ(r.type, Rwalk);
  EXPECT_TRUE(r.wqid.empty());
  EXPECT_EQ(c->walk(1, 2, {"hello"}).type, Rwalk);
}

TEST_F(Server9p, WalkFidOntoItself) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"item"}).type, Rwalk);
  auto r = c->walk(1, 1, {"a", "value"});  // what plan9port does past 16 elements
  ASSERT_EQ(r.type, Rwalk);
  EXPECT_EQ(r.wqid.size(), 2u);
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  EXPECT_EQ(c->read(1, 0).data, "alpha\n");
}

TEST_F(Server9p, WalkToANewfidInUseIsDuplicateFid) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {}).type, Rwalk);
  EXPECT_EQ(c->walk(0, 1, {"hello"}).ename, "duplicate fid");
}

TEST_F(Server9p, FirstElementMissingIsAnError) {
  auto c = attached();
  auto r = c->walk(0, 1, {"nosuch"});
  EXPECT_EQ(r.ename, "nosuch: file not found");
  EXPECT_EQ(c->clunk(1).ename, "unknown fid");  // newfid was not created
}

TEST_F(Server9p, PartialWalkReturnsTheQidsItGot) {
  auto c = attached();
  auto r = c->walk(0, 1, {"item", "a", "nosuch", "deeper"});
  ASSERT_EQ(r.type, Rwalk);
  EXPECT_EQ(r.wqid.size(), 2u);
  EXPECT_EQ(c->clunk(1).ename, "unknown fid");  // and created no fid
  // fid == newfid: a partial walk leaves the fid where it was
  ASSERT_EQ(c->walk(0, 2, {"item"}).type, Rwalk);
  EXPECT_EQ(c->walk(2, 2, {"a", "nosuch"}).wqid.size(), 1u);
  EXPECT_EQ(c->walk(2, 3, {"b"}).type, Rwalk);
}

TEST_F(Server9p, WalkInNonDirectory) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);
  EXPECT_EQ(c->walk(1, 2, {"x"}).ename, "walk in non-directory");
  EXPECT_EQ(c->walk(1, 2, {}).type, Rwalk);  // a clone of a file is fine
}

TEST_F(Server9p, WalkOfAnOpenFidIsRefused) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"item"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  EXPECT_EQ(c->walk(1, 2, {"a"}).ename, "cannot clone open fid");
}

TEST_F(Server9p, SeventeenWalkNamesAreRefused) {
  auto c = attached();
  auto r = c->walk(0, 1, std::vector<std::string>(17, ".."));
  EXPECT_EQ(r.type, Rerror);
  EXPECT_EQ(r.ename, "too many walk elements");
  EXPECT_EQ(c->walk(0, 1, std::vector<std::string>(16, "..")).wqid.size(), 16u);
}

TEST_F(Server9p, DotDotWalksUpAndStaysAtTheRoot) {
  auto c = attached();
  auto root = c->walk(0, 1, {});
  auto r = c->walk(0, 2, {"item", "a", "..", "..", ".."});
  ASSERT_EQ(r.type, Rwalk);
  ASSERT_EQ(r.wqid.size(), 5u);
  auto s = req(Tstat);
  s.fid = 0;
  auto rootq = decode_dir(c->rpc(s).stat)->qid;
  EXPECT_EQ(r.wqid[3], rootq);
  EXPECT_EQ(r.wqid[4], rootq);
  EXPECT_EQ(r.wqid[0], r.wqid[2]);
}

TEST_F(Server9p, OpeningADirectoryForWritingIsRefused) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"item"}).type, Rwalk);
  EXPECT_EQ(c->open(1, OWRITE).ename, "is a directory");
  EXPECT_EQ(c->open(1, OREAD | OTRUNC).ename, "is a directory");
  EXPECT_EQ(c->open(1, OREAD).type, Ropen);
  EXPECT_EQ(c->open(1, OREAD).ename, "fid already open");
}

TEST_F(Server9p, OpenReportsIounit) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);
  auto r = c->open(1, OREAD);
  EXPECT_EQ(r.iounit, 8192u - IOHDRSZ);
}

TEST_F(Server9p, ReadAndWriteNeedTheRightOpenMode) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);
  EXPECT_EQ(c->read(1, 0).ename, "fid not open for reading");
  ASSERT_EQ(c->walk(0, 2, {"sink"}).type, Rwalk);
  ASSERT_EQ(c->open(2, OWRITE | OTRUNC).type, Ropen);
  EXPECT_EQ(c->read(2, 0).ename, "fid not open for reading");
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  EXPECT_EQ(c->write(1, 0, "x").ename, "fid not open for writing");
}

TEST_F(Server9p, ReadCountIsRespected) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  EXPECT_EQ(c->read(1, 0, 5).data, "hello");
  EXPECT_EQ(c->read(1, 5, 100).data, ", world\n");
  EXPECT_EQ(c->read(1, 13, 100).data, "");
  EXPECT_EQ(c->read(1, 1000, 100).data, "");
}

TEST_F(Server9p, DirectoryReadsAreWholeEntriesWithPlan9Offsets) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {}).type, Rwalk);
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  // A count too small for the first entry returns nothing, never part of one.
  EXPECT_EQ(c->read(1, 0, 10).data.size(), 0u);
  auto r1 = c->read(1, 0, 100);
  ASSERT_EQ(r1.type, Rread);
  auto d1 = decode_dirs({reinterpret_cast<const std::uint8_t*>(r1.data.data()), r1.data.size()});
  ASSERT_TRUE(d1);
  ASSERT_EQ(d1->size(), 1u);
  EXPECT_EQ((*d1)[0].name, "hello");
  EXPECT_EQ(c->read(1, 7, 100).ename, "bad offset");
  std::vector<std::string> names = {(*d1)[0].name};
  std::uint64_t off = r1.data.size();
  for (;;) {
    auto r = c->read(1, off, 8168);
    ASSERT_EQ(r.type, Rread);
    if (r.data.empty()) break;
    auto ds = decode_dirs({reinterpret_cast<const std::uint8_t*>(r.data.data()), r.data.size()});
    ASSERT_TRUE(ds);
    for (auto& d : *ds) names.push_back(d.name);
    off += r.data.size();
  }
  std::vector<std::string> want = {"hello", "counter", "sink", "note", "ctl", "deflt", "slow", "state",
                                   "feed", "log", "event", "secret", "team", "private", "item"};
  EXPECT_EQ(names, want);  // declaration order, no "." or ".."
  auto again = c->read(1, 0, 8168);  // offset 0 starts over
  EXPECT_EQ(decode_dirs({reinterpret_cast<const std::uint8_t*>(again.data.data()), again.data.size()})->front().name, "hello");
}

TEST_F(Server9p, TemplateDirectoryListsItsInstances) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"item"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  auto r = c->read(1, 0, 8168);
  auto ds = decode_dirs({reinterpret_cast<const std::uint8_t*>(r.data.data()), r.data.size()});
  ASSERT_TRUE(ds);
  ASSERT_EQ(ds->size(), 3u);
  EXPECT_EQ((*ds)[0].name, "idx");
  EXPECT_EQ((*ds)[1].name, "a");
  EXPECT_EQ((*ds)[1].mode, DMDIR | 0555);
  EXPECT_EQ((*ds)[2].name, "b");
  EXPECT_NE((*ds)[1].qid.path, (*ds)[2].qid.path);
}

TEST_F(Server9p, ZeroLengthWriteIsAccepted) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"sink"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OWRITE | OTRUNC).type, Ropen);
  auto r = c->write(1, 0, "");
  EXPECT_EQ(r.type, Rwrite);
  EXPECT_EQ(r.count, 0u);
  EXPECT_EQ(c->clunk(1).type, Rclunk);
  EXPECT_TRUE(st->writes.empty());
}

TEST_F(Server9p, ClunkFreesTheFidEvenOnError) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"sink"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OWRITE).type, Ropen);
  c->write(1, 0, "fail\n");
  auto r = c->clunk(1);
  EXPECT_EQ(r.ename, "sink refused: fail");
  EXPECT_EQ(c->clunk(1).ename, "unknown fid");
  EXPECT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);
}

TEST_F(Server9p, RemoveAndCreateAreRefusedAndRemoveClunks) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);
  auto t = req(Tremove);
  t.fid = 1;
  EXPECT_EQ(c->rpc(t).ename, "remove not supported");
  EXPECT_EQ(c->clunk(1).ename, "unknown fid");
  ASSERT_EQ(c->walk(0, 1, {}).type, Rwalk);
  auto cr = req(Tcreate);
  cr.fid = 1;
  cr.name = "new";
  cr.perm = 0666;
  EXPECT_EQ(c->rpc(cr).ename, "create not supported");
}

TEST_F(Server9p, NoOpWstatSucceedsOtherWstatFails) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);
  auto t = req(Twstat);
  t.fid = 1;
  t.stat = encode_dir(Dir::null());
  EXPECT_EQ(c->rpc(t).type, Rwstat);
  Dir d = Dir::null();
  d.name = "renamed";
  t.stat = encode_dir(d);
  EXPECT_EQ(c->rpc(t).ename, "wstat not supported");
}

TEST_F(Server9p, UnknownMessageTypeGetsRerror) {
  auto c = attached();
  c->send_bytes({12, 0, 0, 0, 98, 3, 0, 1, 0, 0, 0, 0});  // plan9port's Topenfd
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, Rerror);
  EXPECT_EQ(r->tag, 3);
  EXPECT_EQ(r->ename, "unknown message type 98");
  EXPECT_EQ(c->walk(0, 1, {}).type, Rwalk);  // and the connection goes on
}

TEST_F(Server9p, MalformedBodyGetsRerrorAndTheConnectionGoesOn) {
  auto c = attached();
  auto t = req(Twalk, 4);
  t.fid = 0;
  t.newfid = 1;
  t.wname = {"hello"};
  auto bytes = encode(t);
  bytes[17] = 99;  // the name's length runs past the frame
  c->send_bytes(bytes);
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tag, 4);
  EXPECT_EQ(r->ename, "string longer than message");
  EXPECT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);
}

TEST_F(Server9p, FrameLargerThanMsizeIsRefused) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"sink"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OWRITE).type, Ropen);
  auto t = req(Twrite, 6);
  t.fid = 1;
  t.data.assign(10000, 'x');
  c->send(t);
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tag, 6);
  EXPECT_EQ(r->ename, "message larger than msize");
  EXPECT_EQ(c->write(1, 0, "fits").type, Rwrite);  // the oversized frame was skipped whole
}

TEST_F(Server9p, UntrustableFrameClosesTheConnection) {
  auto c = attached();
  c->send_bytes({3, 0, 0, 0, 0, 0, 0});  // a size smaller than any header
  EXPECT_FALSE(c->recv(5000));
  EXPECT_TRUE(c->eof());
  auto d = attached();  // the server goes on
  EXPECT_EQ(d->walk(0, 1, {"hello"}).type, Rwalk);
}

TEST_F(Server9p, HugeSizeFieldClosesTheConnection) {
  auto c = attached();
  c->send_bytes({0xff, 0xff, 0xff, 0x7f, 100, 0, 0});
  EXPECT_FALSE(c->recv(5000));
  EXPECT_TRUE(c->eof());
}

TEST_F(Server9p, DuplicateTagIsRefusedWhileTheFirstIsPending) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"log"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  c->send(Raw::tread(1, 0, 100, 7));  // blocks: the log is empty
  ASSERT_EQ(c->walk(0, 2, {"hello"}).type, Rwalk);
  auto t = req(Tclunk, 7);
  t.fid = 2;
  auto r = c->rpc(t);
  EXPECT_EQ(r.ename, "duplicate tag");
  st->log->append("line\n");
  auto rr = c->recv();
  ASSERT_TRUE(rr);
  EXPECT_EQ(rr->tag, 7);
  EXPECT_EQ(rr->data, "line\n");
}

TEST_F(Server9p, FlushOfAnUnknownTagIsAnsweredAtOnce) {
  auto c = attached();
  auto t = req(Tflush, 3);
  t.oldtag = 42;
  auto r = c->rpc(t);
  EXPECT_EQ(r.type, Rflush);
  EXPECT_EQ(r.tag, 3);
}

TEST_F(Server9p, FlushCancelsABlockedReadAndSuppressesItsReply) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"log"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  c->send(Raw::tread(1, 0, 100, 5));
  auto t = req(Tflush, 6);
  t.oldtag = 5;
  c->send(t);
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, Rflush);  // nothing for tag 5 before it
  EXPECT_EQ(r->tag, 6);
  st->log->append("late\n");
  EXPECT_FALSE(c->recv(300));  // and nothing after it
  EXPECT_EQ(c->read(1, 0).data, "late\n");  // tag 5's bytes were not consumed
}

TEST_F(Server9p, BlockedReadNeverStallsOtherTags) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"log"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  c->send(Raw::tread(1, 0, 100, 1));
  for (int i = 0; i < 50; i++) {
    auto r = c->walk(0, 2, {"hello"}, 2);
    ASSERT_EQ(r.type, Rwalk);
    ASSERT_EQ(r.tag, 2);
    ASSERT_EQ(c->clunk(2).type, Rclunk);
  }
  st->log->append("done\n");
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tag, 1);
  EXPECT_EQ(r->data, "done\n");
}

TEST_F(Server9p, DisconnectFreesEveryFid) {
  {
    auto c = attached();
    for (std::uint32_t f = 1; f <= 5; f++) {
      ASSERT_EQ(c->walk(0, f, {"event"}).type, Rwalk);
      ASSERT_EQ(c->open(f, OREAD).type, Ropen);
    }
    c->send(Raw::tread(1, 0, 100, 9));  // one read left pending, as when 9p read is interrupted
    EXPECT_EQ(st->cursors_alive.load(), 5);
  }
  for (int i = 0; i < 200 && st->cursors_alive.load() != 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(st->cursors_alive.load(), 0);
}

TEST_F(Server9p, TwoHundredClientsAtOnce) {
  std::vector<std::future<std::string>> results;
  for (int i = 0; i < 200; i++) {
    results.push_back(std::async(std::launch::async, [this] {
      Raw c(srv.sock);
      c.version();
      if (c.attach(0, "glenda").type != Rattach) return std::string("attach failed");
      if (c.walk(0, 1, {"hello"}).type != Rwalk) return std::string("walk failed");
      if (c.open(1, OREAD).type != Ropen) return std::string("open failed");
      return c.read(1, 0).data;
    }));
  }
  for (auto& r : results) EXPECT_EQ(r.get(), "hello, world\n");
}

TEST_F(Server9p, UnixSocketIsPrivate) {
  struct stat s;
  ASSERT_EQ(::stat(srv.sock.c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 0777, 0600u);
  auto dir = srv.sock.substr(0, srv.sock.rfind('/'));
  ASSERT_EQ(::stat(dir.c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 0777, 0700u);
}

TEST_F(Server9p, StopRemovesTheSocket) {
  srv.srv->stop();
  struct stat s;
  EXPECT_NE(::stat(srv.sock.c_str(), &s), 0);
}

TEST(ServerConnections, HookSeesEveryOpenAndClose) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::size_t> seen;
  auto until = [&](std::size_t n) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(10), [&] { return seen.size() >= n; });
  };
  ServerOptions opt;
  opt.on_connections = [&](std::size_t open) {
    std::lock_guard lk(mu);
    seen.push_back(open);
    cv.notify_all();
  };
  testing_support::TempDir dir;
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  Server s(io, testing_support::demo_fs(std::make_shared<testing_support::DemoState>()), opt);
  ASSERT_TRUE(s.listen(*parse_address("unix!" + dir.path + "/sock")));
  std::thread t([&] { io.run(); });
  {
    auto a = std::make_unique<Raw>(dir.path + "/sock");
    ASSERT_TRUE(until(1));
    Raw b(dir.path + "/sock");
    ASSERT_TRUE(until(2));
    a.reset();
    ASSERT_TRUE(until(3));
  }
  ASSERT_TRUE(until(4));
  EXPECT_EQ(seen, (std::vector<std::size_t>{1, 2, 1, 0}));
  s.stop();
  work.reset();
  t.join();
}
