// Batching by scope (spec §8.3.1), deduplication keys, the result cache's invalidation and bound
// (§8.3.2, §8.3.3), and the plan reminder's text (§8.7).
#include <gtest/gtest.h>

#include <string>

#include "olliesrv/result_cache.hpp"
#include "olliesrv/safety.hpp"

using namespace ollie;

namespace {

const std::vector<ToolInfo> tools = {
    {.name = "file_read", .scope = "read"}, {.name = "file_write", .scope = "write"}, {.name = "shell", .scope = "global"}};

Call make(const std::string& name, const std::string& args) {
  return make_call(backend::ToolCall{.id = "c", .name = name, .arguments = args}, "/p", tools);
}

ResultCache::Entry entry(const std::string& text, const std::string& path, const std::string& within = "") {
  return {{text, false}, path, {true, "1", "2"}, within.empty() ? path : within};
}

}  // namespace

// The names of each batch, in order.
std::vector<std::vector<std::string>> batches(const std::vector<Call>& calls) {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : split_batches(calls)) {
    out.emplace_back();
    for (const auto& c : b) out.back().push_back(c.id);
  }
  return out;
}

Call named(Call c, const std::string& id) {
  c.id = id;
  return c;
}

TEST(Batches, FollowTheScopesInOrder) {
  using B = std::vector<std::vector<std::string>>;
  // Reads together; a read of a path the batch writes starts the next; a global call alone.
  EXPECT_EQ(batches({named(make("file_read", R"({"path":"a"})"), "r1"), named(make("file_read", R"({"path":"b"})"), "r2"),
                     named(make("file_write", R"({"path":"a"})"), "w1"), named(make("file_read", R"({"path":"/p/a"})"), "r3"),
                     named(make("shell", R"({"cmd":"ls"})"), "g1"), named(make("file_read", R"({"path":"c"})"), "r4")}),
            (B{{"r1", "r2", "w1"}, {"r3"}, {"g1"}, {"r4"}}));
  // A write without a path counts as global; an unknown tool as a read.
  EXPECT_EQ(batches({named(make("file_read", R"({"path":"a"})"), "r1"), named(make("file_write", R"({})"), "w1"),
                     named(make("nosuch", R"({})"), "u1"), named(make("file_read", R"({"path":"a"})"), "r2")}),
            (B{{"r1"}, {"w1"}, {"u1", "r2"}}));
  // What a call's result will be does not change its batch: an unknown tool reading a path the
  // batch writes, and a write with a bad flag, still follow their scope and path.
  EXPECT_EQ(batches({named(make("file_write", R"({"path":"a"})"), "w1"), named(make("nosuch", R"({"path":"a"})"), "u1")}),
            (B{{"w1"}, {"u1"}}));
  EXPECT_EQ(batches({named(make("file_write", R"({"path":"a","timeout":"x"})"), "w1"),
                     named(make("file_read", R"({"path":"a"})"), "r1"), named(make("file_read", R"({"path":"b"})"), "r2")}),
            (B{{"w1"}, {"r1", "r2"}}));
  // Arguments that are not a JSON object carry no path: a write counts as global, a read as a read.
  EXPECT_EQ(batches({named(make("file_read", R"({"path":"a"})"), "r1"), named(make("file_write", "{\"path\":"), "w1"),
                     named(make("file_read", "[1]"), "r2"), named(make("", R"({"path":"b"})"), "e1")}),
            (B{{"r1"}, {"w1"}, {"r2", "e1"}}));
  // A background call keeps its tool's scope: a background shell is a batch by itself.
  EXPECT_EQ(batches({named(make("file_read", R"({"path":"a"})"), "r1"),
                     named(make("shell", R"({"cmd":"sleep 9","background":true})"), "bg"),
                     named(make("file_read", R"({"path":"b"})"), "r2")}),
            (B{{"r1"}, {"bg"}, {"r2"}}));
}

TEST(DedupeKey, IsTheNameAndTheCanonicalArgumentsFlagsIncluded) {
  EXPECT_EQ(dedupe_key(make("file_read", R"({ "path" : "a",  "b":{"z":1,"a":[1, 2]} })")),
            "file_read\n" R"({"b":{"a":[1,2],"z":1},"path":"a"})");
  EXPECT_EQ(dedupe_key(make("file_read", R"({"é":1,"z":2,"Z":3})")), "file_read\n" R"({"Z":3,"z":2,"é":1})");
  EXPECT_NE(dedupe_key(make("file_read", R"({"path":"a"})")), dedupe_key(make("file_read", R"({"path":"a","timeout":5})")));
}

TEST(DedupeKey, OnlyForegroundReadCallsThatRunAreCacheable) {
  EXPECT_TRUE(cacheable(make("file_read", R"({"path":"a"})")));
  EXPECT_FALSE(cacheable(make("file_read", R"({"path":"a","background":true})")));
  EXPECT_FALSE(cacheable(make("file_read", R"({"path":"a","timeout":"x"})")));
  EXPECT_FALSE(cacheable(make("file_write", R"({"path":"a"})")));
  EXPECT_FALSE(cacheable(make("shell", R"({"cmd":"ls"})")));
  EXPECT_FALSE(cacheable(make("nosuch", R"({})")));
  // A background call keeps its tool's scope, for batching (§8.3.1) and invalidation.
  EXPECT_EQ(make("shell", R"({"cmd":"ls","background":true})").scope, "global");
  EXPECT_EQ(make("file_write", R"({"path":"x"})").scope, "write");
}

TEST(ResultCacheTable, AWriteDropsThePathAndItsAncestorsOnly) {
  ResultCache c;
  c.put("k1", entry("file", "/p/d/f"));
  c.put("k2", entry("dir", "/p/d"));
  c.put("k3", entry("root", "/"));
  c.put("k4", entry("sibling", "/p/d/fg"));
  c.put("k5", entry("prefix", "/p/dd"));
  c.put("k6", entry("below", "/p/d/f/x"));
  c.put("k7", entry("no path", ""));
  c.put("k8", entry("no path, run in /p/d", "", "/p/d"));
  c.put("k9", entry("no path, run in /q", "", "/q"));
  c.drop_path("/p/d/f");
  EXPECT_EQ(c.find("k1"), nullptr);
  EXPECT_EQ(c.find("k2"), nullptr);
  EXPECT_EQ(c.find("k3"), nullptr);
  ASSERT_NE(c.find("k4"), nullptr);
  EXPECT_EQ(c.find("k4")->result.text, "sibling");
  EXPECT_NE(c.find("k5"), nullptr);
  EXPECT_NE(c.find("k6"), nullptr);
  EXPECT_NE(c.find("k7"), nullptr);
  EXPECT_EQ(c.find("k8"), nullptr);  // a read of its cwd
  EXPECT_NE(c.find("k9"), nullptr);
  c.clear();
  EXPECT_EQ(c.size(), 0u);
}

TEST(ResultCacheTable, IsBoundedAndDropsTheOldestFirst) {
  ResultCache c;
  for (std::size_t i = 0; i < ResultCache::MAX_ENTRIES + 10; i++) c.put("k" + std::to_string(i), entry("t", ""));
  EXPECT_EQ(c.size(), ResultCache::MAX_ENTRIES);
  EXPECT_EQ(c.find("k9"), nullptr);
  EXPECT_NE(c.find("k10"), nullptr);
  c.put("k10", entry("again", ""));  // replaced: now the newest
  c.put("new", entry("t", ""));
  EXPECT_NE(c.find("k10"), nullptr);
  EXPECT_EQ(c.find("k11"), nullptr);
}

TEST(PlanReminder, WrapsTheTrimmedPlanAndIsEmptyForABlankOne) {
  EXPECT_EQ(plan_reminder("\n- [ ] a\n  - [x] b\n\n"),
            "[system: your current plan:\n\n- [ ] a\n  - [x] b\n\nKeep it current: tick finished steps and revise it if "
            "your approach changed. Continue.]");
  EXPECT_EQ(plan_reminder("  indented\n"), "[system: your current plan:\n\n  indented\n\nKeep it current: tick finished "
                                          "steps and revise it if your approach changed. Continue.]");
  EXPECT_EQ(plan_reminder(" \t\n\n"), "");
  EXPECT_EQ(plan_reminder(""), "");
}

// §8.3.5: the hint names a tool the catalog has by exactly that name, valid or not (tool_load
// then says why an invalid one cannot load); near names are only valid ones.
TEST(UnknownTool, ACatalogNameGetsTheLoadHintEvenWhenTheToolIsInvalid) {
  const std::vector<ToolInfo> catalog = {{.name = "lsp_hover", .error = "not available on this host"},
                                         {.name = "file_read", .description = "reads a file"}};
  EXPECT_EQ(unknown_tool("lsp_hover", catalog),
            "error: unknown tool: lsp_hover; it exists but is not loaded: call tool_load with lsp_hover first");
  EXPECT_EQ(unknown_tool("File-Read", catalog), "error: unknown tool: File-Read; did you mean: file_read?");
}

// The near names by word overlap come most shared words first, then the closest name: a typo
// finds the tool it misspells, not the first names in the catalog's order.
TEST(UnknownTool, NearNamesAreRankedByWordsSharedThenByTheClosestName) {
  const std::vector<ToolInfo> catalog = {{.name = "codeintel", .description = "symbols of a file"},
                                         {.name = "file_edit", .description = "edits a file"},
                                         {.name = "file_glob", .description = "finds file names"},
                                         {.name = "file_grep", .description = "searches file contents"},
                                         {.name = "file_read", .description = "reads a file"}};
  EXPECT_EQ(unknown_tool("file_reed", catalog), "error: unknown tool: file_reed; did you mean: file_read, file_grep, file_edit?");
  EXPECT_EQ(unknown_tool("grep_file_contents", catalog),
            "error: unknown tool: grep_file_contents; did you mean: file_grep, file_edit, file_read?");
}
