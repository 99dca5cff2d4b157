// The codec, byte for byte: fixed sizes from intro(5), round trips of every message, and every
// class of malformed input.
#include <gtest/gtest.h>

#include "lib9p/codec.hpp"
#include "lib9p/errors.hpp"

using namespace p9;

namespace {

Fcall msg(std::uint8_t type, std::uint16_t tag = 1) {
  Fcall f;
  f.type = type;
  f.tag = tag;
  return f;
}

Dir sample_dir() {
  Dir d;
  d.type = 1;
  d.dev = 2;
  d.qid = {QTDIR, 7, 0x1122334455667788};
  d.mode = DMDIR | 0555;
  d.atime = 10;
  d.mtime = 20;
  d.length = 0;
  d.name = "session";
  d.uid = "glenda";
  d.gid = "agent";
  d.muid = "glenda";
  return d;
}

std::vector<Fcall> every_message() {
  std::vector<Fcall> v;
  auto f = msg(Tversion, NOTAG); f.msize = 8192; f.version = "9P2000"; v.push_back(f);
  f = msg(Rversion, NOTAG); f.msize = 8192; f.version = "9P2000"; v.push_back(f);
  f = msg(Tauth); f.afid = 5; f.uname = "glenda"; f.aname = ""; v.push_back(f);
  f = msg(Rauth); f.aqid = {QTAUTH, 0, 9}; v.push_back(f);
  f = msg(Tattach); f.fid = 0; f.afid = NOFID; f.uname = "glenda"; f.aname = "x"; v.push_back(f);
  f = msg(Rattach); f.qid = {QTDIR, 0, 1}; v.push_back(f);
  f = msg(Rerror); f.ename = "file not found"; v.push_back(f);
  f = msg(Tflush); f.oldtag = 3; v.push_back(f);
  v.push_back(msg(Rflush));
  f = msg(Twalk); f.fid = 0; f.newfid = 1; f.wname = {"session", "s1", "agent"}; v.push_back(f);
  f = msg(Rwalk); f.wqid = {{QTDIR, 0, 2}, {QTDIR, 0, 3}}; v.push_back(f);
  f = msg(Topen); f.fid = 1; f.mode = OWRITE | OTRUNC; v.push_back(f);
  f = msg(Ropen); f.qid = {0, 1, 4}; f.iounit = 8168; v.push_back(f);
  f = msg(Tcreate); f.fid = 1; f.name = "x"; f.perm = 0666; f.mode = 0; v.push_back(f);
  f = msg(Rcreate); f.qid = {0, 0, 5}; f.iounit = 0; v.push_back(f);
  f = msg(Tread); f.fid = 1; f.offset = 1ull << 40; f.count = 4096; v.push_back(f);
  f = msg(Rread); f.data = std::string("he\0llo", 6); v.push_back(f);
  f = msg(Twrite); f.fid = 1; f.offset = 3; f.data = "stop\n"; v.push_back(f);
  f = msg(Rwrite); f.count = 5; v.push_back(f);
  f = msg(Tclunk); f.fid = 1; v.push_back(f);
  v.push_back(msg(Rclunk));
  f = msg(Tremove); f.fid = 1; v.push_back(f);
  v.push_back(msg(Rremove));
  f = msg(Tstat); f.fid = 1; v.push_back(f);
  f = msg(Rstat); f.stat = *encode_dir(sample_dir()); v.push_back(f);
  f = msg(Twstat); f.fid = 1; f.stat = *encode_dir(Dir::null()); v.push_back(f);
  v.push_back(msg(Rwstat));
  return v;
}

bool same(const Fcall& a, const Fcall& b) {
  return a.type == b.type && a.tag == b.tag && a.fid == b.fid && a.msize == b.msize && a.version == b.version &&
         a.oldtag == b.oldtag && a.ename == b.ename && a.qid == b.qid && a.iounit == b.iounit && a.aqid == b.aqid &&
         a.afid == b.afid && a.uname == b.uname && a.aname == b.aname && a.perm == b.perm && a.name == b.name &&
         a.mode == b.mode && a.newfid == b.newfid && a.wname == b.wname && a.wqid == b.wqid &&
         a.offset == b.offset && a.count == b.count && a.data == b.data && a.stat == b.stat;
}

}  // namespace

TEST(Codec, EveryMessageRoundTrips) {
  for (const auto& f : every_message()) {
    auto bytes = *encode(f);
    ASSERT_EQ(bytes.size(), encoded_size(f)) << type_name(f.type);
    auto back = decode(bytes);
    ASSERT_TRUE(back) << type_name(f.type) << ": " << back.ename();
    EXPECT_TRUE(same(f, *back)) << type_name(f.type);
  }
}

TEST(Codec, FixedSizesMatchIntro) {
  auto size = [](Fcall f) { return encode(f)->size(); };
  auto f = msg(Tversion); f.version = "9P2000";
  EXPECT_EQ(size(f), 19u);
  EXPECT_EQ(size(msg(Rattach)), 20u);
  EXPECT_EQ(size(msg(Tflush)), 9u);
  EXPECT_EQ(size(msg(Rflush)), 7u);
  f = msg(Rwalk); f.wqid.resize(2);
  EXPECT_EQ(size(f), 9u + 26u);
  EXPECT_EQ(size(msg(Topen)), 12u);
  EXPECT_EQ(size(msg(Ropen)), 24u);
  EXPECT_EQ(size(msg(Tread)), 23u);
  f = msg(Rread); f.data = "abc";
  EXPECT_EQ(size(f), 14u);
  f = msg(Twrite); f.data = "abc";
  EXPECT_EQ(size(f), 26u);
  EXPECT_EQ(size(msg(Rwrite)), 11u);
  EXPECT_EQ(size(msg(Tclunk)), 11u);
  EXPECT_EQ(size(msg(Rclunk)), 7u);
  f = msg(Rerror); f.ename = "x";
  EXPECT_EQ(size(f), 10u);
}

TEST(Codec, ExactBytesOfTversion) {
  auto f = msg(Tversion, NOTAG);
  f.msize = 8192;
  f.version = "9P2000";
  std::vector<std::uint8_t> want = {19, 0, 0, 0, 100, 0xff, 0xff, 0x00, 0x20, 0, 0, 6, 0, '9', 'P', '2', '0', '0', '0'};
  EXPECT_EQ(*encode(f), want);
}

TEST(Codec, StatEntryLayout) {
  Dir d = sample_dir();
  auto bytes = *encode_dir(d);
  EXPECT_EQ(bytes.size(), STATFIXLEN + d.name.size() + d.uid.size() + d.gid.size() + d.muid.size());
  EXPECT_EQ(bytes[0] | bytes[1] << 8, static_cast<int>(bytes.size() - 2));  // size counts what follows
  auto back = decode_dir(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, d);
  auto f = msg(Rstat);
  f.stat = bytes;
  auto enc = *encode(f);
  EXPECT_EQ(enc[7] | enc[8] << 8, static_cast<int>(bytes.size()));  // n[2] = entry size + 2 (stat BUGS)
}

TEST(Codec, TruncatedFramesAreErrorsAtEveryLength) {
  for (const auto& f : every_message()) {
    auto bytes = *encode(f);
    for (std::size_t n = 0; n < bytes.size(); n++) {
      std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + n);
      if (n >= 4) {  // keep the size field honest about the cut frame, so only the body is short
        cut[0] = n & 0xff;
        cut[1] = (n >> 8) & 0xff;
        cut[2] = cut[3] = 0;
      }
      EXPECT_FALSE(decode(cut)) << type_name(f.type) << " cut at " << n;
    }
  }
}

TEST(Codec, SizeFieldThatLiesIsRejected) {
  auto f = msg(Tclunk);
  auto bytes = *encode(f);
  bytes[0] += 1;
  auto r = decode(bytes);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "size mismatch");
  bytes = *encode(f);
  bytes.push_back(0);  // trailing garbage: size field says 11, frame is 12
  EXPECT_FALSE(decode(bytes));
}

TEST(Codec, StringLongerThanFrame) {
  auto f = msg(Tattach);
  f.uname = "glenda";
  auto bytes = *encode(f);
  bytes[15] = 200;  // uname length
  auto r = decode(bytes);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "string longer than message");
}

TEST(Codec, CountLongerThanFrame) {
  auto f = msg(Twrite);
  f.data = "abc";
  auto bytes = *encode(f);
  bytes[19] = 0xff;  // count
  auto r = decode(bytes);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "count longer than message");
}

TEST(Codec, MoreThanSixteenWalkElements) {
  auto f = msg(Twalk);
  f.wname.assign(17, "a");
  auto r = decode(*encode(f));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "too many walk elements");
  f.wname.assign(16, "a");
  EXPECT_TRUE(decode(*encode(f)));
}

TEST(Codec, UnknownTypeNamesIt) {
  std::vector<std::uint8_t> topenfd = {12, 0, 0, 0, 98, 0, 0, 1, 0, 0, 0, 0};
  auto r = decode(topenfd);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "unknown message type 98");
  EXPECT_EQ(tag_of(topenfd), 0);
  std::vector<std::uint8_t> terror = {7, 0, 0, 0, Terror, 1, 0};
  EXPECT_FALSE(decode(terror));
}

TEST(Codec, NulInStringIsRejected) {
  auto f = msg(Tattach);
  f.uname = std::string("gle\0nda", 7);
  auto r = decode(*encode(f));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "nul in string");
}

TEST(Codec, BadStatInsideRstat) {
  auto f = msg(Rstat);
  f.stat = *encode_dir(sample_dir());
  f.stat[0] += 3;  // entry size lies
  EXPECT_FALSE(decode(*encode(f)));
}

TEST(Codec, DirectoryDataSplitsIntoEntries) {
  std::vector<std::uint8_t> buf;
  Dir a = sample_dir(), b = sample_dir();
  b.name = "help";
  ASSERT_TRUE(encode_dir(a, buf));
  ASSERT_TRUE(encode_dir(b, buf));
  auto dirs = decode_dirs(buf);
  ASSERT_TRUE(dirs);
  ASSERT_EQ(dirs->size(), 2u);
  EXPECT_EQ((*dirs)[1].name, "help");
  buf.pop_back();
  EXPECT_FALSE(decode_dirs(buf));
}

TEST(Codec, EncoderRefusesSeventyKilobyteStringsInsteadOfWrapping) {
  const std::string huge(70000, 'x');
  auto f = msg(Rerror);
  f.ename = huge;
  std::vector<std::uint8_t> out = {1, 2, 3};
  auto st = encode(f, out);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.ename(), "string too long");
  EXPECT_EQ(out, (std::vector<std::uint8_t>{1, 2, 3}));  // nothing appended
  EXPECT_FALSE(encode(f));
  f = msg(Twalk);
  f.wname = {"a", huge};
  EXPECT_EQ(encode(f).ename(), "string too long");
  f = msg(Tattach);
  f.aname = huge;
  EXPECT_FALSE(encode(f));
  f = msg(Rerror);
  f.ename.assign(MAXSTRING, 'x');  // the longest a string can be still encodes
  auto ok = encode(f);
  ASSERT_TRUE(ok);
  EXPECT_EQ(decode(*ok)->ename.size(), MAXSTRING);
}

TEST(Codec, EncoderRefusesAStatEntryOver65535Bytes) {
  Dir d = sample_dir();
  d.name.assign(70000, 'n');
  auto e = encode_dir(d);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.ename(), "stat entry too long");
  std::vector<std::uint8_t> out;
  EXPECT_FALSE(encode_dir(d, out));
  EXPECT_TRUE(out.empty());
  auto f = msg(Rstat);
  f.stat.assign(70000, 0);
  EXPECT_EQ(encode(f).ename(), "stat entry too long");
}

TEST(Codec, ALongErrorKeepsItsStartAndItsReasonCutOnCharacterBoundaries) {
  const std::string ell = "\xE2\x80\xA6";
  EXPECT_EQ(err::cut("short"), "short");
  EXPECT_EQ(err::cut(std::string(127, 'a')), std::string(127, 'a'));
  EXPECT_EQ(err::cut(std::string(200, 'a')), std::string(62, 'a') + ell + std::string(62, 'a'));
  auto cut = err::cut("cwd: /" + std::string(300, 'c') + ": not a directory");
  EXPECT_EQ(cut.size(), 127u);
  EXPECT_EQ(cut.substr(0, 8), "cwd: /cc");
  EXPECT_TRUE(cut.ends_with("ccc: not a directory")) << cut;
  std::string e;  // two-byte characters: both cuts fall on a boundary
  for (int i = 0; i < 100; i++) e += "\xc3\xa9";
  EXPECT_EQ(err::cut(e), e.substr(0, 62) + ell + e.substr(138));
  e = "x" + e;  // now bytes 62 and 138 are inside characters: the whole ones around them stay out
  cut = err::cut(e);
  EXPECT_EQ(cut, e.substr(0, 61) + ell + e.substr(139));
  EXPECT_EQ(cut.size(), 126u);
  EXPECT_EQ(err::cut("caf\xC3: file not found"), "caf\xEF\xBF\xBD: file not found");  // a client's bytes in it
}

TEST(Codec, AnErrorIsOneLineATerminalShowsAsItIs) {
  EXPECT_EQ(err::cut("bad token: a\nb"), "bad token: a\\nb");
  EXPECT_EQ(err::cut("502 boom\x1b[31m\t\r\x7f"), "502 boom\\x1b[31m\\t\\r\\x7f");
  EXPECT_EQ(err::cut(std::string("q\0x", 3)), "q\\x00x");  // no 9P string holds a NUL
  EXPECT_EQ(err::cut("csi \xC2\x9B" "2J"), "csi \\xc2\\x9b2J");  // a C1 control
  EXPECT_EQ(err::cut("caf\xC3\xA9 \xC2\xA9 \\n"), "caf\xC3\xA9 \xC2\xA9 \\n");  // é, ©, a backslash: as they are
  // Escaped, then cut: the 127 bytes are those that go out.
  EXPECT_EQ(err::cut(std::string(200, '\n')).size(), 127u);
}

TEST(Framing, FewerThanFourBytesNeedMore) {
  std::vector<std::uint8_t> b = {11, 0, 0};
  EXPECT_EQ(frame_at(b, 8192), (Framing{Framing::More, 0}));
  EXPECT_EQ(frame_at({}, 8192), (Framing{Framing::More, 0}));
}

TEST(Framing, AWholeFrameIsFoundAndAPartOneWaitsForItsSize) {
  auto f = msg(Tclunk);
  auto bytes = *encode(f);
  auto two = bytes;
  two.insert(two.end(), bytes.begin(), bytes.end());
  EXPECT_EQ(frame_at(two, 8192), (Framing{Framing::Whole, 11}));
  std::span<const std::uint8_t> part(bytes.data(), 8);
  EXPECT_EQ(frame_at(part, 8192), (Framing{Framing::More, 11}));
}

TEST(Framing, SizeUnderSevenOrOverSixteenMebibytesIsBad) {
  std::vector<std::uint8_t> tiny = {6, 0, 0, 0, 100, 0, 0};
  EXPECT_EQ(frame_at(tiny, 8192).kind, Framing::Bad);
  std::vector<std::uint8_t> huge = {1, 0, 0, 1, 100, 0, 0};  // 16 MiB + 1
  EXPECT_EQ(frame_at(huge, 8192).kind, Framing::Bad);
}

TEST(Framing, FrameOverMsizeIsOversizeOnceItsHeaderIsIn) {
  std::vector<std::uint8_t> b = {0x10, 0x27, 0, 0, 118, 6};  // 10000 bytes, tag not in yet
  EXPECT_EQ(frame_at(b, 8192), (Framing{Framing::More, 7}));
  b.push_back(0);
  EXPECT_EQ(frame_at(b, 8192), (Framing{Framing::Oversize, 10000}));
  EXPECT_EQ(tag_of(b), 6);
  EXPECT_EQ(frame_at(b, 10000), (Framing{Framing::More, 10000}));  // within msize: wait for it
}
