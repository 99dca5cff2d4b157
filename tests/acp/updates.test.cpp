// ollie-acp's translation of blocks into ACP session updates, and of ACP prompts into text.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

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

// A model's call arguments are kept verbatim in its `call` block, however deep: nested past the
// bound they are shown as the text they are, not parsed (a copy of the value would recurse once a
// level, past the stack).
TEST(AcpTranslator, CallArgumentsNestedPastTheBoundAreShownAsText) {
  const std::string deep = "{\"cmd\":" + std::string(10000, '[') + std::string(10000, ']') + "}";
  acp::Translator t("/p");
  auto c = t.block(json{{"role", "call"}, {"id", "0000000a"}, {"name", "shell"}, {"content", deep}});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["rawInput"], deep);
  bool too_deep = false;
  EXPECT_TRUE(acp::parse_bounded(std::string(128, '[') + std::string(128, ']'), &too_deep).is_array());
  EXPECT_FALSE(too_deep);
  EXPECT_TRUE(acp::parse_bounded(std::string(129, '[') + std::string(129, ']'), &too_deep).is_discarded());
  EXPECT_TRUE(too_deep);
  EXPECT_TRUE(acp::parse_bounded("{nope", &too_deep).is_discarded());
  EXPECT_FALSE(too_deep);
}

// The title says what runs: the command or the path, whatever other arguments come with it.
TEST(AcpTranslator, TheTitleIsTheCommandOrPathWhateverElseTheArgumentsHold) {
  EXPECT_EQ(acp::tool_title("shell", json{{"cmd", "ls -l"}, {"description", "run"}}), "shell ls -l");
  EXPECT_EQ(acp::tool_title("shell", json{{"cmd", "ls"}, {"bypass", true}, {"timeout", 5}}), "shell ls");
  EXPECT_EQ(acp::tool_title("file_read", json{{"path", "a.c"}, {"line", 3}}), "file_read a.c");
  EXPECT_EQ(acp::tool_title("x", json{{"cmd", "c"}, {"path", "p"}}), "x c");
  EXPECT_EQ(acp::tool_title("x", json{{"cmd", 5}, {"q", "y"}}), R"(x {"cmd":5,"q":"y"})");
  EXPECT_EQ(acp::tool_title("x", json::object()), "x {}");
}

// A bypass request names its call only by tool and summary (spec §6.9.2): the call awaiting it
// is found by those, its dispatch flags left out of the summary as the broker never sees them.
TEST(AcpTranslator, TheCallAwaitingABypassIsFoundByToolAndSummary) {
  EXPECT_EQ(acp::bypass_summary(json{{"cmd", "ls"}, {"bypass", true}, {"timeout", 5}}), "ls");
  EXPECT_EQ(acp::bypass_summary(json{{"cmd", "ls"}, {"description", "d"}}), R"({"cmd":"ls","description":"d"})");
  EXPECT_EQ(acp::bypass_summary(json{{"path", "/x"}, {"bypass", true}, {"background", false}, {"sandbox", "no"}}),
            R"({"path":"/x"})");
  // bypass/pending's escapes (§2.3) undone; anything else left as it is.
  EXPECT_EQ(acp::unescaped(R"(printf 'a\tb\n' \\ \x1b[0m)"), "printf 'a\tb\n' \\ \x1b[0m");
  EXPECT_EQ(acp::unescaped(R"(\r\xZZ\)"), "\r\\xZZ\\");

  acp::Translator t("/p");
  (void)t.block(block(R"({"role":"call","id":"0000000a","name":"shell","content":"{\"cmd\":\"ls\"}"})"));
  (void)t.block(block(R"({"role":"call","id":"0000000b","name":"shell","content":"{\"cmd\":\"echo hi\",\"bypass\":true}"})"));
  (void)t.block(block(R"({"role":"call","id":"0000000c","name":"shell","content":"{\"cmd\":\"echo hi\",\"bypass\":true}"})"));
  EXPECT_EQ(t.awaiting("shell", "echo hi", {}).value_or(""), "0000000b");
  EXPECT_EQ(t.awaiting("shell", "echo hi", {"0000000b"}).value_or(""), "0000000c") << "one call per request";
  EXPECT_FALSE(t.awaiting("shell", "echo hi", {"0000000b", "0000000c"}));
  EXPECT_FALSE(t.awaiting("file_read", "echo hi", {})) << "another tool";
  (void)t.block(block(R"({"role":"tool","id":"0000000d","name":"shell","content":"x"})"));
  (void)t.block(block(R"({"role":"tool","id":"0000000e","name":"shell","content":"hi"})"));
  EXPECT_EQ(t.awaiting("shell", "echo hi", {}).value_or(""), "0000000c") << "a call with its result awaits nothing";
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

// A FIFO, or a pipe like the bridge's own stdin, is named, never read: the bridge has one thread.
// Were either read, a writer coming after 3 s lets the FIFO's open through and the pipe's writer
// closes (both then at EOF): the test fails on the time and the text rather than hanging.
TEST(AcpPrompt, AFifoOrAPipeIsNamedWithoutBlocking) {
  const std::string fifo = testing::TempDir() + "acp-fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  std::atomic<bool> done{false};
  std::atomic<int> pipe_writer{pipe_fds[1]};
  std::thread unblock([&] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (!done && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (done) return;
    ::close(pipe_writer.exchange(-1));
    for (int i = 0; !done && i < 100; i++) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // fails while no reader waits
      if (fd >= 0) ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const std::string pipe_path = "/proc/self/fd/" + std::to_string(pipe_fds[0]);
  const auto start = std::chrono::steady_clock::now();
  json blocks = json::array({{{"type", "resource_link"}, {"uri", "file://" + fifo}, {"name", "f"}},
                             {{"type", "resource_link"}, {"uri", "file://" + pipe_path}, {"name", "in"}},
                             {{"type", "resource_link"}, {"uri", "file:///no/such/file"}, {"name", "x"}},
                             {{"type", "text"}, {"text", "go"}}});
  auto t = acp::prompt_text(blocks);
  const auto took = std::chrono::steady_clock::now() - start;
  done = true;
  unblock.join();
  if (const int w = pipe_writer.exchange(-1); w >= 0) ::close(w);
  ::close(pipe_fds[0]);
  std::remove(fifo.c_str());
  ASSERT_TRUE(t) << t.ename();
  EXPECT_LT(took, std::chrono::seconds(1));
  EXPECT_NE(t->find("acp-fifo\" inlined=\"false\"/>"), std::string::npos) << *t;
  EXPECT_NE(t->find("<file path=\"" + pipe_path + "\" inlined=\"false\"/>"), std::string::npos) << *t;
  EXPECT_NE(t->find("<file path=\"/no/such/file\" unreadable=\"true\"/>"), std::string::npos) << *t;
}

// A block whose fields have the wrong type is named with its place (the answer is -32602).
TEST(AcpPrompt, FieldsOfTheWrongTypeAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"([{"type":"text","text":5}])", "prompt[0].text must be a string"},
      {R"([{"type":"text","text":"a"},"text"])", "prompt[1] must be a content block (an object)"},
      {R"([{"type":"resource_link","uri":["x"]}])", "prompt[0].uri must be a string"},
      {R"([{"type":"resource","resource":"x"}])", "prompt[0].resource must be an object"},
      {R"([{"type":"resource","resource":{"uri":7,"text":"t"}}])", "prompt[0].resource.uri must be a string"},
      {R"([{"type":5}])", "prompt[0].type must be a string"},
  };
  for (const auto& [blocks, error] : cases) {
    auto t = acp::prompt_text(json::parse(blocks));
    ASSERT_FALSE(t) << blocks;
    EXPECT_EQ(t.ename(), error) << blocks;
  }
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
  EXPECT_TRUE(acp::is_shell_command("  !sleep 1"));
  EXPECT_FALSE(acp::is_shell_command("/model x"));
  EXPECT_FALSE(acp::is_shell_command("hello !"));
}
