// The server's protocol behaviour over a real Unix socket, frame by frame (9p-interop.md §3, §4).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <condition_variable>
#include <fstream>
#include <future>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>

#include "lib9p/client.hpp"
#include "lib9p/dirs.hpp"
#include "lib9p/errors.hpp"
#include "support/demofs.hpp"
#include "support/process.hpp"
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
  ASSERT_EQ(c->walk(0, 2, {"hello"}).type, Rwalk);  // on a file, and named `..`: the same answer
  cr.fid = 2;
  EXPECT_EQ(c->rpc(cr).ename, "create not supported");
  cr.fid = 1;
  cr.name = "..";
  EXPECT_EQ(c->rpc(cr).ename, "create not supported");
}

TEST_F(Server9p, NoOpWstatSucceedsOtherWstatFails) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);
  auto t = req(Twstat);
  t.fid = 1;
  t.stat = *encode_dir(Dir::null());
  EXPECT_EQ(c->rpc(t).type, Rwstat);
  Dir d = Dir::null();
  d.name = "renamed";
  t.stat = *encode_dir(d);
  EXPECT_EQ(c->rpc(t).ename, "wstat not supported");
  t.stat = {1, 2, 3};  // a stat entry that does not decode: an Rerror, and the connection goes on
  auto bad = c->rpc(t);
  EXPECT_EQ(bad.type, Rerror);
  EXPECT_FALSE(bad.ename.empty());
  EXPECT_EQ(c->walk(0, 2, {"hello"}).type, Rwalk);
}

namespace {

// A file system whose wstat waits (as olliesrv's rename waits for its save) until a write to its
// file `go`, or for good when the name asked is `never`.
struct WaitingWstatFs : FileServer {
  std::shared_ptr<asio::steady_timer> go;
  Status attach(Fid& f, Fid*, const std::string&, const std::string&) override {
    f.qid = {QTDIR, 0, 1};
    return {};
  }
  Status walk1(Fid& f, const std::string& name) override {
    if (name != "go") return error(name + ": file not found");
    f.qid = {QTFILE, 0, 2};
    return {};
  }
  Status open(Fid&, std::uint8_t) override { return {}; }
  Result<std::vector<Dir>> readdir(Fid&) override { return std::vector<Dir>{}; }
  asio::awaitable<Result<std::string>> read(Fid&, std::uint64_t, std::uint32_t) override { co_return std::string(); }
  asio::awaitable<Result<std::uint32_t>> write(Fid&, std::uint64_t, std::string d) override {
    if (go) go->cancel();
    co_return static_cast<std::uint32_t>(d.size());
  }
  Result<Dir> stat(Fid& f) override {
    Dir d;
    d.qid = f.qid;
    d.name = "/";
    return d;
  }
  asio::awaitable<Status> wstat(Fid&, const Dir& d) override {
    auto t = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor, std::chrono::hours(1));
    if (d.name != "never") go = t;
    std::error_code ec;
    co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec && d.name == "never") co_return error("cancelled");  // only a flush ends it
    co_return Status{};
  }
};

Fcall rename_to(std::uint32_t fid, const std::string& name, std::uint16_t tag) {
  Dir d = Dir::null();
  d.name = name;
  Fcall t = req(Twstat, tag);
  t.fid = fid;
  t.stat = *encode_dir(d);
  return t;
}

}  // namespace

// A wstat may wait for the file system (olliesrv answers a rename once it is saved): the
// connection's other tags are answered meanwhile, the Rwstat comes when the wait ends, and a
// Tflush cancels a waiting wstat with no Rwstat.
TEST(Wstat, AWaitingWstatStallsNoOtherTagAndAFlushEndsIt) {
  testing_support::TestServer srv(std::make_shared<WaitingWstatFs>(), 1);
  Raw c(srv.sock);
  c.version();
  ASSERT_EQ(c.attach(0, "glenda").type, Rattach);
  ASSERT_EQ(c.walk(0, 1, {}).type, Rwalk);
  c.send(rename_to(1, "later", 5));
  EXPECT_EQ(c.walk(0, 2, {"go"}, 6).type, Rwalk);  // not behind the wstat
  ASSERT_EQ(c.open(2, OWRITE).type, Ropen);
  EXPECT_EQ(c.write(2, 0, "go").type, Rwrite);
  auto r = c.recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, Rwstat);
  EXPECT_EQ(r->tag, 5);

  c.send(rename_to(1, "never", 7));
  auto flush = req(Tflush, 8);
  flush.oldtag = 7;
  c.send(flush);
  r = c.recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, Rflush);  // nothing for tag 7 before it
  EXPECT_EQ(r->tag, 8);
  EXPECT_FALSE(c.recv(300));  // and nothing after it
  EXPECT_EQ(c.walk(0, 3, {}).type, Rwalk);
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
  auto bytes = *encode(t);
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

// clunk(5): the fid is gone, and so is what waits on it. A client that clunks without flushing
// gets its read answered `interrupted` (before, the read waited for good and kept its tag: 1024
// of them left the connection refusing every request `too many requests in flight`).
TEST_F(Server9p, ClunkEndsTheReadsWaitingOnTheFid) {
  auto c = attached();
  for (int round = 0; round < 1100; round++) {
    ASSERT_EQ(c->walk(0, 1, {"log"}).type, Rwalk);
    ASSERT_EQ(c->open(1, OREAD).type, Ropen);
    c->send(Raw::tread(1, 0, 100, 5));
    auto clunk = req(Tclunk, 6);
    clunk.fid = 1;
    c->send(clunk);
    std::map<std::uint16_t, p9::Fcall> got;
    for (int i = 0; i < 2; i++) {
      auto r = c->recv();
      ASSERT_TRUE(r) << round;
      got[r->tag] = *r;
    }
    ASSERT_EQ(got[5].type, Rerror) << round;
    EXPECT_EQ(got[5].ename, "interrupted");
    ASSERT_EQ(got[6].type, Rclunk) << round;
  }
  st->log->append("late\n");
  EXPECT_FALSE(c->recv(300));  // no reply for a fid that is gone
  ASSERT_EQ(c->walk(0, 1, {"log"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  EXPECT_EQ(c->read(1, 0).data, "late\n");
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

// A read blocked when the server stops ends at end of file, and the clunk the client sends
// after it (plan9port's `9p read` does) is answered before the connection closes.
TEST_F(Server9p, StopEndsABlockedReadAndAnswersTheClunkAfterIt) {
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"log"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  c->send(Raw::tread(1, 0, 100, 7));  // blocks: the log is empty
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  srv.srv->stop();
  auto eof = c->recv();
  ASSERT_TRUE(eof);
  EXPECT_EQ(eof->type, Rread);
  EXPECT_EQ(eof->data, "");
  auto t = req(Tclunk, 8);
  t.fid = 1;
  auto r = c->rpc(t);
  EXPECT_EQ(r.type, Rclunk) << r.ename;
  EXPECT_EQ(c->walk(0, 2, {"hello"}).ename, "server shutting down");
  EXPECT_FALSE(c->recv(5000));  // then it closes
  EXPECT_TRUE(c->eof());
}

TEST_F(Server9p, StopRemovesTheSocket) {
  srv.srv->stop();
  struct stat s;
  EXPECT_NE(::stat(srv.sock.c_str(), &s), 0);
}

// ---- Limits: replies, connections, fids, error strings (doc/9p.md "Limits") --------------------

namespace {

using namespace std::chrono_literals;

Fcall tstat(std::uint32_t fid, std::uint16_t tag = 0) {
  Fcall f = req(Tstat, tag);
  f.fid = fid;
  return f;
}

Fcall tclone(std::uint32_t fid, std::uint32_t newfid, std::uint16_t tag = 0) {
  Fcall f = req(Twalk, tag);
  f.fid = fid;
  f.newfid = newfid;
  return f;
}

Fcall tauth(std::uint32_t afid, std::string uname, std::uint16_t tag = 0) {
  Fcall f = req(Tauth, tag);
  f.afid = afid;
  f.uname = std::move(uname);
  return f;
}

// Sends copies of `frame` without blocking until the peer stops taking them for a second (or
// `most` bytes went out); returns the bytes sent. The last copy may have gone out in part.
std::size_t send_until_stalled(int fd, const std::vector<std::uint8_t>& frame, std::size_t most) {
  std::vector<std::uint8_t> chunk;
  while (chunk.size() < 65536) chunk.insert(chunk.end(), frame.begin(), frame.end());
  std::size_t sent = 0, off = 0;
  while (sent < most) {
    ssize_t n = ::send(fd, chunk.data() + off, chunk.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += n;
      off = (off + n) % chunk.size();
      continue;
    }
    if (errno != EAGAIN) break;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 1000) <= 0) break;
  }
  return sent;
}

// True when the server has closed its end (POLLHUP) within the timeout.
bool hung_up(int fd, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, 0, 0};
    if (::poll(&p, 1, 50) > 0 && (p.revents & (POLLHUP | POLLERR))) return true;
  }
  return false;
}

struct Limits : ::testing::Test {
  std::shared_ptr<testing_support::DemoState> st = std::make_shared<testing_support::DemoState>();
  std::unique_ptr<testing_support::TestServer> srv;

  void serve(ServerOptions opt) {
    srv = std::make_unique<testing_support::TestServer>(testing_support::demo_fs(st), 2, std::move(opt));
  }
  std::unique_ptr<Raw> attached(std::uint32_t msize = 8192) {
    auto c = std::make_unique<Raw>(srv->sock);
    c->version(msize);
    EXPECT_EQ(c->attach(0, "glenda").type, Rattach);
    return c;
  }
};

// A file server that records the buffer counter of every fid it sees, answers every Tauth with
// an auth fid, and has two odd names: one whose walk fails with a 70 KB error, one whose stat
// entry is 350 bytes.
struct ProbeFs : FileServer {
  std::mutex mu;
  std::vector<std::size_t*> counters;
  void saw(const Fid& f) {
    std::lock_guard lk(mu);
    counters.push_back(f.conn_buffered.get());
  }
  Status auth(Fid& f, const std::string&, const std::string&) override {
    saw(f);
    f.qid = {QTAUTH, 0, 9};
    return {};
  }
  Status attach(Fid& f, Fid*, const std::string&, const std::string&) override {
    saw(f);
    f.qid = {QTDIR, 0, 1};
    return {};
  }
  Status walk1(Fid& f, const std::string& name) override {
    saw(f);
    if (name == "huge-error") return error(std::string(70000, 'e'));
    if (name != "long-name") return error(name + ": file not found");
    f.qid = {QTFILE, 0, 2};
    return {};
  }
  Status open(Fid&, std::uint8_t) override { return {}; }
  Result<std::vector<Dir>> readdir(Fid&) override { return std::vector<Dir>{}; }
  asio::awaitable<Result<std::string>> read(Fid&, std::uint64_t, std::uint32_t) override { co_return std::string(); }
  asio::awaitable<Result<std::uint32_t>> write(Fid&, std::uint64_t, std::string d) override {
    co_return static_cast<std::uint32_t>(d.size());
  }
  Result<Dir> stat(Fid& f) override {
    saw(f);
    Dir d;
    d.qid = f.qid;
    d.name = f.qid.path == 2 ? std::string(300, 'n') : "/";
    return d;
  }
};

}  // namespace

TEST_F(Limits, ServerStopsReadingWhileRepliesWaitUnreadAndCatchesUpWhenTheClientReads) {
  serve({});
  auto c = attached();
  auto frame = *encode(tstat(0));
  // Four MB of Tstat would queue some 25 MB of Rstat; the server must stop reading long before.
  std::size_t sent = send_until_stalled(c->fd(), frame, 4u << 20);
  EXPECT_LT(sent, 1u << 20) << "the server kept reading while its replies piled up";
  // The client reads: everything sent is answered, in order, and nothing is lost.
  std::size_t partial = sent % frame.size();
  std::size_t want = sent / frame.size() + (partial ? 1 : 0);
  std::size_t got = 0;
  std::thread reader([&] {
    while (got < want) {
      auto r = c->recv(10000);
      if (!r || r->type != Rstat) break;
      got++;
    }
  });
  if (partial) c->send_bytes({frame.begin() + partial, frame.end()});
  reader.join();
  EXPECT_EQ(got, want);
}

TEST_F(Limits, RepliesLeftUnreadEndTheConnectionAfterTheWriteTimeout) {
  ServerOptions opt;
  opt.write_timeout = 300ms;
  serve(opt);
  auto c = attached();
  send_until_stalled(c->fd(), *encode(tstat(0)), 4u << 20);
  EXPECT_TRUE(hung_up(c->fd(), 5s));
  auto d = attached();  // the server goes on
  EXPECT_EQ(d->walk(0, 1, {"hello"}).type, Rwalk);
}

TEST_F(Limits, HalfClosedClientThatReadsNothingIsClosed) {
  ServerOptions opt;
  opt.write_timeout = 300ms;
  serve(opt);
  auto c = attached();
  send_until_stalled(c->fd(), *encode(tstat(0)), 4u << 20);
  ::shutdown(c->fd(), SHUT_WR);
  EXPECT_TRUE(hung_up(c->fd(), 5s));
}

TEST_F(Limits, HalfClosedClientGetsItsRepliesThenEndOfFile) {
  serve({});
  auto c = attached();
  for (std::uint16_t tag = 1; tag <= 3; tag++) c->send(tstat(0, tag));
  ::shutdown(c->fd(), SHUT_WR);
  for (std::uint16_t tag = 1; tag <= 3; tag++) {
    auto r = c->recv();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->tag, tag);
  }
  EXPECT_FALSE(c->recv(5000));
  EXPECT_TRUE(c->eof());
}

TEST_F(Limits, ConnectionThatNeverAttachesIsClosedAfterTheDeadline) {
  ServerOptions opt;
  opt.attach_timeout = 300ms;
  serve(opt);
  Raw idle(srv->sock);
  idle.version();
  auto c = attached();
  EXPECT_FALSE(idle.recv(5000));
  EXPECT_TRUE(idle.eof());
  EXPECT_EQ(c->walk(0, 1, {"hello"}).type, Rwalk);  // an attached one stays
}

TEST(ServerConnections, HookCountsOnlyAttachedConnections) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::size_t> seen;
  auto until = [&](std::size_t n) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(10), [&] { return seen.size() >= n; });
  };
  ServerOptions opt;
  opt.on_connections = [&](std::size_t attached) {
    std::lock_guard lk(mu);
    seen.push_back(attached);
    cv.notify_all();
  };
  testing_support::TestServer srv(testing_support::demo_fs(std::make_shared<testing_support::DemoState>()), 2, opt);
  {
    Raw never(srv.sock);  // connects, negotiates, never attaches: not counted
    never.version();
    auto a = std::make_unique<Raw>(srv.sock);
    a->version();
    ASSERT_EQ(a->attach(0, "glenda").type, Rattach);
    ASSERT_TRUE(until(1));
    Raw b(srv.sock);
    b.version();
    ASSERT_EQ(b.attach(0, "glenda").type, Rattach);
    ASSERT_EQ(b.attach(1, "glenda").type, Rattach);  // a second attach is the same connection
    ASSERT_TRUE(until(2));
    a.reset();
    ASSERT_TRUE(until(3));
  }
  ASSERT_TRUE(until(4));
  std::this_thread::sleep_for(200ms);
  std::lock_guard lk(mu);
  EXPECT_EQ(seen, (std::vector<std::size_t>{1, 2, 1, 0}));
}

TEST_F(Limits, ConnectionsPastTheCapAreClosedAtOnce) {
  ServerOptions opt;
  opt.max_connections = 2;
  serve(opt);
  auto a = attached();
  auto b = attached();
  Raw c(srv->sock);
  EXPECT_FALSE(c.recv(5000));
  EXPECT_TRUE(c.eof());
  a.reset();
  std::unique_ptr<Raw> d;
  for (int i = 0; i < 100 && !d; i++) {  // the freed place is seen once the server has noticed
    try {
      d = attached();
    } catch (const std::exception&) {  // refused: closed before it answered
      std::this_thread::sleep_for(20ms);
    }
  }
  ASSERT_TRUE(d);
  EXPECT_EQ(d->walk(0, 1, {"hello"}).type, Rwalk);
}

// A raw 9P client in Python for a sandboxed peer (no_new_privs, as every tool runs): sets the
// flag; dial() gives a connection past Tversion, dial_log() one attached as glenda (fid 0), fid 1
// its `log` open and fid 2 a clone; msg/rpc/recv/attach/read/clone/clunk speak the frames;
// errname is a reply's error.
const std::string sandboxed_client =
    "import ctypes, socket, struct, sys, time\n"
    "ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)\n"
    "def s(b): return struct.pack('<H', len(b)) + b\n"
    "def msg(t, tag, body): return struct.pack('<IBH', 7 + len(body), t, tag) + body\n"
    "def recv(c):\n"
    "    h = b''\n"
    "    while len(h) < 4: h += c.recv(4 - len(h))\n"
    "    n = struct.unpack('<I', h)[0]; b = h\n"
    "    while len(b) < n: b += c.recv(n - len(b))\n"
    "    return b\n"
    "def rpc(c, m): c.sendall(m); return recv(c)\n"
    "def errname(r): return r[9:9 + struct.unpack('<H', r[7:9])[0]].decode() if r[4] == 107 else 'ok'\n"
    "def attach(c, fid): return rpc(c, msg(104, 1, struct.pack('<II', fid, 0xffffffff) + s(b'glenda') + s(b'')))\n"
    "def clone(fid, newfid, tag=1): return msg(110, tag, struct.pack('<IIH', fid, newfid, 0))\n"
    "def read(fid, tag): return msg(116, tag, struct.pack('<IQI', fid, 0, 100))\n"
    "def clunk(fid, tag=1): return msg(120, tag, struct.pack('<I', fid))\n"
    "def dial():\n"
    "    c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1]); c.settimeout(5)\n"
    "    rpc(c, msg(100, 0xffff, struct.pack('<I', 8192) + s(b'9P2000')))\n"
    "    return c\n"
    "def dial_log():\n"
    "    c = dial(); attach(c, 0)\n"
    "    rpc(c, msg(110, 1, struct.pack('<IIH', 0, 1, 1) + s(b'log'))); rpc(c, msg(112, 1, struct.pack('<IB', 1, 0)))\n"
    "    rpc(c, clone(0, 2))\n"
    "    return c\n";

// A no_new_privs process that opens argv[2] connections, then says of each whether it was answered
// (1) or closed (0); it holds them until its stdin ends.
const std::string hold_connections = sandboxed_client +
    "conns = []\n"
    "for i in range(int(sys.argv[2])):\n"
    "    c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1]); c.settimeout(5); conns.append(c)\n"
    "frame = msg(100, 0xffff, struct.pack('<I', 8192) + s(b'9P2000'))\n"
    "out = ''\n"
    "for c in conns:\n"
    "    try:\n"
    "        c.sendall(frame); out += '1' if c.recv(64) else '0'\n"
    "    except OSError:\n"
    "        out += '0'\n"
    "print(out, flush=True)\n"
    "sys.stdin.read()\n";

// Sandboxed processes (no_new_privs: tools) hold at most three quarters of the connections: a
// tool that opens them until it is refused leaves the last quarter to the user's clients.
TEST_F(Limits, SandboxedPeersLeaveAQuarterOfTheConnectionsToTheOthers) {
  ServerOptions opt;
  opt.max_connections = 4;
  serve(opt);
  testing_support::Child tool({"/usr/bin/python3", "-c", hold_connections, srv->sock, "4"});
  EXPECT_EQ(tool.read_until("\n"), "1110\n");
  auto mine = attached();  // the user's client still gets in
  EXPECT_EQ(mine->walk(0, 1, {"hello"}).type, Rwalk);
  tool.close_stdin();
  ASSERT_TRUE(tool.wait());
}

// And one sandboxed process holds at most 256 of them: below Landlock ABI 9 a session's tools all
// connect through its toolsrv's connector, and one session must not take the room every other
// session's callbacks need. Another sandboxed process still gets in.
TEST_F(Limits, OneSandboxedProcessHoldsAtMost256Connections) {
  ServerOptions opt;
  opt.max_connections = 2000;
  serve(opt);
  testing_support::Child hog({"/usr/bin/python3", "-c", hold_connections, srv->sock, "300"});
  EXPECT_EQ(hog.read_until("\n"), std::string(256, '1') + std::string(44, '0') + "\n");
  testing_support::Child other({"/usr/bin/python3", "-c", hold_connections, srv->sock, "3"});
  EXPECT_EQ(other.read_until("\n"), "111\n");
  hog.close_stdin();
  other.close_stdin();
  ASSERT_TRUE(hog.wait());
  ASSERT_TRUE(other.wait());
}

// Requests in flight are capped per connection (each holds memory until answered; a blocked
// read, until its file has bytes): past it an Rerror, and a Tflush or Tclunk still gets through.
TEST_F(Limits, RequestsInFlightAreCappedPerConnection) {
  serve({});
  auto c = attached();
  ASSERT_EQ(c->walk(0, 1, {"log"}).type, Rwalk);
  ASSERT_EQ(c->open(1, OREAD).type, Ropen);
  ASSERT_EQ(c->walk(0, 2, {"hello"}).type, Rwalk);
  std::vector<std::uint8_t> batch;
  for (std::uint16_t tag = 1; tag <= 1024; tag++) ASSERT_TRUE(encode(Raw::tread(1, 0, 100, tag), batch));
  c->send_bytes(batch);
  c->send(Raw::tread(1, 0, 100, 5000));
  auto r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tag, 5000);
  EXPECT_EQ(r->ename, "too many requests in flight");
  EXPECT_EQ(c->clunk(2).type, Rclunk);
  auto flush = req(Tflush, 6000);
  flush.oldtag = 7;
  c->send(flush);
  r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, Rflush);
  EXPECT_EQ(c->walk(0, 3, {"hello"}).type, Rwalk);  // the flushed read's room
  st->log->append("now\n");  // one of the reads left takes it
  r = c->recv();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->data, "now\n");
}

// A sandboxed peer (no_new_privs: a tool) has far fewer: 64.
TEST_F(Limits, ASandboxedPeerHasSixtyFourRequestsInFlight) {
  serve({});
  const std::string script = sandboxed_client +
      "c = dial_log()\n"
      "c.sendall(b''.join(read(1, t) for t in range(1, 66)))\n"
      "r = recv(c)\n"
      "print(struct.unpack('<H', r[5:7])[0], errname(r), flush=True)\n";
  testing_support::Child tool({"/usr/bin/python3", "-c", script, srv->sock});
  EXPECT_EQ(tool.read_until("\n"), "65 too many requests in flight\n");
  tool.close_stdin();
  ASSERT_TRUE(tool.wait());
}

TEST_F(Limits, AuthFidsAreCapped) {
  serve({});
  Raw c(srv->sock);
  c.version();
  for (std::uint32_t f = 0; f < MAX_AUTH_FIDS; f++) ASSERT_EQ(c.rpc(tauth(100 + f, "agent1")).type, Rauth) << f;
  auto r = c.rpc(tauth(200, "agent1"));
  EXPECT_EQ(r.ename, "too many auth fids");
  EXPECT_EQ(c.rpc(tclone(100, 201)).ename, "too many auth fids");  // a clone of one is one
  ASSERT_EQ(c.clunk(100).type, Rclunk);
  EXPECT_EQ(c.rpc(tauth(200, "agent1")).type, Rauth);
}

TEST_F(Limits, FidsAreCappedPerConnection) {
  serve({});
  auto c = attached();
  std::vector<std::uint8_t> batch;
  for (std::uint32_t f = 1; f < MAX_FIDS; f++) ASSERT_TRUE(encode(tclone(0, f, f % 1000), batch));
  std::thread sender([&] { c->send_bytes(batch); });
  std::size_t ok = 0;
  for (std::uint32_t f = 1; f < MAX_FIDS; f++) {
    auto r = c->recv();
    if (r && r->type == Rwalk) ok++;
  }
  sender.join();
  ASSERT_EQ(ok, MAX_FIDS - 1);
  EXPECT_EQ(c->walk(0, 5000, {}).ename, "too many fids");
  EXPECT_EQ(c->attach(5000, "glenda").ename, "too many fids");
  ASSERT_EQ(c->clunk(7).type, Rclunk);
  EXPECT_EQ(c->walk(0, 5000, {}).type, Rwalk);
  Raw other(srv->sock);  // the cap is per connection
  other.version();
  EXPECT_EQ(other.attach(0, "glenda").type, Rattach);
}

// A sandboxed principal's fids over all its connections are capped too: a tool that opens
// connection after connection holds no more. The user's own clients (not sandboxed) are capped
// per connection only: a client of hers that leaks fids never locks out her others.
TEST_F(Limits, ASandboxedPrincipalsFidsAreCappedOverItsConnections) {
  serve({});
  const std::string script = sandboxed_client +
      "conns = []\n"
      "for i in range(" + std::to_string(MAX_FIDS_PER_UID / MAX_FIDS) + "):\n"
      "    c = dial(); attach(c, 0); conns.append(c)\n"
      "    c.sendall(b''.join(clone(0, f, f % 1000) for f in range(1, " + std::to_string(MAX_FIDS) + ")))\n"
      "    ok = sum(errname(recv(c)) == 'ok' for f in range(1, " + std::to_string(MAX_FIDS) + "))\n"
      "    if ok != " + std::to_string(MAX_FIDS - 1) + ": print('connection', i, 'got', ok, 'fids', flush=True)\n"
      "more = dial()\n"
      "print(errname(attach(more, 0)), flush=True)\n"
      "sys.stdin.readline()\n"
      "print(errname(rpc(conns[1], clunk(7))), errname(attach(more, 0)), errname(rpc(more, clone(0, 1))), flush=True)\n";
  testing_support::Child tool({"/usr/bin/python3", "-c", script, srv->sock});
  EXPECT_EQ(tool.read_until("\n"), "too many fids\n");
  // The user's client: her principal is the same, and her fids are not capped by the tool's.
  std::vector<std::unique_ptr<Raw>> mine;
  for (std::size_t i = 0; i <= MAX_FIDS_PER_UID / MAX_FIDS; i++) {
    mine.push_back(attached());
    std::vector<std::uint8_t> batch;
    for (std::uint32_t f = 1; f < MAX_FIDS; f++) ASSERT_TRUE(encode(tclone(0, f, f % 1000), batch));
    std::thread sender([&] { mine.back()->send_bytes(batch); });
    std::size_t ok = 0;
    for (std::uint32_t f = 1; f < MAX_FIDS; f++)
      if (auto r = mine.back()->recv(); r && r->type == Rwalk) ok++;
    sender.join();
    EXPECT_EQ(ok, MAX_FIDS - 1) << i;
  }
  tool.write_stdin("go on\n");
  // A fid freed on any of its connections is room on the others; then the cap holds again.
  // (what it printed so far; waited for up to its last line: "fids\nok" is found after the first)
  EXPECT_EQ(tool.read_until("ok ok too many fids\n"), "too many fids\nok ok too many fids\n");
  tool.close_stdin();
  ASSERT_TRUE(tool.wait());
}

// A sandboxed principal's requests in flight over all its connections are capped: 16 connections
// of 64 blocked reads each are all it gets, and a connection gone gives its room back.
TEST_F(Limits, ASandboxedPrincipalsRequestsInFlightAreCappedOverItsConnections) {
  serve({});
  const std::string script = sandboxed_client +
      "conns = [dial_log() for i in range(17)]\n"
      "for c in conns[:16]:\n"
      "    c.sendall(b''.join(read(1, t) for t in range(1, 65)) + clunk(2, 100))\n"
      "    r = recv(c)\n"  // the clunk's, served after the 64 reads were taken: they are in flight
      "    if r[4] != 121: print('not the clunk:', r, flush=True)\n"
      "print(errname(rpc(conns[16], read(1, 1))), flush=True)\n"
      "conns[0].close()\n"
      "conns[16].settimeout(0.3)\n"
      "for tag in range(2, 100):\n"
      "    try:\n"
      "        r = rpc(conns[16], read(1, tag)); time.sleep(0.05)\n"
      "    except socket.timeout:\n"
      "        print('blocked', flush=True); break\n"
      "sys.stdin.readline()\n";
  testing_support::Child tool({"/usr/bin/python3", "-c", script, srv->sock});
  EXPECT_EQ(tool.read_until("\n"), "too many requests in flight\n");
  // The user's client is not counted with the tool's, though it attached as the same name.
  auto mine = attached();
  ASSERT_EQ(mine->walk(0, 1, {"log"}).type, Rwalk);
  ASSERT_EQ(mine->open(1, OREAD).type, Ropen);
  std::vector<std::uint8_t> batch;
  for (std::uint16_t tag = 1; tag <= 100; tag++) ASSERT_TRUE(encode(Raw::tread(1, 0, 100, tag), batch));
  mine->send_bytes(batch);
  EXPECT_EQ(mine->walk(0, 2, {"hello"}).type, Rwalk);  // answered: none of the 100 reads was refused
  EXPECT_EQ(tool.read_until("blocked\n"), "too many requests in flight\nblocked\n");  // (what it printed so far)
  tool.close_stdin();
  ASSERT_TRUE(tool.wait());
}

TEST(ServerFids, EveryFidOfAConnectionSharesOneBufferCounter) {
  auto fs = std::make_shared<ProbeFs>();
  testing_support::TestServer srv(fs);
  Raw a(srv.sock), b(srv.sock);
  a.version();
  b.version();
  ASSERT_EQ(a.rpc(tauth(5, "x")).type, Rauth);
  ASSERT_EQ(a.attach(0, "x", 5).type, Rattach);
  ASSERT_EQ(a.walk(0, 1, {}).type, Rwalk);
  ASSERT_EQ(a.rpc(tstat(1)).type, Rstat);
  ASSERT_EQ(b.attach(0, "x").type, Rattach);
  std::lock_guard lk(fs->mu);
  ASSERT_EQ(fs->counters.size(), 4u);  // auth, attach, stat of the clone; attach on b
  ASSERT_NE(fs->counters[0], nullptr);
  EXPECT_EQ(fs->counters[1], fs->counters[0]);
  EXPECT_EQ(fs->counters[2], fs->counters[0]);
  EXPECT_NE(fs->counters[3], fs->counters[0]);
  ASSERT_NE(fs->counters[3], nullptr);
}

TEST(ServerErrors, RerrorOfALongNameIsCutToErrmaxAndFitsMsize256) {
  auto st = std::make_shared<testing_support::DemoState>();
  testing_support::TestServer srv(testing_support::demo_fs(st));
  Raw c(srv.sock);
  ASSERT_EQ(c.version(256).msize, 256u);
  ASSERT_EQ(c.attach(0, "glenda").type, Rattach);
  std::string name;
  for (int i = 0; i < 118; i++) name += "\xc3\xa9";
  name += "x";  // 237 bytes: the Twalk is exactly 256 bytes
  auto r = c.walk(0, 1, {name});
  ASSERT_EQ(r.type, Rerror);
  EXPECT_LE(encoded_size(r), 256u);
  // Its start and its reason; the cut at byte 191 would split a character, so it is at 192.
  const std::string text = name + ": file not found";
  EXPECT_EQ(r.ename, text.substr(0, 62) + "\xE2\x80\xA6" + text.substr(192));
  EXPECT_EQ(c.walk(0, 1, {"hello"}).type, Rwalk);
}

TEST(ServerErrors, SeventyKilobyteErrorGoesOutCutNotWrapped) {
  testing_support::TestServer srv(std::make_shared<ProbeFs>());
  Raw c(srv.sock);
  c.version(65536);
  ASSERT_EQ(c.attach(0, "x").type, Rattach);
  auto r = c.walk(0, 1, {"huge-error"});  // Raw::recv throws on a malformed frame
  ASSERT_EQ(r.type, Rerror);
  EXPECT_EQ(r.ename, std::string(62, 'e') + "\xE2\x80\xA6" + std::string(62, 'e'));
}

TEST(ServerErrors, ReplyThatWouldPassMsizeBecomesAnError) {
  testing_support::TestServer srv(std::make_shared<ProbeFs>());
  Raw c(srv.sock);
  c.version(256);
  ASSERT_EQ(c.attach(0, "x").type, Rattach);
  ASSERT_EQ(c.walk(0, 1, {"long-name"}).type, Rwalk);
  auto r = c.rpc(tstat(1));
  EXPECT_EQ(r.ename, "message larger than msize");
  EXPECT_EQ(c.rpc(tstat(0)).type, Rstat);
}

// ---- The accept loop, against the real olliesrv ------------------------------------------------

namespace {

// CPU seconds (user + system) the process has used.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), {});
  std::istringstream rest(all.substr(all.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; i++) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return double(utime + stime) / sysconf(_SC_CLK_TCK);
}

std::size_t count_lines(const std::string& path, const std::string& with) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find(with) != std::string::npos) n++;
  return n;
}

// A Unix socket at `path` listens: its line in /proc/net/unix has __SO_ACCEPTCON (0x10000).
bool listening(const std::string& path) {
  std::ifstream in("/proc/net/unix");
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string num, refs, proto, flags, type, st, inode, p;
    if ((f >> num >> refs >> proto >> flags >> type >> st >> inode >> p) && p == path)
      return (std::stoul(flags, nullptr, 16) & 0x10000) != 0;
  }
  return false;
}

// olliesrv with `ulimit -n nofile`, its log (stderr) in a file, listening on sock.
struct LimitedOlliesrv {
  testing_support::TempDir dir;
  std::string sock = dir.path + "/sock", log = dir.path + "/log";
  std::unique_ptr<testing_support::Child> child;

  LimitedOlliesrv(int nofile, std::vector<std::string> flags) {
    std::string shell = "ulimit -n " + std::to_string(nofile) + " && exec \"$0\" \"$@\" 2>" + log;
    std::vector<std::string> argv = {"sh", "-c", shell, testing_support::built("bin/olliesrv"),
                                     "-a", "unix!" + sock, "-l", "info"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    child = std::make_unique<testing_support::Child>(argv, std::vector<std::string>{"XDG_DATA_HOME=" + dir.path + "/data"});
    // Up once its socket listens: the file is there from the bind, before the listen (a connect
    // then is refused), and a probe connection would count against -maxconn.
    for (int i = 0; i < 500; i++) {
      if (listening(sock)) return;
      std::this_thread::sleep_for(20ms);
    }
    throw std::runtime_error("olliesrv did not start: " + log);
  }
  std::unique_ptr<Raw> attach() {
    auto c = std::make_unique<Raw>(sock);
    c->version();
    auto r = c->attach(0, p9::login_name());
    if (r.type != Rattach) throw std::runtime_error("attach: " + r.ename);
    return c;
  }
};

}  // namespace

TEST(AcceptLoop, OutOfDescriptorsItBacksOffLogsOnceAndServesOnceDescriptorsFree) {
  LimitedOlliesrv srv(64, {"-maxconn", "1000"});  // the cap out of the way: accept meets EMFILE
  {
    // One whole connection first: UBSan checks a type's vptr with a pipe the first time it sees
    // it, which fails without descriptors; after this the types a connection uses are cached.
    auto warm = srv.attach();
    ASSERT_EQ(warm->walk(0, 1, {"help"}).type, Rwalk);
    ASSERT_EQ(warm->open(1, OREAD).type, Ropen);
    ASSERT_EQ(warm->read(1, 0).type, Rread);
    ASSERT_EQ(warm->clunk(1).type, Rclunk);
  }
  std::this_thread::sleep_for(200ms);
  std::vector<std::unique_ptr<Raw>> held;
  for (int i = 0; i < 80; i++) held.push_back(std::make_unique<Raw>(srv.sock));
  std::this_thread::sleep_for(500ms);
  double before = cpu_seconds(srv.child->pid());
  std::this_thread::sleep_for(1s);
  double used = cpu_seconds(srv.child->pid()) - before;
  EXPECT_LT(used, 0.3) << "the accept loop spins";
  EXPECT_LE(count_lines(srv.log, "accept"), 1u) << "the log is flooded";
  held.clear();  // descriptors free
  std::unique_ptr<Raw> c;
  std::string why;
  for (int i = 0; i < 50 && !c; i++) {  // the dead queued connections are accepted and closed first
    try {
      c = srv.attach();
    } catch (const std::exception& e) {
      why = e.what();
      std::this_thread::sleep_for(100ms);
    }
  }
  ASSERT_TRUE(c) << why << "\n" << std::ifstream(srv.log).rdbuf();
  EXPECT_EQ(c->walk(0, 1, {"help"}).type, Rwalk);
  EXPECT_LE(count_lines(srv.log, "accept"), 2u);  // the episode's start and end
}

TEST(AcceptLoop, OlliesrvClosesConnectionsPastMaxconnAtOnceAndLogsOnce) {
  LimitedOlliesrv srv(1024, {"-maxconn", "2"});
  auto a = srv.attach(), b = srv.attach();
  ASSERT_TRUE(a && b);
  for (int i = 0; i < 5; i++) {
    Raw c(srv.sock);
    EXPECT_FALSE(c.recv(5000));
    EXPECT_TRUE(c.eof());
  }
  EXPECT_EQ(count_lines(srv.log, "refusing new ones"), 1u);
  EXPECT_EQ(a->walk(0, 1, {"help"}).type, Rwalk);
}
