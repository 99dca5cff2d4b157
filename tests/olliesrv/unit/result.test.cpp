#include <gtest/gtest.h>

#include <string>

#include "olliesrv/result.hpp"

using namespace ollie;

namespace {

const std::string fffd = "\xEF\xBF\xBD";
const std::string ellipsis = "\xE2\x80\xA6";

ProcReply reply(const std::string& status, const std::string& out, const std::string& err,
                std::map<std::string, std::string> extra = {}) {
  ProcReply r;
  r.header = std::move(extra);
  r.header["pid"] = "1";
  r.header["status"] = status;
  r.header["stdout"] = std::to_string(out.size());
  r.header["stderr"] = std::to_string(err.size());
  r.out = out;
  r.err = err;
  return r;
}

ProcReply exited(int code, const std::string& out, const std::string& err = "") {
  return reply("exited", out, err, {{"exit", std::to_string(code)}});
}

}  // namespace

TEST(Result, ParsesHeaderAndSplitsBodyByCounts) {
  auto r = parse_proc_reply("pid=12\nstatus=exited\nexit=1\nstdout=3\nstderr=4\n\nouterr\n");
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(r->header.at("pid"), "12");
  EXPECT_EQ(r->header.at("status"), "exited");
  EXPECT_EQ(r->header.at("exit"), "1");
  EXPECT_EQ(r->out, "out");
  EXPECT_EQ(r->err, "err\n");
}

TEST(Result, KeepsBinaryAndBlankLinesOfTheBody) {
  std::string body("a\n\nb\0c", 6);
  auto r = parse_proc_reply("pid=1\nstatus=exited\nexit=0\nstdout=6\nstderr=0\n\n" + body);
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(r->out, body);
  EXPECT_EQ(r->err, "");
}

TEST(Result, RejectsMalformedReplies) {
  EXPECT_FALSE(parse_proc_reply(""));
  EXPECT_FALSE(parse_proc_reply("pid=1\nstatus=exited\n"));                     // no empty line
  EXPECT_EQ(parse_proc_reply("pid=1\ngarbage\n\n").ename(), "bad reply header: garbage");
  EXPECT_FALSE(parse_proc_reply("status=exited\nstderr=0\n\n"));                // no stdout count
  EXPECT_FALSE(parse_proc_reply("status=exited\nstdout=x\nstderr=0\n\n"));      // not a number
  EXPECT_FALSE(parse_proc_reply("status=exited\nstdout=-1\nstderr=0\n\n"));
  EXPECT_FALSE(parse_proc_reply("status=exited\nstdout=99999999999999999999\nstderr=0\n\n"));
  EXPECT_FALSE(parse_proc_reply("status=exited\nstdout=5\nstderr=0\n\nabc"));   // short body
  EXPECT_FALSE(parse_proc_reply("status=exited\nstdout=1\nstderr=0\n\nabc"));   // long body
}

TEST(Result, PlainStdoutIsTheText) {
  auto c = convert_reply(exited(0, "hello\n"), 30);
  EXPECT_EQ(c.text, "hello\n");
  EXPECT_FALSE(c.error);
}

TEST(Result, InvalidUtf8IsReplacedInStdoutAndStderr) {
  auto c = convert_reply(exited(0, "a\xFF", "b\xC3"), 30);
  EXPECT_EQ(c.text, "a" + fffd + "\n[stderr]\nb" + fffd);
}

TEST(Result, EnvelopeTextPartsAreJoinedAndOthersOmitted) {
  auto c = convert_reply(
      exited(0, R"({"content":[{"type":"text","text":"one"},{"type":"image","data":"xx"},)"
                R"({"type":"text","text":"two"}],"isError":false})"),
      30);
  EXPECT_EQ(c.text, "one\n[image content omitted]\ntwo");
  EXPECT_FALSE(c.error);
}

TEST(Result, EnvelopeIsErrorPrefixesTheText) {
  auto c = convert_reply(exited(0, R"({"content":[{"type":"text","text":"no such file"}],"isError":true})"), 30);
  EXPECT_EQ(c.text, "error: no such file");
  EXPECT_TRUE(c.error);
}

// An envelope is parsed on the session's I/O thread: one over 1 MiB, or nested deeper than 32
// (a tool's 10 MiB of `[` held the thread for half a minute), is taken as raw text, cut as any.
TEST(Result, AnEnvelopeTooLargeOrTooDeepIsRawText) {
  const std::string deep = R"({"content":[{"type":"text","text":"x"}],"bogus":)" + std::string(40, '[') + std::string(40, ']') + "}";
  EXPECT_EQ(convert_reply(exited(0, deep), 30).text, deep);
  const std::string shallow = R"({"content":[{"type":"text","text":"[[[[x"}],"ok":)" + std::string(30, '[') + std::string(30, ']') + "}";
  EXPECT_EQ(convert_reply(exited(0, shallow), 30).text, "[[[[x");  // brackets in strings do not count
  std::string big = R"({"content":[)";
  while (big.size() <= (1u << 20)) big += R"({"type":"text","text":"y"},)";
  big += R"({"type":"text","text":"end"}]})";
  const auto c = convert_reply(exited(0, big), 30);
  EXPECT_TRUE(c.text.starts_with(R"({"content":[{"type":"text")")) << c.text.substr(0, 80);
  EXPECT_NE(c.text.find("bytes omitted"), std::string::npos);
}

TEST(Result, JsonWithoutContentArrayIsPlainText) {
  const std::string j = R"({"content":"not an array"})";
  EXPECT_EQ(convert_reply(exited(0, j), 30).text, j);
  EXPECT_EQ(convert_reply(exited(0, "[1,2]"), 30).text, "[1,2]");
  EXPECT_EQ(convert_reply(exited(0, "{broken"), 30).text, "{broken");
}

TEST(Result, StderrIsAppended) {
  EXPECT_EQ(convert_reply(exited(0, "out\n", "warn\n"), 30).text, "out\n\n[stderr]\nwarn\n");
  EXPECT_EQ(convert_reply(exited(0, "", "warn"), 30).text, "\n[stderr]\nwarn");
  EXPECT_EQ(convert_reply(exited(0, R"({"content":[{"type":"text","text":"x"}]})", "w"), 30).text,
            "x\n[stderr]\nw");
}

TEST(Result, NonZeroExitIsPrefixed) {
  auto c = convert_reply(exited(2, "partial\n", "boom\n"), 30);
  EXPECT_EQ(c.text, "error: exit status 2\npartial\n\n[stderr]\nboom\n");
  EXPECT_TRUE(c.error);
  EXPECT_EQ(convert_reply(exited(1, ""), 30).text, "error: exit status 1\n");
}

// §8.3.4's rules in order: the envelope's `error: `, then the exit's prefix before it.
TEST(Result, ExitPrefixThenTheErrorEnvelopesOwn) {
  auto c = convert_reply(exited(1, R"({"content":[{"type":"text","text":"bad path"}],"isError":true})"), 30);
  EXPECT_EQ(c.text, "error: exit status 1\nerror: bad path");
  EXPECT_TRUE(c.error);
  // A successful envelope from a failing process is still an error.
  auto d = convert_reply(exited(3, R"({"content":[{"type":"text","text":"half"}],"isError":false})"), 30);
  EXPECT_EQ(d.text, "error: exit status 3\nhalf");
  EXPECT_TRUE(d.error);
}

TEST(Result, TimeoutNamesTheTimeoutInForce) {
  auto c = convert_reply(reply("timeout", "started\n", ""), 5);
  EXPECT_EQ(c.text, "error: execution timeout after 5 seconds\nstarted\n");
  EXPECT_TRUE(c.error);
}

TEST(Result, SignalDeniedAndFailed) {
  auto s = convert_reply(reply("signaled", "", "", {{"signal", "9"}}), 30);
  EXPECT_EQ(s.text, "error: killed by signal 9\n");
  EXPECT_TRUE(s.error);
  auto d = convert_reply(reply("denied", "", "bypass refused: tool inside a writable path: /x\n"), 30);
  EXPECT_EQ(d.text, "error: bypass denied\n\n[stderr]\nbypass refused: tool inside a writable path: /x\n");
  EXPECT_TRUE(d.error);
  auto f = convert_reply(reply("failed", "", "sandbox unavailable: landlock not supported\n"), 30);
  EXPECT_EQ(f.text, "error: sandbox unavailable: landlock not supported");
  EXPECT_TRUE(f.error);
}

TEST(Result, UnknownStatusIsAnError) {
  auto c = convert_reply(reply("weird", "x", ""), 30);
  EXPECT_EQ(c.text, "error: bad reply from tool server: status weird\nx");
  EXPECT_TRUE(c.error);
}

TEST(Result, ShortResultsAreNotCut) {
  const std::string s(8192, 'x');
  EXPECT_EQ(cut_result(s), s);
}

TEST(Result, LongResultsKeepHeadAndTail) {
  const std::string s = std::string(4096, 'h') + std::string(1000, 'm') + std::string(4096, 't');
  EXPECT_EQ(cut_result(s), std::string(4096, 'h') + "\n[" + ellipsis + " 1000 bytes omitted " + ellipsis + "]\n" +
                               std::string(4096, 't'));
  const std::string one = std::string(8193, 'a');
  EXPECT_EQ(cut_result(one), std::string(4096, 'a') + "\n[" + ellipsis + " 1 bytes omitted " + ellipsis + "]\n" +
                                 std::string(4096, 'a'));
}

TEST(Result, CutsMoveInwardToCharacterBoundaries) {
  // A 3-byte euro sign straddles byte 4096 of the head and the start of the tail.
  const std::string euro = "\xE2\x82\xAC";
  std::string s = std::string(4095, 'h') + euro + std::string(2000, 'm');
  s += "m" + euro + std::string(4095, 't');  // the tail's cut falls on this euro's last byte
  // head: 4095 'h' (the euro would end past 4096); tail: starts after the split euro.
  const std::size_t tail_start = s.size() - 4096;
  ASSERT_EQ(static_cast<unsigned char>(s[tail_start]), 0xAC);
  const std::string kept_tail = s.substr(tail_start + 1);
  ASSERT_EQ(kept_tail, std::string(4095, 't'));
  const std::size_t omitted = s.size() - 4095 - kept_tail.size();
  EXPECT_EQ(cut_result(s), std::string(4095, 'h') + "\n[" + ellipsis + " " + std::to_string(omitted) +
                               " bytes omitted " + ellipsis + "]\n" + kept_tail);
}

TEST(Result, StderrOfAFailingLongCallSurvivesTheCut) {
  auto c = convert_reply(exited(1, std::string(20000, 'o'), "the reason\n"), 30);
  EXPECT_TRUE(c.error);
  EXPECT_EQ(c.text.substr(0, 21), "error: exit status 1\n");
  EXPECT_NE(c.text.find(" bytes omitted "), std::string::npos);
  const std::string end = "\n[stderr]\nthe reason\n";
  EXPECT_EQ(c.text.substr(c.text.size() - end.size()), end);
  EXPECT_LE(c.text.size(), 8192u + 64u);
}

// §3.4: a `!command`'s exec block is what a terminal shows, not the model's result: the output as
// it came (text that looks like an exit prefix or an envelope stays as printed), stderr after
// stdout unmarked, the exit on a last line, a cut only past 64 KiB.
TEST(ExecText, TheOutputAsItCameAndTheExitLast) {
  EXPECT_EQ(exec_text(exited(0, "error: exit status 7"), 30), "error: exit status 7");
  EXPECT_EQ(exec_text(exited(0, "error: exit status 5\nmore\n"), 30), "error: exit status 5\nmore\n");
  const std::string envelope = R"({"content":[{"type":"text","text":"hi"},{"type":"image"}],"isError":true})";
  EXPECT_EQ(exec_text(exited(0, envelope + "\n"), 30), envelope + "\n");
  EXPECT_EQ(exec_text(exited(2, "out\n", "err\n"), 30), "out\nerr\nexit 2");
  EXPECT_EQ(exec_text(exited(0, "out", "err"), 30), "out\nerr");
  EXPECT_EQ(exec_text(exited(1, ""), 30), "exit 1");
  EXPECT_EQ(exec_text(exited(0, "caf\xC3"), 30), "caf" + fffd);
  EXPECT_EQ(exec_text(reply("signaled", "half\n", "", {{"signal", "9"}}), 30), "half\nkilled by signal 9");
  EXPECT_EQ(exec_text(reply("timeout", "", ""), 30), "execution timeout after 30 seconds");
  EXPECT_EQ(exec_text(reply("denied", "", ""), 30), "bypass denied");
  EXPECT_EQ(exec_text(reply("failed", "", "exec shell: No such file or directory\n"), 30),
            "exec shell: No such file or directory");
  std::string lines;
  for (int i = 1; i <= 5000; i++) lines += std::to_string(i) + "\n";  // seq 1 5000: 23,893 bytes, kept whole
  EXPECT_EQ(exec_text(exited(0, lines), 30), lines);
  const std::string big(100000, 'x');
  const std::string cut = exec_text(exited(0, big), 30);
  EXPECT_EQ(cut, std::string(32768, 'x') + "\n[" + ellipsis + " " + std::to_string(100000 - 65536) + " bytes omitted " +
                     ellipsis + "]\n" + std::string(32768, 'x'));
}
