// Text-based tool calls (spec §8.15): which fragments of an answer become calls, and the text left.
#include <gtest/gtest.h>

#include "olliesrv/text_calls.hpp"
#include "olliesrv/transcript.hpp"

using namespace ollie;

namespace {

const std::vector<std::string> LOADED{"shell", "file_read"};

}  // namespace

TEST(TextCallsUnit, AToolCallElementBecomesACallAndLeavesTheTextAround) {
  auto r = extract_text_calls("Let me look.\n<tool_call>{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}}</tool_call>\nThen I'll read.",
                              LOADED);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "shell");
  EXPECT_EQ(r.calls[0].arguments, R"({"cmd":"ls"})");
  EXPECT_TRUE(r.calls[0].id.empty());
  EXPECT_EQ(r.text, "Let me look.\n\nThen I'll read.");
}

TEST(TextCallsUnit, FencedJsonAndToolCallBlocksBecomeCalls) {
  auto r = extract_text_calls(
      "First:\n```json\n{\"name\": \"file_read\", \"arguments\": {\"path\": \"a.txt\"}}\n```\n"
      "Second:\n```tool_call\n{\"name\":\"shell\",\"arguments\":{\"cmd\":\"pwd\"}}\n```\n",
      LOADED);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "file_read");
  EXPECT_EQ(r.calls[0].arguments, R"({"path":"a.txt"})");
  EXPECT_EQ(r.calls[1].name, "shell");
  EXPECT_EQ(r.text, "First:\n\nSecond:");
}

TEST(TextCallsUnit, SeveralCallsKeepTheirOrder) {
  std::string text;
  for (int i = 0; i < 3; i++) text += "<tool_call>{\"name\":\"shell\",\"arguments\":{\"cmd\":\"echo " + std::to_string(i) + "\"}}</tool_call>\n";
  auto r = extract_text_calls(text, LOADED);
  ASSERT_EQ(r.calls.size(), 3u);
  for (int i = 0; i < 3; i++) EXPECT_EQ(r.calls[i].arguments, "{\"cmd\":\"echo " + std::to_string(i) + "\"}");
  EXPECT_EQ(r.text, "");
}

TEST(TextCallsUnit, AnUnknownToolStaysText) {
  const std::string text = "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>";
  auto r = extract_text_calls(text, LOADED);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.text, text);
}

TEST(TextCallsUnit, MalformedJsonStaysTextAndTheNextCallIsStillFound) {
  const std::string bad = "<tool_call>{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"</tool_call>";
  auto r = extract_text_calls(bad + "\nok\n<tool_call>{\"name\":\"shell\",\"arguments\":{}}</tool_call>", LOADED);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_EQ(r.text, bad + "\nok");
  // not exactly {name, arguments}: stays text
  for (std::string body : {R"({"name":"shell"})", R"({"name":"shell","arguments":"ls"})", R"({"name":5,"arguments":{}})",
                           R"({"name":"shell","arguments":{},"extra":1})", R"([1,2])", "", "{"}) {
    auto t = "<tool_call>" + body + "</tool_call>";
    auto o = extract_text_calls(t, LOADED);
    EXPECT_TRUE(o.calls.empty()) << body;
    EXPECT_EQ(o.text, t);
  }
  // an element never closed stays text
  auto open = extract_text_calls("<tool_call>{\"name\":\"shell\",\"arguments\":{}}", LOADED);
  EXPECT_TRUE(open.calls.empty());
  // ... and a fenced call after it is still found
  auto then = extract_text_calls("I use <tool_call> tags.\n```json\n{\"name\":\"shell\",\"arguments\":{}}\n```", LOADED);
  ASSERT_EQ(then.calls.size(), 1u);
  EXPECT_EQ(then.text, "I use <tool_call> tags.");
  // a mention of the tag before a real element does not hide it
  auto named = extract_text_calls("Use `<tool_call>` tags.\n<tool_call>{\"name\":\"file_read\",\"arguments\":{\"path\":\"a\"}}</tool_call>",
                                  LOADED);
  ASSERT_EQ(named.calls.size(), 1u);
  EXPECT_EQ(named.calls[0].arguments, R"({"path":"a"})");
  EXPECT_EQ(named.text, "Use `<tool_call>` tags.");
}

TEST(TextCallsUnit, BracesAndTagsInsideStringsAreArguments) {
  auto r = extract_text_calls(
      "```json\n{\"name\":\"shell\",\"arguments\":{\"cmd\":\"awk '{print $1}' f | grep '}}'\"}}\n```", LOADED);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"cmd":"awk '{print $1}' f | grep '}}'"})");
  auto n = extract_text_calls(R"(<tool_call>{"name":"shell","arguments":{"cmd":"echo {\"a\":{\"b\":1}}"}}</tool_call>)", LOADED);
  ASSERT_EQ(n.calls.size(), 1u);
  EXPECT_EQ(n.calls[0].arguments, R"({"cmd":"echo {\"a\":{\"b\":1}}"})");
}

TEST(TextCallsUnit, AFenceHoldingSomethingElseStaysText) {
  const std::string other = "Here is the config:\n```json\n{\"name\": \"shell\", \"version\": 2}\n```\nand a script:\n"
                            "```sh\n<tool_call>{\"name\":\"shell\",\"arguments\":{}}</tool_call>\n```\n";
  auto r = extract_text_calls(other, LOADED);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.text, other);
  // a json fence with a call and more text in it is not exactly such an object
  const std::string mixed = "```json\n{\"name\":\"shell\",\"arguments\":{}}\n{\"x\":1}\n```";
  EXPECT_TRUE(extract_text_calls(mixed, LOADED).calls.empty());
  // an unclosed fence is all code
  EXPECT_TRUE(extract_text_calls("```json\n{\"name\":\"shell\",\"arguments\":{}}\n", LOADED).calls.empty());
}

TEST(TextCallsUnit, InputIsBounded) {
  std::string text;
  for (int i = 0; i < 40; i++) text += "<tool_call>{\"name\":\"shell\",\"arguments\":{}}</tool_call>\n";
  auto r = extract_text_calls(text, LOADED);
  EXPECT_EQ(r.calls.size(), TEXT_CALLS_MAX);
  EXPECT_NE(r.text.find("<tool_call>"), std::string::npos);  // the rest stays text
  // a call beyond the scanned prefix stays text
  std::string big(TEXT_CALLS_SCANNED, 'x');
  big += "\n<tool_call>{\"name\":\"shell\",\"arguments\":{}}</tool_call>";
  auto b = extract_text_calls(big, LOADED);
  EXPECT_TRUE(b.calls.empty());
  EXPECT_EQ(b.text, big);
  // deep nesting and garbage do not crash
  std::string deep = "<tool_call>" + std::string(100000, '[') + "</tool_call>```json\n" + std::string(5000, '{') + "\n```";
  EXPECT_TRUE(extract_text_calls(deep, LOADED).calls.empty());
  EXPECT_TRUE(extract_text_calls("plain text", {}).calls.empty());
}

// The streamed assistant block is finalized with the text left (log.raw, block); an empty text
// drops it. The rendered text keeps what streamed.
TEST(TextCallsUnit, TheAssistantBlockIsFinalizedWithTheTextLeft) {
  Transcript t("session", "agent");
  std::vector<Block> finals;
  t.on_final = [&](const Block& b) { finals.push_back(b); };
  t.stream("assistant", "Looking.\n<tool_call>{}</tool_call>");
  auto b = t.finish_stream(std::string("Looking."));
  ASSERT_TRUE(b);
  EXPECT_EQ(b->content, "Looking.");
  ASSERT_EQ(finals.size(), 1u);
  EXPECT_EQ(finals[0].content, "Looking.");
  EXPECT_EQ(t.find(b->id)->content, "Looking.");
  EXPECT_NE(t.log().find("<tool_call>"), std::string::npos);
  // Nothing left: the block is still finalized, empty (its partials may have been read).
  t.stream("assistant", "<tool_call>{}</tool_call>");
  auto empty = t.finish_stream(std::string());
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->content, "");
  EXPECT_EQ(t.size(), 2u);
  ASSERT_EQ(finals.size(), 2u);
  EXPECT_EQ(finals[1].id, empty->id);
  EXPECT_FALSE(t.finish_stream(std::string()));  // none open
  auto next = t.append(make_block("call", "{}", "shell"));  // the next block has a fresh id
  EXPECT_NE(next.id, b->id);
  EXPECT_NE(next.id, empty->id);
  EXPECT_EQ(t.size(), 3u);
}
