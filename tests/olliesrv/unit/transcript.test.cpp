// The agent transcript (spec §2.8.7, §2.8.8): block ids, rendering, the log window, and the
// chat / chat.raw streams as a 9P reader sees them.
#include "olliesrv/transcript.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "olliesrv/ids.hpp"

using namespace ollie;

namespace {

Block blk(std::string role, std::string content, std::string name = "", std::string format = "") {
  Block b;
  b.role = std::move(role);
  b.content = std::move(content);
  b.name = std::move(name);
  b.format = std::move(format);
  return b;
}

/// Everything a cursor has right now (reads of `max` bytes until it says wait or EOF).
std::string drain(virtfs::Cursor& c, bool* eof = nullptr, std::size_t max = 8192) {
  std::string out;
  for (;;) {
    auto ch = c.read(max);
    out += ch.data;
    if (ch.eof) {
      if (eof) *eof = true;
      return out;
    }
    if (ch.data.empty()) {
      if (eof) *eof = false;
      return out;
    }
  }
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    auto nl = s.find('\n', pos);
    EXPECT_NE(nl, std::string::npos) << "lines are whole";
    if (nl == std::string::npos) break;
    out.push_back(s.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

}  // namespace

TEST(TranscriptIds, CounterStartsAtOneAndFollowsTheSpec) {
  EXPECT_EQ(block_id("s", "a", 1), "b56752e2");
  Transcript t("s", "a");
  EXPECT_EQ(t.append(blk("user", "hi")).id, "b56752e2");
  EXPECT_EQ(t.append(blk("info", "x")).id, block_id("s", "a", 2));
  EXPECT_EQ(t.counter(), 2u);
}

TEST(TranscriptIds, StreamedBlocksTakeTheirIdWhenTheyOpen) {
  Transcript t("s", "a");
  t.stream("reasoning", "hmm");
  t.stream("assistant", "ok");  // finalizes the reasoning block first
  auto a = t.finish_stream();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->id, block_id("s", "a", 2));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t.find(block_id("s", "a", 1))->role, "reasoning");
  EXPECT_EQ(t.find(block_id("s", "a", 1))->content, "hmm");
  EXPECT_FALSE(t.finish_stream());
}

// §2.8.8: an id is never given again. The block in flight at a kill -9 showed its id to
// chat.raw's readers and is in no file: the restored counter skips one past everything stored.
TEST(TranscriptIds, RestoreResumesPastTheFloorAndTheLastBlockSkippingOne) {
  auto numbered = [](std::vector<int> ns) {
    std::vector<Block> out;
    for (int n : ns) {
      auto b = blk("user", "m");
      b.id = block_id("s", "a", static_cast<unsigned long long>(n));
      out.push_back(b);
    }
    return out;
  };
  {
    Transcript t("s", "a");
    t.restore(numbered({1, 2, 3}), 10);  // the saved counter is past the file
    EXPECT_EQ(t.append(blk("info", "x")).id, block_id("s", "a", 12));
  }
  {
    Transcript t("s", "a");
    t.restore(numbered({1, 2, 3}), 3);  // blocks appended after the last save: the line count
    EXPECT_EQ(t.append(blk("info", "x")).id, block_id("s", "a", 5));
    EXPECT_EQ(t.counter(), 5u);
  }
  {
    // Earlier restarts skipped 3 and 5: the last block's number is past the line count.
    Transcript t("s", "a");
    t.restore(numbered({1, 2, 4, 6}), 4);
    EXPECT_EQ(t.append(blk("info", "x")).id, block_id("s", "a", 8));
  }
}

TEST(TranscriptIds, AnIdAlreadyUsedIsSkipped) {
  // The restored block carries the id counter 2 gives: past it, one skipped, the next takes 4.
  auto b = blk("user", "m");
  b.id = block_id("s", "a", 2);
  Transcript t("s", "a");
  t.restore({b}, 1);
  EXPECT_EQ(t.append(blk("info", "x")).id, block_id("s", "a", 4));
  EXPECT_EQ(t.counter(), 4u);
}

TEST(TranscriptRender, EveryRole) {
  EXPECT_EQ(render(blk("user", "hello")), "user: hello\n\n");
  EXPECT_EQ(render(blk("user", "hi", "peer:bob")), "user (peer:bob): hi\n\n");
  EXPECT_EQ(render(blk("assistant", "Sure.")), "Sure.\n\n");
  EXPECT_EQ(render(blk("call", R"({"path":"a.txt"})", "file_read")), "→ file_read {\"path\":\"a.txt\"}\n\n");
  // What a terminal would obey or hide is shown as the JSON escape it stands for (C1 CSI, RLO).
  EXPECT_EQ(render(blk("call", "{\"cmd\":\"echo x\xc2\x9b" "2K \xe2\x80\xae" "evil\"}", "shell\x1b[2J")),
            "→ shell\\x1b[2J {\"cmd\":\"echo x\\u009b2K \\u202eevil\"}\n\n");
  EXPECT_EQ(render(blk("tool", "line1\nline2\n", "file_read", "markdown")), "line1\nline2\n\n");
  EXPECT_EQ(render(blk("info", "interrupted")), ":: interrupted\n\n");
  EXPECT_EQ(render(blk("retry", "retrying in 10s (attempt 2/3): rate limited")),
            ":: retrying in 10s (attempt 2/3): rate limited\n\n");
  EXPECT_EQ(render(blk("exec", "a\nb", "ls")), "! ls\na\nb\n\n");
  EXPECT_EQ(render(blk("exec", "", "true")), "! true\n\n");
  EXPECT_EQ(render(blk("error", "boom")), "error: boom\n\n");
  EXPECT_EQ(render(blk("bypass", "request 3: write /etc")), "bypass: request 3: write /etc\n\n");
  EXPECT_EQ(render(blk("reasoning", "thinking")), "");
  EXPECT_EQ(render(blk("context", "plan", "plan")), "");
}

TEST(TranscriptRender, LogIsTheRenderingOfTheBlocks) {
  Transcript t("s", "a");
  t.append(blk("user", "q"));
  t.append(blk("context", "hidden", "plan"));
  t.stream("reasoning", "secret thoughts");
  t.stream("assistant", "an");
  EXPECT_EQ(t.log(), "user: q\n\nan") << "the in-flight text is in log";
  t.stream("assistant", "swer");
  t.finish_stream();
  t.append(blk("call", "{}", "shell"));
  EXPECT_EQ(t.log(), "user: q\n\nanswer\n\n→ shell {}\n\n");
}

TEST(TranscriptJson, FieldOrderAndEscaping) {
  auto b = blk("tool", "a \"q\"\n\ttab é ☃ \x01", "file_read", "markdown");
  b.id = "0123abcd";
  EXPECT_EQ(b.json(), "{\"role\":\"tool\",\"id\":\"0123abcd\",\"name\":\"file_read\",\"format\":\"markdown\","
                      "\"content\":\"a \\\"q\\\"\\n\\ttab é ☃ \\u0001\"}");
  EXPECT_EQ(b.json(true), "{\"role\":\"tool\",\"id\":\"0123abcd\",\"name\":\"file_read\",\"format\":\"markdown\","
                          "\"partial\":true,\"content\":\"a \\\"q\\\"\\n\\ttab é ☃ \\u0001\"}");
  auto u = blk("user", "x");
  u.id = "ffffffff";
  EXPECT_EQ(u.json(), R"({"role":"user","id":"ffffffff","content":"x"})");
  // Bytes that are not UTF-8 do not make the block unwritable.
  u.content = "bad \xff byte";
  EXPECT_EQ(u.json(), "{\"role\":\"user\",\"id\":\"ffffffff\",\"content\":\"bad \xEF\xBF\xBD byte\"}");
}

TEST(TranscriptJson, ParseRoundTripsAndNamesErrors) {
  auto b = blk("tool", "x\ny", "file_read", "markdown");
  b.id = "0123abcd";
  auto p = Block::parse(b.json());
  ASSERT_TRUE(p) << p.ename();
  EXPECT_EQ(p->json(), b.json());
  EXPECT_EQ(Block::parse("{\"role\":\"us").ename(), "block: invalid json");
  EXPECT_EQ(Block::parse("[1]").ename(), "block: not an object");
  EXPECT_EQ(Block::parse(R"({"id":"0123abcd","content":""})").ename(), "block: missing role");
  EXPECT_EQ(Block::parse(R"({"role":"user","id":"0123abcd","content":5})").ename(), "block: content: not a string");
  EXPECT_EQ(Block::parse(R"({"role":"user","id":"XYZ","content":""})").ename(), "block: invalid id: XYZ");
  EXPECT_EQ(Block::parse(R"({"role":"nobody","id":"0123abcd","content":""})").ename(), "block: unknown role: nobody");
}

TEST(TranscriptLog, LastWindowCutAtALineStart) {
  Transcript t("s", "a");
  std::string full;
  for (int i = 0; i < 3000; i++) {
    auto b = blk("user", "message number " + std::to_string(i) + std::string(i % 50, 'x'));
    full += render(b);
    t.append(b);
  }
  ASSERT_GT(full.size(), Transcript::LOG_BYTES);
  auto log = t.log();
  EXPECT_LE(log.size(), Transcript::LOG_BYTES);
  // The spec's rule: take the last 65536 bytes, drop through their first newline.
  std::string cut = full.substr(full.size() - Transcript::LOG_BYTES);
  EXPECT_EQ(log, cut.substr(cut.find('\n') + 1));
  EXPECT_EQ(full[full.size() - log.size() - 1], '\n');
  // A new chat reader starts at the same point.
  auto c = t.chat();
  EXPECT_EQ(drain(*c), log);
}

// One line longer than the log (a response of 80,000 bytes of two-byte characters): the log is its
// tail, begun at a character (§1.2: every text is UTF-8).
TEST(TranscriptLog, ALineLongerThanTheLogIsCutAtACharacter) {
  Transcript t("s", "a");
  std::string text;
  for (int i = 0; i < 40000; i++) text += "\xc3\xa9";  // é
  text += "b";  // odd: the last 65536 bytes begin inside a character
  t.stream("assistant", text);
  auto log = t.log();
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.size(), Transcript::LOG_BYTES - 1);
  EXPECT_EQ(log, text.substr(text.size() - log.size()));
  auto c = t.chat();
  EXPECT_EQ(drain(*c), log);
}

TEST(TranscriptLog, SmallTranscriptIsWhole) {
  Transcript t("s", "a");
  EXPECT_EQ(t.log(), "");
  t.append(blk("user", "hi"));
  EXPECT_EQ(t.log(), "user: hi\n\n");
}

TEST(TranscriptChat, StreamsDeltasInOrder) {
  Transcript t("s", "a");
  t.append(blk("user", "hi"));
  auto c = t.chat();
  auto sig = c->signal();
  EXPECT_EQ(drain(*c), "user: hi\n\n");
  auto ch = c->read(100);
  EXPECT_TRUE(ch.data.empty());
  EXPECT_FALSE(ch.eof) << "nothing new: the reader waits";
  auto v = sig->version();
  t.stream("assistant", "Hel");
  EXPECT_NE(sig->version(), v) << "readers are woken";
  EXPECT_EQ(drain(*c), "Hel");
  t.stream("reasoning", "not shown");  // finalizes the assistant block
  t.stream("assistant", "lo");
  EXPECT_EQ(drain(*c), "\n\nlo");
  t.finish_stream();
  EXPECT_EQ(drain(*c), "\n\n");
  t.append(blk("error", "bad"));
  EXPECT_EQ(drain(*c, nullptr, 3), "error: bad\n\n") << "small reads get every byte";
}

TEST(TranscriptChat, CloseEndsEveryReaderAfterWhatIsThere) {
  Transcript t("s", "a");
  t.append(blk("user", "hi"));
  auto c = t.chat();
  auto r = t.chat_raw();
  t.stream("assistant", "part");
  t.close();
  bool eof = false;
  EXPECT_EQ(drain(*c, &eof), "user: hi\n\npart");
  EXPECT_TRUE(eof);
  auto raw = lines(drain(*r, &eof));
  EXPECT_TRUE(eof);
  ASSERT_EQ(raw.size(), 2u);
  EXPECT_NE(raw[1].find("\"partial\":true"), std::string::npos);
  EXPECT_TRUE(c->read(10).eof);
  // After close nothing reaches readers or persistence.
  int finals = 0;
  t.on_final = [&](const Block&) { finals++; };
  t.append(blk("info", "late"));
  EXPECT_EQ(finals, 0);
  EXPECT_TRUE(c->read(10).eof);
}

TEST(TranscriptChat, ReaderThatFallsBehindTheWindowSkipsToALineStart) {
  Transcript t("s", "a");
  t.append(blk("user", "first"));
  auto c = t.chat();
  std::string line(1000, 'y');
  for (int i = 0; i < 5000; i++) t.append(blk("tool", line));  // ~5 MB, far past the window
  auto got = drain(*c, nullptr, 16);  // short reads: the notice spans several
  EXPECT_LT(got.size(), 3u << 20) << "the window is bounded";
  EXPECT_GT(got.size(), Transcript::LOG_BYTES);
  // It is told so first, with how much it missed, on a line of its own.
  const std::string told = ":: chat skipped ";
  ASSERT_EQ(got.substr(0, told.size()), told) << got.substr(0, 200);
  const auto end = got.find(" bytes: this reader fell behind (log.raw has every block)\n\n");
  ASSERT_NE(end, std::string::npos);
  const auto skipped = std::stoull(got.substr(told.size(), end - told.size()));
  EXPECT_EQ(skipped + got.size() - got.find("\n\n", end) - 2, std::string("user: first\n\n").size() + 5000 * 1002);
  got.erase(0, got.find("\n\n", end) + 2);
  // It resumes after a newline: at a block's line or at the empty line that ends one.
  auto start = got.find_first_not_of('\n');
  EXPECT_LE(start, 1u);
  EXPECT_EQ(got.substr(start, 1000), line) << "resumes at a line start";
  EXPECT_EQ(got.substr(got.size() - 1002), line + "\n\n");
}

TEST(TranscriptRaw, ReplayThenOneCoalescedPartialThenTheFinalLine) {
  Transcript t("s", "a");
  auto u = t.append(blk("user", "q"));
  auto r = t.chat_raw();
  EXPECT_EQ(drain(*r), u.json() + "\n");
  for (int i = 0; i < 100; i++) t.stream("assistant", "tok" + std::to_string(i) + " ");
  auto got = lines(drain(*r));
  ASSERT_EQ(got.size(), 1u) << "one snapshot for 100 deltas";
  Block partial;
  partial.role = "assistant";
  partial.id = block_id("s", "a", 2);
  for (int i = 0; i < 100; i++) partial.content += "tok" + std::to_string(i) + " ";
  EXPECT_EQ(got[0], partial.json(true));
  EXPECT_EQ(drain(*r), "") << "unchanged: no repeat";
  t.stream("assistant", "end");
  partial.content += "end";
  EXPECT_EQ(drain(*r), partial.json(true) + "\n");
  auto fin = t.finish_stream();
  ASSERT_TRUE(fin);
  EXPECT_EQ(drain(*r), fin->json() + "\n");
  EXPECT_EQ(fin->content, partial.content);
  // A reader opened now replays finalized blocks only.
  auto r2 = t.chat_raw();
  EXPECT_EQ(drain(*r2), u.json() + "\n" + fin->json() + "\n");
  EXPECT_EQ(t.log_raw(), u.json() + "\n" + fin->json() + "\n");
  EXPECT_EQ(t.log_raw_size(), t.log_raw().size());
}

TEST(TranscriptRaw, LongLinesSplitAcrossReadsStayWhole) {
  Transcript t("s", "a");
  auto b = t.append(blk("tool", std::string(5000, 'z')));
  auto r = t.chat_raw();
  auto c1 = r->read(1000);
  EXPECT_EQ(c1.data.size(), 1000u);
  EXPECT_EQ(c1.data + drain(*r, nullptr, 1000), b.json() + "\n");
}

// A block appended while a response streams (a `/verb` reply, an inject) does not cut the
// response in two: the response stays one block, its text in chat whole, and the block is stored
// right after it, so chat, chat.raw, log.raw and a restart's rendering all keep one order.
TEST(TranscriptRaw, ABlockAppendedMidStreamFollowsTheResponseEverywhere) {
  Transcript t("s", "a");
  auto r = t.chat_raw();
  auto chat = t.chat();
  t.stream("assistant", "half");
  drain(*r);
  auto info = t.append(blk("info", "fake-model"));
  t.stream("assistant", " and the rest");
  auto got = lines(drain(*r));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("\"partial\":true"), std::string::npos);
  EXPECT_NE(got[0].find("\"content\":\"half and the rest\""), std::string::npos) << got[0];
  EXPECT_FALSE(t.find(info.id)) << "not stored before the response";
  EXPECT_EQ(drain(*chat), "half and the rest");
  auto fin = t.finish_stream("half and the rest");
  ASSERT_TRUE(fin);
  EXPECT_EQ(fin->content, "half and the rest");
  EXPECT_EQ(drain(*r), fin->json() + "\n" + info.json() + "\n");
  EXPECT_EQ(drain(*chat), "\n\n:: fake-model\n\n");
  EXPECT_EQ(t.log(), "half and the rest\n\n:: fake-model\n\n");
  EXPECT_EQ(t.log_raw(), fin->json() + "\n" + info.json() + "\n");
  ASSERT_TRUE(t.find(info.id));
  Transcript again("s", "a");
  again.restore({*fin, info}, 2);
  EXPECT_EQ(again.log(), t.log()) << "a restart renders what chat showed";
  auto call = t.append(blk("call", "{}", "shell"));  // nothing open: stored at once
  EXPECT_EQ(drain(*chat), "→ shell {}\n\n");
  EXPECT_EQ(drain(*r), call.json() + "\n");
}

// §1.7: a read of chat.raw returns every line ready, up to its count, not one line per read.
TEST(TranscriptRaw, OneReadReturnsEveryLineThatFits) {
  Transcript t("s", "a");
  std::string all;
  for (int i = 0; i < 100; i++) all += t.append(blk("info", "n" + std::to_string(i))).json() + "\n";
  auto r = t.chat_raw();
  auto first = r->read(all.size() - 10);
  EXPECT_EQ(first.data, all.substr(0, all.size() - 10)) << "the last line is split";
  EXPECT_EQ(r->read(65536).data, all.substr(all.size() - 10));
  t.stream("assistant", "x");
  auto u = t.append(blk("user", "later"));  // held behind the response
  auto fin = t.finish_stream();
  ASSERT_TRUE(fin);
  EXPECT_EQ(r->read(65536).data, fin->json() + "\n" + u.json() + "\n");
}

TEST(Transcript, FindIsCaseInsensitiveAndLastFindsTheReply) {
  Transcript t("s", "a");
  auto b = t.append(blk("assistant", "one"));
  t.append(blk("assistant", "two"));
  std::string upper = b.id;
  for (auto& ch : upper) ch = static_cast<char>(std::toupper(ch));
  ASSERT_TRUE(t.find(upper));
  EXPECT_EQ(t.find(upper)->content, "one");
  EXPECT_FALSE(t.find("00000000"));
  EXPECT_EQ(t.last("assistant")->content, "two");
  EXPECT_FALSE(t.last("error"));
  t.stream("assistant", "x");
  auto open_id = block_id("s", "a", 3);
  EXPECT_FALSE(t.find(open_id)) << "an in-flight block is not served by `block`";
}

TEST(Transcript, VersionBumpsOnEveryChange) {
  Transcript t("s", "a");
  auto v0 = t.version();
  t.append(blk("user", "q"));
  auto v1 = t.version();
  EXPECT_NE(v1, v0);
  t.stream("assistant", "a");
  auto v2 = t.version();
  EXPECT_NE(v2, v1);
  t.stream("assistant", "b");
  EXPECT_NE(t.version(), v2);
}

TEST(Transcript, OnFinalGetsEveryBlockInOrderAndMayCallBack) {
  Transcript t("s", "a");
  std::vector<std::string> seen;
  t.on_final = [&](const Block& b) {
    seen.push_back(b.role + ":" + b.content);
    EXPECT_GE(t.counter(), 1u);  // no deadlock calling back
    if (b.content == "first") t.append(blk("info", "nested"));
  };
  t.append(blk("user", "first"));
  t.stream("assistant", "x");
  t.stream("assistant", "y");
  t.finish_stream();
  EXPECT_EQ(seen, (std::vector<std::string>{"user:first", "info:nested", "assistant:xy"}));
}

// §7.7: a reader of chat.raw gets a finalized block only once on_final (its append to the
// agent's blocks file) has returned, so kill -9 cannot take back a block a client holds. A block
// used to reach the readers first: a reader that killed olliesrv on seeing it found it lost.
TEST(Transcript, ChatRawGivesAFinalizedBlockOnlyAfterOnFinal) {
  Transcript t("s", "a");
  auto raw = t.chat_raw();
  std::vector<std::string> during;  // what the reader had while each block was being persisted
  t.on_final = [&](const Block& b) { during.push_back(b.id + " " + drain(*raw)); };
  const auto user = t.append(blk("user", "q"));
  t.stream("assistant", "partial");
  const auto answer = t.finish_stream();
  ASSERT_TRUE(answer);
  ASSERT_EQ(during.size(), 2u);
  EXPECT_EQ(during[0], user.id + " ");  // nothing before the user block was persisted
  // While the answer is persisted: the user block, not the answer's final line.
  const std::string had = during[1].substr(answer->id.size() + 1);
  EXPECT_NE(had.find("\"id\":\"" + user.id + "\""), std::string::npos) << had;
  EXPECT_EQ(had.find("\"id\":\"" + answer->id + "\""), std::string::npos) << had;
  const std::string after = drain(*raw);
  EXPECT_NE(after.find("\"id\":\"" + answer->id + "\""), std::string::npos) << after;
  EXPECT_EQ(after.find("\"partial\":true"), std::string::npos) << after;
}

TEST(Transcript, ConcurrentStreamAndReaderSeeEveryByte) {
  Transcript t("s", "a");
  auto c = t.chat();
  std::string expect;
  for (int i = 0; i < 2000; i++) expect += std::to_string(i) + ",";
  expect += "\n\n";
  std::thread producer([&] {
    for (int i = 0; i < 2000; i++) t.stream("assistant", std::to_string(i) + ",");
    t.finish_stream();
    t.close();
  });
  std::string got;
  for (;;) {
    auto ch = c->read(64);
    got += ch.data;
    if (ch.eof) break;
    if (ch.data.empty()) std::this_thread::yield();
  }
  producer.join();
  EXPECT_EQ(got, expect);
}
