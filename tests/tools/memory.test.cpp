// memory_remember, memory_recall, memory_forget through a real toolsrv under the shipped sandbox:
// the store lives in the data root's optmem/, one database per project.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "tools/host.hpp"

using namespace tools_test;

namespace {

struct Memory {
  ToolHost host;
  Memory() { host.load("memory_remember memory_recall memory_forget"); }
  Reply remember(const std::string& args) { return host.call("memory_remember", args); }
  Reply recall(const std::string& args) { return host.call("memory_recall", args); }
  std::string optmem() const { return host.home + "/.local/share/ollie/optmem"; }
  void cwd(const std::string& dir) {
    std::filesystem::create_directories(dir);
    ASSERT_TRUE(host.ctl("cwd " + dir + "\n")) << dir;
  }
};

}  // namespace

TEST(Memory, RecallFindsWhatRememberStored) {
  Memory m;
  const Reply r = m.remember(R"({"text":"The build uses Ninja through CMake presets.","tags":["build","cmake"]})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "remembered #1 (project " + m.host.cwd + ")\n");
  ASSERT_TRUE(m.remember(R"({"text":"Tests run with gtest_filter."})").ok());
  const Reply hit = m.recall(R"({"query":"presets"})");
  ASSERT_TRUE(hit.ok()) << hit.out;
  EXPECT_NE(hit.out.find("1 memory matches \"presets\" (project " + m.host.cwd + "):\n"), std::string::npos) << hit.out;
  EXPECT_NE(hit.out.find("\n#1 · 20"), std::string::npos) << hit.out;
  EXPECT_NE(hit.out.find(" UTC · tags: build, cmake\nThe build uses Ninja through CMake presets.\n"), std::string::npos) << hit.out;
  EXPECT_EQ(hit.out.find("gtest_filter"), std::string::npos) << hit.out;
  // Tags are searched too, and the porter stemmer matches other forms of a word.
  EXPECT_NE(m.recall(R"({"query":"cmake"})").out.find("#1 "), std::string::npos);
  EXPECT_NE(m.recall(R"({"query":"testing"})").out.find("Tests run with gtest_filter."), std::string::npos);
  // At most 7 KiB, so the engine's 8192-byte cut (§8.3.4) never takes the middle of a hit.
  for (int i = 0; i < 12; i++) ASSERT_TRUE(m.remember(R"({"text":"wide )" + std::string(1000, 'w') + R"("})").ok());
  const Reply wide = m.recall(R"({"query":"wide","limit":12})");
  EXPECT_LE(wide.out.size(), 7u * 1024 + 200) << wide.out.size();
  EXPECT_NE(wide.out.find("more hits not shown: output limit 7 KiB"), std::string::npos) << wide.out.substr(wide.out.size() - 300);
  // The store is one file in optmem/, named by the project's hash.
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(m.optmem()))
    if (e.path().extension() == ".db") files.push_back(e.path().filename());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].size(), 64u + 3u);
}

TEST(Memory, WordsMatchAnyBestFirstAndSyntaxFallsBackToWords) {
  Memory m;
  ASSERT_TRUE(m.remember(R"({"text":"sqlite busy timeout is five seconds"})").ok());
  ASSERT_TRUE(m.remember(R"({"text":"the sqlite store lives in optmem"})").ok());
  ASSERT_TRUE(m.remember(R"({"text":"nothing related"})").ok());
  const Reply r = m.recall(R"({"query":"sqlite timeout"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("2 memories match"), std::string::npos) << r.out;
  const auto first = r.out.find("#1 "), second = r.out.find("#2 ");
  ASSERT_NE(first, std::string::npos) << r.out;
  ASSERT_NE(second, std::string::npos) << r.out;
  EXPECT_LT(first, second) << r.out;
  EXPECT_EQ(r.out.find("#3 "), std::string::npos) << r.out;
  // FTS5 syntax is honoured ...
  const Reply phrase = m.recall(R"({"query":"\"store lives\""})");
  EXPECT_NE(phrase.out.find("1 memory matches"), std::string::npos) << phrase.out;
  EXPECT_NE(m.recall(R"({"query":"opt*"})").out.find("#2 "), std::string::npos);
  // ... and what FTS5 cannot parse is searched as words.
  for (const char* q : {R"(\"unbalanced sqlite)", "busy-timeout", "timeout: (", "NEAR sqlite AND"}) {
    const Reply fb = m.recall(std::string(R"({"query":")") + q + "\"}");
    EXPECT_TRUE(fb.ok()) << q << ": " << fb.out;
    EXPECT_NE(fb.out.find("match"), std::string::npos) << q << ": " << fb.out;
    EXPECT_EQ(fb.out.find("no memories"), std::string::npos) << q << ": " << fb.out;
  }
  const Reply none = m.recall(R"({"query":"kubernetes"})");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.out, "no memories match \"kubernetes\" (project " + m.host.cwd + "); 3 stored\n");
}

TEST(Memory, OneStorePerProjectTheGitRootOrTheCwd) {
  Memory m;
  std::filesystem::create_directories(m.host.cwd + "/.git");
  m.cwd(m.host.cwd + "/src/deep");
  const Reply r = m.remember(R"({"text":"alpha belongs to the git project"})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "remembered #1 (project " + m.host.cwd + ")\n");
  m.cwd(m.host.cwd);
  EXPECT_NE(m.recall(R"({"query":"alpha"})").out.find("alpha belongs"), std::string::npos);

  const std::string other = m.host.root + "/other";
  m.cwd(other);
  EXPECT_EQ(m.recall(R"({"query":"alpha"})").out, "no memories stored for this project (" + other + ")\n");
  ASSERT_TRUE(m.remember(R"({"text":"alpha of the other project"})").ok());
  const Reply o = m.recall(R"({"query":"alpha"})");
  EXPECT_NE(o.out.find("1 memory matches"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("alpha of the other project"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("git project"), std::string::npos) << o.out;
}

TEST(Memory, ForgetDeletesById) {
  Memory m;
  EXPECT_EQ(m.host.call("memory_forget", R"({"id":1})").out, "no memory #1 in this project; memory_recall shows the ids\n");
  ASSERT_TRUE(m.remember(R"({"text":"a wrong fact about zebras"})").ok());
  const Reply f = m.host.call("memory_forget", R"({"id":1})");
  ASSERT_TRUE(f.ok()) << f.out;
  EXPECT_EQ(f.out, "forgot #1 (project " + m.host.cwd + ")\n");
  EXPECT_NE(m.recall(R"({"query":"zebras"})").out.find("no memories match"), std::string::npos);
  const Reply again = m.host.call("memory_forget", R"({"id":1})");
  EXPECT_EQ(again.exit(), 1);
  EXPECT_EQ(m.host.call("memory_forget", R"({})").out, "missing argument: id\n");
  EXPECT_EQ(m.host.call("memory_forget", R"({"id":"one"})").exit(), 1);
  // Ids are never reused.
  EXPECT_EQ(m.remember(R"({"text":"x"})").out, "remembered #2 (project " + m.host.cwd + ")\n");
}

TEST(Memory, BadArguments) {
  Memory m;
  auto err = [&](const std::string& tool, const std::string& args) {
    const Reply r = m.host.call(tool, args);
    EXPECT_EQ(r.status(), "exited") << args;
    EXPECT_EQ(r.exit(), 1) << args << ": " << r.out;
    return r.out;
  };
  EXPECT_EQ(err("memory_remember", "{}"), "missing argument: text\n");
  EXPECT_EQ(err("memory_remember", R"({"text":7})"), "invalid text: must be a string\n");
  EXPECT_EQ(err("memory_remember", R"({"text":"  \n "})"), "invalid text: empty; give the note to remember\n");
  EXPECT_EQ(err("memory_remember", R"({"text":"t","tags":"build"})"), "invalid tags: must be an array of strings\n");
  EXPECT_EQ(err("memory_remember", R"({"text":"t","tags":["a",3]})"), "invalid tags: must be an array of strings\n");
  EXPECT_EQ(err("memory_remember", R"({"text":"t","tags":["a,b"]})"),
            "invalid tags: a tag contains a comma; give each tag as its own string\n");
  EXPECT_EQ(err("memory_remember", R"({"text":"t","tags":[" "]})"), "invalid tags: a tag is empty\n");
  EXPECT_EQ(err("memory_recall", "{}"), "missing argument: query\n");
  EXPECT_EQ(err("memory_recall", R"({"query":["a"]})"), "invalid query: must be a string\n");
  EXPECT_EQ(err("memory_recall", R"({"query":"   "})"), "invalid query: empty; give words to search for\n");
  EXPECT_EQ(err("memory_recall", R"({"query":"a","limit":0})"), "invalid limit: must be an integer from 1 to 50\n");
  EXPECT_EQ(err("memory_recall", R"({"query":"a","limit":51})"), "invalid limit: must be an integer from 1 to 50\n");
  EXPECT_EQ(err("memory_recall", R"({"query":"a","limit":"5"})"), "invalid limit: must be an integer from 1 to 50\n");
  // Nothing was stored by the failed calls.
  EXPECT_FALSE(std::filesystem::exists(m.optmem()) && !std::filesystem::is_empty(m.optmem()));
}

TEST(Memory, TextSizeAndHitLimits) {
  Memory m;
  // At most 6 KiB, so that recall shows a note whole (its output stays under 7 KiB, within the
  // 8192 bytes olliesrv keeps of a result); 16 KiB notes came back without their middle.
  const std::string big(6 * 1024, 'x');
  ASSERT_TRUE(m.remember(R"({"text":")" + big + "\"}").ok());
  const Reply over = m.remember(R"({"text":")" + big + "y\"}");
  EXPECT_EQ(over.exit(), 1);
  EXPECT_EQ(over.out, "invalid text: 6145 bytes, the limit is 6144; store a shorter summary\n");
  const Reply whole = m.recall(R"({"query":"xxxx*"})");
  EXPECT_NE(whole.out.find(big + "\n"), std::string::npos);
  EXPECT_LT(whole.out.size(), 7u * 1024);
  // A long query is echoed cut, so it cannot push the note out of what the engine keeps.
  std::string query = "xxxx*";
  for (int i = 0; i < 300; i++) query += " xxxx*";
  const Reply long_query = m.recall(R"({"query":")" + query + "\"}");
  EXPECT_NE(long_query.out.find(big + "\n"), std::string::npos) << long_query.out.substr(0, 400) << long_query.err;
  EXPECT_LT(long_query.out.size(), 7u * 1024);
  for (int i = 0; i < 12; i++) ASSERT_TRUE(m.remember(R"({"text":"limit note )" + std::to_string(i) + "\"}").ok());
  const Reply r = m.recall(R"({"query":"limit note","limit":3})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("12 memories match \"limit note\" (project " + m.host.cwd + "), best 3 shown:\n"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '#'), 3) << r.out;
  const Reply ten = m.recall(R"({"query":"limit"})");
  EXPECT_EQ(std::count(ten.out.begin(), ten.out.end(), '#'), 10) << ten.out;
}

// The first calls of a project, remembers (scope global: one at a time) and recalls (scope read:
// beside them), while the store is being made: each waits for the one creating the schema (a
// read of the version still open made BEGIN IMMEDIATE fail at once: `database is locked`), and
// for the one switching it to WAL (SQLite refuses a second switch at once, without waiting).
TEST(Memory, ConcurrentFirstCallsOfNewStoresAllLand) {
  Memory m;
  for (int project = 0; project < 4; project++) {
    m.cwd(m.host.cwd + "/p" + std::to_string(project));
    std::vector<std::thread> threads;
    std::vector<Reply> replies(12);
    for (int i = 0; i < 12; i++)
      threads.emplace_back([&, i] {
        replies[i] = i % 3 == 0 ? m.remember(R"({"text":"first note )" + std::to_string(i) + "\"}")
                                : m.recall(R"({"query":"first"})");
      });
    for (auto& t : threads) t.join();
    for (const auto& r : replies) EXPECT_TRUE(r.ok()) << "project " << project << ": " << r.out << r.err;
  }
}

TEST(Memory, ConcurrentRemembersAllLand) {
  Memory m;
  std::vector<std::thread> threads;
  std::vector<Reply> replies(6);
  for (int i = 0; i < 6; i++)
    threads.emplace_back([&, i] { replies[i] = m.remember(R"({"text":"parallel note )" + std::to_string(i) + "\"}"); });
  for (auto& t : threads) t.join();
  std::set<std::string> ids;
  for (const auto& r : replies) {
    EXPECT_TRUE(r.ok()) << r.out << r.err;
    ids.insert(r.out.substr(0, r.out.find(' ', 12)));
  }
  EXPECT_EQ(ids.size(), 6u);
  const Reply all = m.recall(R"({"query":"parallel","limit":50})");
  EXPECT_NE(all.out.find("6 memories match"), std::string::npos) << all.out;
}

TEST(Memory, AFullStoreRefusesMore) {
  if (std::system("command -v sqlite3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs the sqlite3 program to fill the store";
  Memory m;
  ASSERT_TRUE(m.remember(R"({"text":"the first"})").ok());
  std::string db;
  for (const auto& e : std::filesystem::directory_iterator(m.optmem()))
    if (e.path().extension() == ".db") db = e.path();
  ASSERT_FALSE(db.empty());
  const std::string fill =
      "sqlite3 '" + db +
      "' \"WITH RECURSIVE n(x) AS (SELECT 2 UNION ALL SELECT x + 1 FROM n WHERE x < 10000) "
      "INSERT INTO memories(created, tags, text) SELECT 0, '', 'filler ' || x FROM n;\"";
  ASSERT_EQ(std::system(fill.c_str()), 0);
  const Reply r = m.remember(R"({"text":"one too many"})");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "memory full: this project has 10000 memories (the limit is 10000); forget some with memory_forget first\n");
  EXPECT_NE(m.recall(R"({"query":"filler"})").out.find("9999 memories match \"filler\" (project " + m.host.cwd + "), best 10 shown:"), std::string::npos);
  ASSERT_TRUE(m.host.call("memory_forget", R"({"id":5})").ok());
  EXPECT_TRUE(m.remember(R"({"text":"room again"})").ok());
}
