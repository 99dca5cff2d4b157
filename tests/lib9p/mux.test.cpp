// Mux, the client protocol state both clients share, driven with bytes alone: tags, flush(5)'s
// order, reply checks, framing, hang-up.
#include "lib9p/mux.hpp"

#include <gtest/gtest.h>

#include "lib9p/codec.hpp"
#include "lib9p/errors.hpp"
#include "lib9p/tmsg.hpp"

using namespace p9;

namespace {

std::vector<std::uint8_t> bytes(const Fcall& f) { return *encode(f); }

Fcall reply(std::uint8_t type, std::uint16_t tag) {
  Fcall r;
  r.type = type;
  r.tag = tag;
  return r;
}

// A request's end as its completion saw it: the reply's type, or the error.
struct Seen {
  std::vector<std::string> ends;
  Mux::Done done() {
    return [this](Result<Fcall> r) { ends.push_back(r ? type_name(r->type) : r.ename()); };
  }
};

}  // namespace

// At the cap a read is refused, a clunk is not: the server frees the fid only if it gets it.
TEST(Mux, AClunkHasRoomPastTheCap) {
  Mux m;
  Seen seen;
  std::vector<std::uint8_t> out;
  for (std::size_t i = 0; i < Mux::MAX_IN_FLIGHT; i++) {
    auto t = tmsg::read(1, 0, 10);
    ASSERT_TRUE(m.start(t, seen.done(), out));
  }
  auto read = tmsg::read(1, 0, 10);
  EXPECT_EQ(m.start(read, seen.done(), out).ename(), "too many requests in flight");
  auto clunk = tmsg::on_fid(Tclunk, 2);
  EXPECT_TRUE(m.start(clunk, seen.done(), out));
  EXPECT_NE(clunk.tag, NOTAG);
}

TEST(Mux, AFlushedTagIsNotReusedUntilItsRflush) {
  Mux m;
  Seen seen;
  std::vector<std::uint8_t> out;
  auto t = tmsg::read(1, 0, 10);
  ASSERT_TRUE(m.start(t, seen.done(), out));
  const std::uint16_t flushed = t.tag;
  bool settled = false;
  m.flush(flushed, [&] { settled = true; }, out);
  auto tflush = *decode(std::span(out).subspan(out.size() - 9));
  ASSERT_EQ(tflush.type, Tflush);
  EXPECT_EQ(tflush.oldtag, flushed);
  for (int i = 0; i < 70000; i++) {  // more than the whole tag space, one at a time
    auto s = tmsg::on_fid(Tclunk, 1);
    ASSERT_TRUE(m.start(s, [](Result<Fcall>) {}, out));
    ASSERT_NE(s.tag, flushed);
    ASSERT_TRUE(m.received(bytes(reply(Rclunk, s.tag))));
  }
  EXPECT_FALSE(settled);
  ASSERT_TRUE(m.received(bytes(reply(Rflush, tflush.tag))));
  EXPECT_TRUE(settled);
  EXPECT_EQ(seen.ends, std::vector<std::string>{err::interrupted});
  bool reused = false;
  for (int i = 0; i < 70000 && !reused; i++) {
    auto s = tmsg::on_fid(Tclunk, 1);
    ASSERT_TRUE(m.start(s, [](Result<Fcall>) {}, out));
    reused = s.tag == flushed;
    ASSERT_TRUE(m.received(bytes(reply(Rclunk, s.tag))));
  }
  EXPECT_TRUE(reused);
}

TEST(Mux, AReplyBeforeTheRflushStillCompletesTheFlushedRequest) {
  Mux m;
  Seen seen;
  std::vector<std::uint8_t> out;
  auto t = tmsg::read(1, 0, 10);
  ASSERT_TRUE(m.start(t, seen.done(), out));
  int settled = 0;
  m.flush(t.tag, [&] { settled++; }, out);
  m.flush(t.tag, [&] { settled++; }, out);  // a second flush of the same tag joins the first
  ASSERT_TRUE(m.received(bytes(reply(Rread, t.tag))));
  EXPECT_EQ(seen.ends, std::vector<std::string>{"Rread"});
  EXPECT_EQ(settled, 0);
  ASSERT_TRUE(m.received(bytes(reply(Rflush, t.tag + 1))));
  EXPECT_EQ(seen.ends, std::vector<std::string>{"Rread"});
  EXPECT_EQ(settled, 2);
  m.flush(t.tag, [&] { settled++; }, out);  // no longer in flight: settled at once, nothing sent
  EXPECT_EQ(settled, 3);
}

TEST(Mux, RerrorIsAnErrorAndAReplyOfTheWrongTypeIsRefused) {
  Mux m;
  Seen seen;
  std::vector<std::uint8_t> out;
  auto a = tmsg::read(1, 0, 10), b = tmsg::read(1, 0, 10);
  ASSERT_TRUE(m.start(a, seen.done(), out));
  ASSERT_TRUE(m.start(b, seen.done(), out));
  auto e = reply(Rerror, a.tag);
  e.ename = "no such thing";
  ASSERT_TRUE(m.received(bytes(e)));
  ASSERT_TRUE(m.received(bytes(reply(Rclunk, b.tag))));
  ASSERT_TRUE(m.received(bytes(reply(Rclunk, 999))));  // nobody's: ignored
  EXPECT_EQ(seen.ends, (std::vector<std::string>{"no such thing", "bad reply from server: Rclunk to Tread"}));
}

TEST(Mux, RepliesSplitAcrossReadsOrSharingOneAreEachDelivered) {
  Mux m;
  Seen seen;
  std::vector<std::uint8_t> out, in;
  for (int i = 0; i < 3; i++) {
    auto t = tmsg::on_fid(Tclunk, 1);
    ASSERT_TRUE(m.start(t, seen.done(), out));
    auto b = bytes(reply(Rclunk, t.tag));
    in.insert(in.end(), b.begin(), b.end());
  }
  for (std::size_t i = 0; i < in.size(); i += 5)
    ASSERT_TRUE(m.received(std::span(in).subspan(i, std::min<std::size_t>(5, in.size() - i))));
  EXPECT_EQ(seen.ends, (std::vector<std::string>{"Rclunk", "Rclunk", "Rclunk"}));
}

TEST(Mux, AFrameOverTheMsizeOrOneThatDoesNotDecodeEndsTheStream) {
  Mux m;
  std::vector<std::uint8_t> out;
  auto v = m.version_request(8192);
  ASSERT_TRUE(m.start(v, [](Result<Fcall>) {}, out));
  EXPECT_EQ(m.received(std::vector<std::uint8_t>{0x00, 0x40, 0x00, 0x00, 100, 0, 0}).ename(), "bad frame size from server: 16384");
  Mux m2;
  EXPECT_EQ(m2.received(std::vector<std::uint8_t>{8, 0, 0, 0, 150, 0, 0, 0}).ename().rfind("bad reply from server: ", 0), 0u);
}

TEST(Mux, VersionAdoptsTheServersMsizeAndRefusesOtherProtocols) {
  Mux m;
  auto ok = reply(Rversion, NOTAG);
  ok.version = VERSION9P;
  ok.msize = 4096;
  (void)m.version_request(8192);
  ASSERT_TRUE(m.version_reply(ok));
  EXPECT_EQ(m.msize(), 4096u);
  EXPECT_EQ(m.iounit(), 4096u - IOHDRSZ);
  ok.msize = 9000;
  EXPECT_EQ(m.version_reply(ok).ename(), "bad msize from server: 9000");
  ok.msize = 4096;
  ok.version = "unknown";
  EXPECT_EQ(m.version_reply(ok).ename(), "server speaks unknown, not 9P2000");
}

TEST(Mux, ClosingFailsEveryRequestSettlesEveryFlushAndRefusesWhatFollows) {
  Mux m;
  Seen seen;
  std::vector<std::uint8_t> out;
  auto a = tmsg::read(1, 0, 10), b = tmsg::read(1, 0, 10);
  ASSERT_TRUE(m.start(a, seen.done(), out));
  ASSERT_TRUE(m.start(b, seen.done(), out));
  bool settled = false;
  m.flush(b.tag, [&] { settled = true; }, out);
  m.close("connection closed: reset");
  m.close(err::hung_up);  // the first reason stays
  EXPECT_TRUE(settled);
  auto c = tmsg::read(1, 0, 10);
  EXPECT_EQ(m.start(c, seen.done(), out).ename(), "connection closed: reset");
  EXPECT_EQ(c.tag, NOTAG);
  EXPECT_EQ(seen.ends, std::vector<std::string>(3, "connection closed: reset"));
}

TEST(Mux, FidNumbersAreReusedOnlyOnceReleased) {
  Mux m;
  auto a = m.new_fid(), b = m.new_fid();
  EXPECT_NE(a, b);
  m.release_fid(a);
  EXPECT_EQ(m.new_fid(), a);
  EXPECT_NE(m.new_fid(), b);
}
