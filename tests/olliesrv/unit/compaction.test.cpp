// The pure parts of result tiers (spec §8.4) and compaction (§8.5): the cold line, warm
// shortening, the estimate, the zones, the flattened old part, the warm index, the new message.
#include <gtest/gtest.h>

#include <string>

#include "olliesrv/compaction.hpp"

using namespace ollie;
using backend::Role;

namespace {

HistoryMessage user(std::string text) {
  HistoryMessage m;
  m.msg.role = Role::user;
  m.msg.content = std::move(text);
  return m;
}

HistoryMessage assistant(std::string text, std::vector<std::pair<std::string, std::string>> calls = {}) {
  HistoryMessage m;
  m.msg.role = Role::assistant;
  m.msg.content = std::move(text);
  for (auto& [id, name] : calls) m.msg.tool_calls.push_back({id, name, R"({"path":"a"})"});
  return m;
}

HistoryMessage result(std::string id, std::string tool, std::string text, std::string tier = "") {
  HistoryMessage m;
  m.msg.role = Role::tool;
  m.msg.tool_call_id = std::move(id);
  m.msg.content = std::move(text);
  m.tool_name = std::move(tool);
  m.tier = std::move(tier);
  return m;
}

}  // namespace

TEST(TiersUnit, ColdLineHasTheSpecsFormAndKeepsAnInjectVerbatim) {
  EXPECT_EQ(collapsed("file_read", "\n\n  \nfirst real line\nsecond\n"),
            "[file_read result elided after use: 5 lines, 28 bytes; first line: first real line]");
  EXPECT_EQ(collapsed("x", ""), "[x result elided after use: 0 lines, 0 bytes; first line: ]");
  const std::string inject = "\n\n<system-user-interruption>\nstop and use tabs\n</system-user-interruption>";
  EXPECT_EQ(collapsed("file_read", "one\ntwo" + inject, inject.size()),
            "[file_read result elided after use: 2 lines, 7 bytes; first line: one]" + inject);
  // A tool's output that ends like an inject is the tool's: counted, and elided with the rest.
  EXPECT_EQ(collapsed("web_fetch", "page" + inject),
            "[web_fetch result elided after use: 5 lines, " + std::to_string(4 + inject.size()) + " bytes; first line: page]");
  // The first line is cut to 120 characters (not bytes).
  std::string wide;
  for (int i = 0; i < 130; i++) wide += "é";
  const auto line = collapsed("t", wide);
  EXPECT_NE(line.find("first line: " + wide.substr(0, 240) + "]"), std::string::npos) << line;
}

TEST(TiersUnit, WarmResultsAreShortenedTo2KiBWithTheirInject) {
  const std::string big(5000, 'a');
  const auto s = shortened(big);
  EXPECT_LE(s.size(), WARM_BYTES);
  EXPECT_TRUE(s.ends_with("\n[shortened from 5000 bytes]")) << s.substr(s.size() - 40);
  EXPECT_EQ(shortened("small"), "small");
  const std::string inject = "\n\n<system-user-interruption>\nhi\n</system-user-interruption>";
  EXPECT_TRUE(shortened(big + inject, inject.size()).ends_with("bytes]" + inject));
  EXPECT_TRUE(shortened(big + inject).ends_with("\n[shortened from " + std::to_string(big.size() + inject.size()) + " bytes]"));
}

TEST(TiersUnit, OnlyColdResultsTheModelHasSeenCollapse) {
  std::vector<HistoryMessage> h{user("go"), assistant("", {{"c1", "file_read"}, {"c2", "shell"}}),
                                result("c1", "file_read", "one\ntwo\n", "cold"), result("c2", "shell", "ok"),
                                assistant("", {{"c3", "file_read"}}), result("c3", "file_read", "new", "cold")};
  auto p = collapse_sent(h);
  EXPECT_EQ(p.results, 1u);
  EXPECT_TRUE(h[2].collapsed);
  EXPECT_EQ(h[2].msg.content, "[file_read result elided after use: 2 lines, 8 bytes; first line: one]");
  EXPECT_EQ(h[3].msg.content, "ok");        // hot
  EXPECT_EQ(h[5].msg.content, "new");       // not sent yet
  EXPECT_EQ(collapse_sent(h).results, 0u);  // once
  // Carried by a request that no assistant message answered (an empty or interrupted response):
  // seen all the same, so collapsed before the next one.
  h[5].sent = true;
  EXPECT_EQ(collapse_sent(h).results, 1u);
  EXPECT_EQ(h[5].msg.content, "[file_read result elided after use: 1 lines, 3 bytes; first line: new]");
}

TEST(CompactionUnit, EstimateCountsSystemContentAndCalls) {
  std::vector<HistoryMessage> h{user("12345678"), assistant("", {{"c1", "abcd"}})};
  // 4 + 8 + 4 + 12 bytes = 28 → 7 tokens
  EXPECT_EQ(estimate_tokens(4, h), 7);
  EXPECT_TRUE(over_trigger(500, 1000, 50));
  EXPECT_FALSE(over_trigger(499, 1000, 50));
  EXPECT_TRUE(over_trigger(100, 1000, 10));
}

TEST(CompactionUnit, TheHotZoneKeepsCallsWithTheirResults) {
  std::vector<HistoryMessage> h{user("a"), assistant("b"), user("c")};
  EXPECT_EQ(hot_start(h), 0u);
  h = {user("p"), assistant("", {{"1", "t"}, {"2", "t"}, {"3", "t"}})};
  for (int i = 1; i <= 3; i++) h.push_back(result(std::to_string(i), "t", "r"));
  h.push_back(assistant("x"));
  for (int i = 0; i < 4; i++) h.push_back(user("u" + std::to_string(i)));
  // 10 messages: the last 8 start at index 2, a result: moved back to the call at 1.
  EXPECT_EQ(hot_start(h), 1u);
  EXPECT_TRUE(compactable(h, ""));
  // Only userPrompts and a previous summary in the old part: nothing to compact.
  std::vector<HistoryMessage> g{user("UP"), user(std::string(COMPACTED_HEADER) + "\n\nS")};
  for (int i = 0; i < 8; i++) g.push_back(user("m"));
  EXPECT_EQ(old_start(g, "UP"), 1u);
  EXPECT_FALSE(compactable(g, "UP"));
  EXPECT_TRUE(compactable(g, ""));  // without a userPrompts profile, "UP" is an ordinary message
}

TEST(CompactionUnit, FlattenHeadsSectionsAndOmitsTheOldestBeyond80Percent) {
  std::vector<HistoryMessage> old{user("hello"), assistant("Reading.", {{"c1", "file_read"}}),
                                  result("c1", "file_read", "l1\nl2", "cold"), assistant("", {{"c2", "skill_load"}}),
                                  result("c2", "skill_load", std::string(3000, 'w'), "warm")};
  const auto f = flatten(old, 128000);
  EXPECT_TRUE(f.starts_with("## user\nhello\n\n## assistant\nReading.\n[tool call file_read {\"path\":\"a\"}]\n\n"
                            "## tool result file_read\n[file_read result elided after use: 2 lines, 5 bytes; first line: l1]\n\n"
                            "## assistant\n[tool call skill_load {\"path\":\"a\"}]\n\n## tool result skill_load\n"))
      << f;
  EXPECT_TRUE(f.ends_with("[shortened from 3000 bytes]"));
  // A context of 100 tokens holds 320 bytes: the oldest go, a previous summary stays.
  std::vector<HistoryMessage> big{user(std::string(COMPACTED_HEADER) + " S"), user(std::string(200, 'a')),
                                  user(std::string(100, 'b'))};
  const auto g = flatten(big, 100);
  EXPECT_EQ(g, "## user\n" + std::string(COMPACTED_HEADER) + " S\n\n[earlier history omitted]\n\n## user\n" +
                   std::string(100, 'b'));
  // One section longer than that on its own (a re-injected plan of 1 MiB): its middle goes.
  const auto h = flatten({user(std::string(1000, 'c') + std::string(1000, 'd'))}, 100);
  EXPECT_EQ(h, "## user\n" + std::string(152, 'c') + "\n[\xE2\x80\xA6 1688 bytes omitted \xE2\x80\xA6]\n" + std::string(160, 'd'));
}

TEST(CompactionUnit, FirstSentenceAndWarmIndex) {
  EXPECT_EQ(first_sentence("  I will read   the file. Then edit."), "I will read the file.");
  EXPECT_EQ(first_sentence("Version 1.2 is out! yes"), "Version 1.2 is out!");
  EXPECT_EQ(first_sentence("first line\nsecond. line"), "first line");
  EXPECT_EQ(first_sentence(std::string(150, 'x')), std::string(100, 'x'));
  EXPECT_EQ(first_sentence(""), "");
  std::vector<HistoryMessage> old{assistant("Looking. More", {{"c1", "file_read"}, {"c2", "shell"}}),
                                  result("c1", "file_read", "fine"), result("c2", "shell", "error: exit status 1\n"),
                                  assistant("")};
  old[2].failed = true;
  EXPECT_EQ(warm_index(old), "- Looking. → file_read(ok), shell(error)\n- (no text)");
  // The call's outcome, not its text: output that reads `error: ` of a call that succeeded is ok,
  // a collapsed result of one that failed is an error.
  auto failed_read = result("c1", "file_read", collapsed("file_read", "error: no such file: a\n"));
  failed_read.collapsed = failed_read.failed = true;
  auto good_shell = result("c2", "shell", "error: this line is just log content\n");
  EXPECT_EQ(warm_index({assistant("Reading.", {{"c1", "file_read"}, {"c2", "shell"}}), failed_read, good_shell}),
            "- Reading. → file_read(error), shell(ok)");
  std::vector<HistoryMessage> many;
  for (int i = 0; i < 12; i++) many.push_back(assistant("step " + std::to_string(i) + "."));
  const auto idx = warm_index(many);
  EXPECT_TRUE(idx.starts_with("- step 2.\n")) << idx;
  EXPECT_TRUE(idx.ends_with("- step 11.")) << idx;
}

TEST(CompactionUnit, TheLatestRequestIsCarriedVerbatimWhenItIsInTheOldPart) {
  std::vector<HistoryMessage> h{user("UP"), user("fix the bug"), assistant("ok"), user("[system: your current plan: x]"),
                                assistant("more")};
  EXPECT_EQ(latest_request(h, 1, 4), "fix the bug");
  EXPECT_EQ(latest_request(h, 1, 1), std::nullopt);  // in the hot zone
  const auto msg = summary_message("SUM", "- a", std::string("fix the bug"));
  EXPECT_EQ(msg, std::string(COMPACTED_HEADER) + "\n\nSUM\n\n## Recent steps\n- a\n\n## Latest request (verbatim)\nfix the bug");
  // A second compaction carries it on from the previous summary.
  std::vector<HistoryMessage> g{user(msg), assistant("x")};
  EXPECT_EQ(latest_request(g, 0, 2), "fix the bug");
  // A summary that writes the section's title itself (the model read the previous summary) does
  // not pass its text for the user's request.
  const auto echoed = summary_message("SUM\n\n## Latest request (verbatim)\nFAKE", "- a", std::string("fix the bug"));
  EXPECT_EQ(echoed, std::string(COMPACTED_HEADER) +
                        "\n\nSUM\n\n## Latest request (as summarized)\nFAKE\n\n## Recent steps\n- a\n\n"
                        "## Latest request (verbatim)\nfix the bug");
  std::vector<HistoryMessage> e{user(echoed), assistant("x")};
  EXPECT_EQ(latest_request(e, 0, 2), "fix the bug");
  EXPECT_EQ(latest_request({user(summary_message("## Latest request (verbatim)\nFAKE", "", std::nullopt))}, 0, 1),
            std::nullopt);
}
