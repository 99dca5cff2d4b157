// The script tools of data/tools: reasoning_think, tool_load, skill_list, skill_load and
// subagent_spawn. tool_load and subagent_spawn talk to olliesrv through ollie-9p: here they meet
// either no olliesrv (OLLIE_ADDR pointing nowhere) or a stand-in ollie-9p, put first on PATH
// with a session variable, that records what it was asked and answers as told.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tools/host.hpp"

using namespace tools_test;
namespace fs = std::filesystem;

namespace {

const std::string session = "11111111-2222-4333-8444-555555555555";

nlohmann::json catalog_entry(ToolHost& host, const std::string& name) {
  for (auto& t : nlohmann::json::parse(host.catalog()))
    if (t["name"] == name) return t;
  return nullptr;
}

/// Every line of `r.out` but the last ends in '\n' and there is one: a one-line error.
void one_line_error(const Reply& r, const std::string& prefix) {
  EXPECT_EQ(r.exit(), 1) << r.out << r.err;
  EXPECT_EQ(r.out.rfind(prefix, 0), 0u) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;
  EXPECT_EQ(r.err, "");
}

class Scripts : public ::testing::Test {
 protected:
  /// A stand-in ollie-9p: saves its arguments, environment and stdin in the cwd, prints
  /// `reply` and exits with `status` (stderr `error` when non-zero).
  void fake_ollie_9p(const std::string& reply, int status = 0, const std::string& error = "") {
    write_file(host.cwd + "/fakebin/ollie-9p",
               "#!/bin/sh\nprintf '%s\\n' \"$*\" > \"$PWD/9p.args\"\n"
               "printf '%s|%s|%s\\n' \"$OLLIE_ADDR\" \"$OLLIE_UNAME\" \"$OLLIE_AUTH\" > \"$PWD/9p.env\"\n"
               "cat > \"$PWD/9p.stdin\"\nprintf '%s' '" + reply + "'\n" +
                   (status ? "echo '" + error + "' >&2\n" : "") + "exit " + std::to_string(status) + "\n",
               0755);
    ASSERT_TRUE(host.ctl("env PATH=" + host.cwd + "/fakebin:/usr/bin:/bin\nenv OLLIE_ADDR=unix!/run/test/ollie\n"));
  }
  ToolHost host;
};

// ---- reasoning_think ----

TEST_F(Scripts, ThinkAcknowledgesAThought) {
  host.load("reasoning_think");
  const Reply r = host.call("reasoning_think", R"({"thought":"The test failed because the fixture is stale."})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "Noted. Continue.\n");
  const auto meta = catalog_entry(host, "reasoning_think");
  EXPECT_EQ(meta["tier"], "hot");
  EXPECT_EQ(meta["scope"], "read");
}

TEST_F(Scripts, ThinkWantsAStringThought) {
  host.load("reasoning_think");
  one_line_error(host.call("reasoning_think", "{}"), "missing argument: thought");
  one_line_error(host.call("reasoning_think", R"({"thought":["a"]})"), "invalid thought: must be a string");
  one_line_error(host.call("reasoning_think", R"({"thought":"  "})"), "invalid thought: empty");
}

// ---- tool_load ----

TEST_F(Scripts, ToolLoadChecksNamesBeforeCallingOlliesrv) {
  host.load("tool_load");
  fake_ollie_9p("");
  one_line_error(host.call("tool_load", R"({"name":"a b"})"), "invalid name: \"a b\": a tool name is");
  one_line_error(host.call("tool_load", R"({"name":"x\ntool_load y"})"), "invalid name: ");
  one_line_error(host.call("tool_load", R"({"name":7})"), "invalid name: must be a string");
  one_line_error(host.call("tool_load", R"({"names":[]})"), "invalid names: must be a non-empty array");
  one_line_error(host.call("tool_load", R"({"names":"shell"})"), "invalid names: must be a non-empty array");
  one_line_error(host.call("tool_load", R"({"names":["shell",3]})"), "invalid names: 3: a tool name is");
  EXPECT_FALSE(fs::exists(host.cwd + "/9p.args"));
}

TEST_F(Scripts, ToolLoadWritesTheVerbToTheAgentsCtl) {
  host.load("tool_load");
  fake_ollie_9p("file_read\nshell\n");
  const Reply r = host.call("tool_load", R"({"name":"shell","names":["file_read","shell"]})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "loaded: file_read, shell; usable from your next step\n");
  EXPECT_EQ(read_file(host.cwd + "/9p.args"), "rdwr session/" + session + "/agent/" + agent + "/ctl\n");
  EXPECT_EQ(read_file(host.cwd + "/9p.stdin"), "tool_load file_read shell\n");
  // ollie-9p dials OLLIE_ADDR and attaches as the agent with its secret (§1.4).
  EXPECT_EQ(read_file(host.cwd + "/9p.env"), "unix!/run/test/ollie|" + agent + "|" + secret + "\n");
}

TEST_F(Scripts, ToolLoadReportsTheCtlsError) {
  host.load("tool_load");
  fake_ollie_9p("", 1, "ollie-9p: session/" + session + "/agent/" + agent + "/ctl: unknown tool: nope");
  const Reply r = host.call("tool_load", R"({"name":"nope"})");
  one_line_error(r, "tool_load failed: unknown tool: nope\n");
}

TEST_F(Scripts, ToolLoadWithoutANameListsTheCatalog) {
  host.load("tool_load");
  fake_ollie_9p("file_read\tread\tcold\tRead a file.\nbroken\t-\t-\tinvalid: bad json\nshell\tglobal\thot\tRun a command.\n");
  const Reply r = host.call("tool_load", "{}");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "Tools you can load (tool_load with name or names):\nfile_read: Read a file.\nshell: Run a command.\n");
  EXPECT_EQ(read_file(host.cwd + "/9p.args"), "read tools\n");
}

TEST_F(Scripts, ToolLoadWithoutOlliesrvFailsInOneLine) {
  host.load("tool_load");
  ASSERT_TRUE(host.ctl("env OLLIE_ADDR=unix!/nonexistent\n"));
  one_line_error(host.call("tool_load", R"({"name":"shell"})"), "tool_load failed: cannot reach olliesrv: unix!/nonexistent: ");
  one_line_error(host.call("tool_load", "{}"), "tool_load failed: cannot reach olliesrv: unix!/nonexistent: ");
  // A private directory without a socket: the dial itself fails.
  ASSERT_TRUE(host.ctl("env OLLIE_ADDR=unix!" + host.root + "/run/none\n"));
  one_line_error(host.call("tool_load", R"({"name":"shell"})"), "tool_load failed: cannot reach olliesrv: unix!" + host.root + "/run/none: ");
}

// ---- skill_list, skill_load ----

class Skills : public Scripts {
 protected:
  void SetUp() override {
    host.load("skill_list skill_load");
    fs::remove(host.config + "/skills");  // the symlink to data/skills, if any
    fs::create_directories(host.config + "/skills");
    write_file(host.config + "/skills/tiny.md", "Say hello politely.\n\n# Tiny\n\nSay hello.\n");
  }
};

TEST_F(Skills, ListShowsNameAndFirstLine) {
  write_file(host.config + "/skills/another.md", "Another skill.\nmore\n");
  write_file(host.config + "/skills/crlf.md", "Written on Windows.\r\nmore\r\n");  // its CR is not shown
  write_file(host.config + "/skills/not-a-skill.txt", "x\n");
  const Reply r = host.call("skill_list", "{}");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "another: Another skill.\ncrlf: Written on Windows.\ntiny: Say hello politely.\n");
}

TEST_F(Skills, ListWithoutSkillsSaysSo) {
  fs::remove_all(host.config + "/skills");
  const Reply r = host.call("skill_list", "{}");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("No skills are installed", 0), 0u) << r.out;
}

TEST_F(Skills, LoadPrintsTheSkill) {
  const Reply r = host.call("skill_load", R"({"name":"tiny"})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "Say hello politely.\n\n# Tiny\n\nSay hello.\n");
  EXPECT_EQ(host.call("skill_load", R"({"name":"tiny.md"})").out, r.out);
}

TEST_F(Skills, LoadRefusesPathsAndListsTheKnownOnUnknownNames) {
  one_line_error(host.call("skill_load", "{}"), "missing argument: name");
  one_line_error(host.call("skill_load", R"({"name":1})"), "invalid name: must be a string");
  one_line_error(host.call("skill_load", R"({"name":""})"), "invalid name: empty");
  one_line_error(host.call("skill_load", R"({"name":"../sandbox"})"), "invalid name: \"../sandbox\": a skill name has no /");
  one_line_error(host.call("skill_load", R"({"name":"a/b"})"), "invalid name: \"a/b\"");
  one_line_error(host.call("skill_load", R"({"name":".."})"), "invalid name: \"..\"");
  one_line_error(host.call("skill_load", R"({"name":"nope"})"), "unknown skill: nope; available: tiny\n");
}

// A relative XDG_CONFIG_HOME names a directory under the cwd, the model's to write: ignored, as
// olliesrv ignores it (doc/data.md), so a skill planted there is never offered.
TEST_F(Skills, ARelativeConfigHomeIsIgnored) {
  write_file(host.cwd + "/relcfg/ollie/skills/evil.md", "Planted by the model.\n");
  ASSERT_TRUE(host.ctl("env XDG_CONFIG_HOME=relcfg\n"));
  const Reply r = host.call("skill_list", "{}");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "tiny: Say hello politely.\n");
  one_line_error(host.call("skill_load", R"({"name":"evil"})"), "unknown skill: evil; available: tiny\n");
}

// A skill longer than 7 KiB is cut at a line, under the 8192 bytes olliesrv keeps of a result
// (§8.3.4: past that its middle goes), and says where file_read finds the rest. It was cut at
// 64 KiB, so the model got its first and last 4 KiB and never the middle.
TEST_F(Skills, AHugeSkillIsCutAtALineWithinWhatTheEngineKeeps) {
  std::string text = "Huge.\n";
  for (int i = 2; i <= 2000; i++) text += "line " + std::to_string(i) + "\n";
  write_file(host.config + "/skills/huge.md", text);
  const Reply r = host.call("skill_load", R"({"name":"huge"})");
  ASSERT_TRUE(r.ok());
  EXPECT_LT(r.out.size(), 8192u);
  const std::string shown = r.out.substr(0, r.out.find("[skill cut"));
  EXPECT_EQ(text.compare(0, shown.size(), shown), 0);
  const int lines = static_cast<int>(std::count(shown.begin(), shown.end(), '\n'));
  EXPECT_NE(r.out.find("[skill cut: lines 1-" + std::to_string(lines) + " of 2000 shown; read the rest with file_read of " +
                       host.config + "/skills/huge.md from offset " + std::to_string(lines + 1) + "]\n"),
            std::string::npos)
      << r.out.substr(shown.size());
  // A first line longer than the limit: its first 7 KiB, ended on a whole character, and no
  // pointer file_read could not follow. A last line without a newline is counted.
  write_file(host.config + "/skills/wide.md", "a" + [] {
    std::string s;
    for (int i = 0; i < 5000; i++) s += "\xc3\xa9";
    return s;
  }() + "\nsecond line\n");
  const Reply wide = host.call("skill_load", R"({"name":"wide"})");
  ASSERT_TRUE(wide.ok()) << wide.out << wide.err;
  EXPECT_EQ(wide.err, "");
  EXPECT_EQ(wide.out.find("\xef\xbf\xbd"), std::string::npos);  // no U+FFFD: no character cut
  EXPECT_NE(wide.out.find("\n[skill cut: 7168 of 10014 bytes shown; its first line alone is longer]\n"), std::string::npos)
      << wide.out.substr(7000);
  write_file(host.config + "/skills/open.md", text + "no newline at the end");
  EXPECT_NE(host.call("skill_load", R"({"name":"open"})").out.find(" of 2001 shown;"), std::string::npos);
  // A name with a blank is listed whole among those available.
  write_file(host.config + "/skills/two words.md", "Spaced.\n");
  EXPECT_NE(host.call("skill_load", R"({"name":"nope"})").out.find(", two words"), std::string::npos);
}

TEST_F(Scripts, TheShippedSkillsAreListed) {
  host.load("skill_list");
  const Reply r = host.call("skill_list", "{}");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  if (!fs::exists(source("data/skills"))) GTEST_SKIP() << "no data/skills";
  for (auto& e : fs::directory_iterator(source("data/skills")))
    if (e.path().extension() == ".md") {
      EXPECT_NE(r.out.find(e.path().stem().string() + ": "), std::string::npos) << r.out;
    }
}

// ---- subagent_spawn ----

TEST_F(Scripts, SpawnChecksItsArguments) {
  host.load("subagent_spawn");
  fake_ollie_9p("");
  one_line_error(host.call("subagent_spawn", "{}"), "missing argument: prompt");
  one_line_error(host.call("subagent_spawn", R"({"prompt":5})"), "invalid prompt: must be a string");
  one_line_error(host.call("subagent_spawn", R"({"prompt":" \n"})"), "invalid prompt: empty");
  one_line_error(host.call("subagent_spawn", R"({"prompt":"x","agent":1})"), "invalid agent: must be a string");
  one_line_error(host.call("subagent_spawn", R"({"prompt":"x","name":"a\nb"})"), "invalid name: must not contain control");
  one_line_error(host.call("subagent_spawn", R"({"prompt":"x","time_limit":-1})"), "invalid time_limit: ");
  one_line_error(host.call("subagent_spawn", R"({"prompt":"x","time_limit":"60"})"), "invalid time_limit: ");
  EXPECT_FALSE(fs::exists(host.cwd + "/9p.args"));
  const auto meta = catalog_entry(host, "subagent_spawn");
  EXPECT_EQ(meta["timeout"], 0);
  EXPECT_EQ(meta["scope"], "read");
}

TEST_F(Scripts, SpawnSendsTheAgentNewRequestAndPrintsTheAnswer) {
  host.load("subagent_spawn");
  fake_ollie_9p("The answer is 42.");
  const Reply r = host.call("subagent_spawn",
                            R"({"prompt":"Find the answer.\nSay 'it' only.\n","agent":"explorer","name":"it's","time_limit":90})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "The answer is 42.\n");
  EXPECT_EQ(read_file(host.cwd + "/9p.args"), "rdwr session/" + session + "/agent/new\n");
  EXPECT_EQ(read_file(host.cwd + "/9p.stdin"), "cwd='" + host.cwd + "' parent='" + agent +
                                                   "' agent='explorer' name='it''s' timeout=90\n"
                                                   "prompt=Find the answer.\nSay 'it' only.\n\n");
  const Reply minimal = host.call("subagent_spawn", R"({"prompt":"go"})");
  ASSERT_TRUE(minimal.ok());
  EXPECT_EQ(read_file(host.cwd + "/9p.stdin"), "cwd='" + host.cwd + "' parent='" + agent + "'\nprompt=go\n");
}

TEST_F(Scripts, SpawnReportsTheSubagentsFailure) {
  host.load("subagent_spawn");
  fake_ollie_9p("", 1, "ollie-9p: session/" + session + "/agent/new: subagent timeout after 600s");
  one_line_error(host.call("subagent_spawn", R"({"prompt":"go"})"), "subagent_spawn failed: subagent timeout after 600s\n");
}

TEST_F(Scripts, SpawnWithoutOlliesrvFailsInOneLine) {
  host.load("subagent_spawn");
  ASSERT_TRUE(host.ctl("env OLLIE_ADDR=unix!/nonexistent\n"));
  one_line_error(host.call("subagent_spawn", R"({"prompt":"go"})"), "subagent_spawn failed: cannot reach olliesrv: unix!/nonexistent: ");
}

}  // namespace
