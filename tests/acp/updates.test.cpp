// ollie-acp's translation of blocks into ACP session updates, and of ACP prompts into text.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "acp/prompt.hpp"
#include "acp/updates.hpp"

using acp::json;

namespace {

json block(const char* text) { return json::parse(text); }

}  // namespace

TEST(AcpTranslator, PartialsSendOnlyWhatTheyAddedAndTheFinalLineTheRest) {
  acp::Translator t("/p");
  auto a = t.block(block(R"({"role":"assistant","id":"00000001","partial":true,"content":"Hel"})"));
  auto b = t.block(block(R"({"role":"assistant","id":"00000001","partial":true,"content":"Hello wo"})"));
  auto c = t.block(block(R"({"role":"assistant","id":"00000001","content":"Hello world"})"));
  auto again = t.block(block(R"({"role":"assistant","id":"00000001","content":"Hello world"})"));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0]["sessionUpdate"], "agent_message_chunk");
  EXPECT_EQ(a[0]["content"]["text"], "Hel");
  EXPECT_EQ(b[0]["content"]["text"], "lo wo");
  EXPECT_EQ(c[0]["content"]["text"], "rld");
  EXPECT_TRUE(again.empty()) << "a finalized block is translated once";
}

TEST(AcpTranslator, ReasoningIsAThoughtAndContextIsNotShown) {
  acp::Translator t("/p");
  auto r = t.block(block(R"({"role":"reasoning","id":"00000002","content":"hmm"})"));
  EXPECT_EQ(r[0]["sessionUpdate"], "agent_thought_chunk");
  EXPECT_TRUE(t.block(block(R"({"role":"context","id":"00000003","name":"plan","content":"x"})")).empty());
}

TEST(AcpTranslator, CallsAndResultsPairInOrderWithKindLocationsAndStatus) {
  acp::Translator t("/home/me/proj");
  auto c1 = t.block(block(R"({"role":"call","id":"0000000a","name":"file_read","content":"{\"path\":\"src/a.cpp\"}"})"));
  auto c2 = t.block(block(R"({"role":"call","id":"0000000b","name":"shell","content":"{\"cmd\":\"false\"}"})"));
  EXPECT_FALSE(t.batch_done());
  auto r1 = t.block(block(R"({"role":"tool","id":"0000000c","name":"file_read","content":"int a;"})"));
  auto r2 = t.block(block(R"({"role":"tool","id":"0000000d","name":"shell","content":"error: exit status 1\n"})"));
  EXPECT_TRUE(t.batch_done());
  EXPECT_EQ(c1[0]["sessionUpdate"], "tool_call");
  EXPECT_EQ(c1[0]["kind"], "read");
  EXPECT_EQ(c1[0]["title"], "file_read src/a.cpp");
  EXPECT_EQ(c1[0]["locations"][0]["path"], "/home/me/proj/src/a.cpp");
  EXPECT_EQ(c2[0]["kind"], "execute");
  EXPECT_EQ(c2[0]["title"], "shell false");
  EXPECT_EQ(r1[0]["toolCallId"], "0000000a");
  EXPECT_EQ(r1[0]["status"], "completed");
  EXPECT_EQ(r1[0]["content"][0]["content"]["text"], "int a;");
  EXPECT_EQ(r2[0]["toolCallId"], "0000000b");
  EXPECT_EQ(r2[0]["status"], "failed");
}

TEST(AcpTranslator, CallsWithoutAResultFailAtTheEnd) {
  acp::Translator t("/p");
  (void)t.block(block(R"({"role":"call","id":"0000000a","name":"shell","content":"{\"cmd\":\"sleep 100\"}"})"));
  auto u = t.unfinished();
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0]["status"], "failed");
  EXPECT_TRUE(t.unfinished().empty());
}

TEST(AcpTranslator, TheTurnsEndComesFromItsBlocks) {
  acp::Translator t("/p");
  (void)t.block(block(R"({"role":"info","id":"00000001","content":"interrupted"})"));
  EXPECT_TRUE(t.end().interrupted);
  acp::Translator r("/p");
  (void)r.block(block(R"({"role":"error","id":"00000001","content":"stopped: content_filter"})"));
  EXPECT_TRUE(r.end().refused);
  EXPECT_FALSE(r.end().failure);
  acp::Translator f("/p");
  auto e = f.block(block(R"({"role":"error","id":"00000001","content":"openai: 500 boom"})"));
  EXPECT_EQ(f.end().failure.value_or(""), "openai: 500 boom");
  EXPECT_NE(e[0]["content"]["text"].get<std::string>().find("error: openai: 500 boom"), std::string::npos);
}

// An error block the turn went on after (a failed automatic compaction, another client's bad
// /verb) is not how it ended.
TEST(AcpTranslator, AnErrorFollowedByMoreOfTheTurnIsNotItsEnd) {
  for (const char* more : {R"({"role":"assistant","id":"00000002","content":"ok"})",
                           R"({"role":"reasoning","id":"00000002","partial":true,"content":"hm"})",
                           R"({"role":"call","id":"00000002","name":"shell","content":"{}"})",
                           R"({"role":"tool","id":"00000002","name":"shell","content":"x"})"}) {
    acp::Translator t("/p");
    (void)t.block(block(R"({"role":"error","id":"00000001","content":"compact: openai: 500 boom"})"));
    EXPECT_TRUE(t.end().failure);
    (void)t.block(block(more));
    EXPECT_FALSE(t.end().failure) << more;
  }
  acp::Translator r("/p");
  (void)r.block(block(R"({"role":"error","id":"00000001","content":"stopped: content_filter"})"));
  (void)r.block(block(R"({"role":"assistant","id":"00000002","content":"later"})"));
  EXPECT_FALSE(r.end().refused);
  // Blocks that are not the turn's own work leave the error standing.
  acp::Translator f("/p");
  (void)f.block(block(R"({"role":"assistant","id":"00000001","content":"part"})"));
  (void)f.block(block(R"({"role":"error","id":"00000002","content":"openai: 500 boom"})"));
  (void)f.block(block(R"({"role":"info","id":"00000003","content":"model: x"})"));
  (void)f.block(block(R"({"role":"assistant","id":"00000001","content":"part"})"));  // a repeated line
  EXPECT_EQ(f.end().failure.value_or(""), "openai: 500 boom");
}

TEST(AcpTranslator, OtherUsersPromptsAreEchoedWithTheirOrigin) {
  acp::Translator t("/p");
  auto peer = t.block(block(R"({"role":"user","id":"00000002","name":"peer:bob","content":"hi"})"));
  EXPECT_EQ(peer[0]["sessionUpdate"], "user_message_chunk");
  EXPECT_EQ(peer[0]["content"]["text"], "(peer:bob) hi");
}

TEST(AcpTranslator, GarbageLinesGiveNothing) {
  acp::Translator t("/p");
  EXPECT_TRUE(t.block(json::parse("[1]")).empty());
  EXPECT_TRUE(t.block(block(R"({"role":"assistant","content":"no id"})")).empty());
  EXPECT_TRUE(t.block(block(R"({"role":"tool","id":"00000009","content":"a result without a call"})")).empty());
}

TEST(AcpPlan, ChecklistItemsBecomeEntries) {
  auto p = acp::plan_update("# Plan\n- [x] read\n  - [ ] write tests\n* [~] build\nfree text\n- [?] odd\n");
  ASSERT_EQ(p["entries"].size(), 3u);
  EXPECT_EQ(p["entries"][0]["content"], "read");
  EXPECT_EQ(p["entries"][0]["status"], "completed");
  EXPECT_EQ(p["entries"][1]["status"], "pending");
  EXPECT_EQ(p["entries"][2]["status"], "in_progress");
  EXPECT_EQ(acp::plan_update("")["entries"].size(), 0u);
}

TEST(AcpPrompt, TextAndEmbeddedResourcesBecomeContextThenText) {
  auto t = acp::prompt_text(json::parse(R"([{"type":"text","text":"Fix it."},
    {"type":"resource","resource":{"uri":"file:///src/a%20b.c","text":"int x;"}}])"));
  ASSERT_TRUE(t) << t.ename();
  EXPECT_EQ(*t, "<file path=\"/src/a b.c\">\nint x;\n</file>\n\nFix it.");
}

TEST(AcpPrompt, LinkedFilesAreInlinedUpToTheirBound) {
  const std::string small = testing::TempDir() + "acp-small.txt", big = testing::TempDir() + "acp-big.txt";
  std::ofstream(small) << "small text";
  std::ofstream(big) << std::string(acp::max_inlined_file + 1, 'x');
  json blocks = json::array({{{"type", "resource_link"}, {"uri", "file://" + small}, {"name", "s"}},
                             {{"type", "resource_link"}, {"uri", "file://" + big}, {"name", "b"}},
                             {{"type", "text"}, {"text", "go"}}});
  auto t = acp::prompt_text(blocks);
  ASSERT_TRUE(t);
  EXPECT_NE(t->find("small text\n</file>"), std::string::npos);
  EXPECT_NE(t->find("acp-big.txt\" inlined=\"false\"/>"), std::string::npos);
  EXPECT_EQ(t->find(std::string(100, 'x')), std::string::npos);
  std::remove(small.c_str());
  std::remove(big.c_str());
}

TEST(AcpPrompt, UnsupportedContentIsRefusedByName) {
  auto t = acp::prompt_text(json::parse(R"([{"type":"image","data":"AA==","mimeType":"image/png"}])"));
  ASSERT_FALSE(t);
  EXPECT_EQ(t.ename(), "unsupported content block: image");
  EXPECT_FALSE(acp::prompt_text(json::parse(R"({"not":"an array"})")));
}

TEST(AcpPrompt, TheStoredPromptIsTrimmedAndBlankIsNothing) {
  EXPECT_EQ(acp::stored_prompt("  \n hello world \r\n"), "hello world");
  EXPECT_EQ(acp::stored_prompt("//etc/hosts is wrong"), "/etc/hosts is wrong");
  EXPECT_EQ(acp::stored_prompt("bad \xff byte"), "bad \xef\xbf\xbd byte");
  EXPECT_EQ(acp::stored_prompt("   "), "");
  EXPECT_EQ(acp::stored_prompt(""), "");
  auto blank = acp::prompt_text(json::parse(R"([{"type":"text","text":" "},{"type":"text","text":"\t"}])"));
  ASSERT_TRUE(blank);
  EXPECT_EQ(acp::stored_prompt(*blank), "");
}

TEST(AcpPrompt, CommandsAreTheServersPrefixes) {
  EXPECT_TRUE(acp::is_command("/model x"));
  EXPECT_TRUE(acp::is_command("  !ls"));
  EXPECT_FALSE(acp::is_command("//etc/hosts is wrong"));
  EXPECT_FALSE(acp::is_command("hello"));
  EXPECT_FALSE(acp::is_command(""));
}
