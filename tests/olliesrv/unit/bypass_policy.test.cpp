// The bypass policy text (spec §6.9.3) and the summary of a request (§6.9.2, §2.3).
#include "olliesrv/bypass_policy.hpp"
#include "olliesrv/store.hpp"

#include <gtest/gtest.h>

using namespace ollie::bypass;
using json = nlohmann::json;

namespace {

Summary cmd(const std::string& c) { return {c, true}; }

Policy ok(const std::string& text, Scope scope = Scope::global) {
  auto p = parse(text, scope);
  EXPECT_TRUE(p) << text << ": " << p.ename();
  return p ? *p : Policy{};
}

std::string err(const std::string& text, Scope scope = Scope::global) {
  auto p = parse(text, scope);
  return p ? "" : p.ename();
}

Verdict verdict(const std::string& session, const std::string& global, const std::string& tool, const Summary& s) {
  return decide(ok(session, Scope::session), ok(global), tool, s).verdict;
}

}  // namespace

TEST(BypassPolicy, TheSpecExampleParses) {
  auto p = ok("# mode: ask | allow | deny (default ask)\n"
              "mode ask\n"
              "allow shell git status\n"
              "deny  *     *rm -rf*\n"
              "allow file_read {\"path\":\"/home/me/notes/todo.md\"}\n"
              "# approves a project sandbox override\n"
              "sandbox 3b1f0000000000000000000000000000000000000000000000000000000000e2 /home/me/src/proj\n");
  ASSERT_TRUE(p.mode);
  EXPECT_EQ(*p.mode, Verdict::ask);
  ASSERT_EQ(p.rules.size(), 3u);
  EXPECT_TRUE(p.rules[0].allow);
  EXPECT_EQ(p.rules[0].tool, "shell");
  EXPECT_EQ(p.rules[0].glob, "git status");
  EXPECT_EQ(p.rules[0].line, 3);
  EXPECT_FALSE(p.rules[1].allow);
  EXPECT_EQ(p.rules[1].tool, "*");
  EXPECT_EQ(p.rules[1].glob, "*rm -rf*");
  EXPECT_EQ(p.rules[2].glob, "{\"path\":\"/home/me/notes/todo.md\"}");
  ASSERT_EQ(p.sandbox.size(), 1u);
  EXPECT_EQ(p.sandbox[0].second, "/home/me/src/proj");
}

TEST(BypassPolicy, BlankLinesCommentsAndTrailingBlanks) {
  auto p = ok("\n   \n# a comment\n  # indented comment\nallow shell ls -l   \t\r\n");
  ASSERT_EQ(p.rules.size(), 1u);
  EXPECT_EQ(p.rules[0].glob, "ls -l");
  EXPECT_FALSE(p.mode);
  // `#` inside a rule is literal: comments are whole lines.
  auto q = ok("allow shell echo # not a comment\n");
  EXPECT_EQ(q.rules[0].glob, "echo # not a comment");
  // An escaped trailing blank stays.
  auto r = ok("allow shell ls\\ \n");
  EXPECT_EQ(r.rules[0].glob, "ls\\ ");
  EXPECT_TRUE(glob_match(r.rules[0].glob, cmd("ls ")));
  EXPECT_FALSE(glob_match(r.rules[0].glob, cmd("ls")));
}

TEST(BypassPolicy, BadLinesNameTheirNumber) {
  EXPECT_EQ(err("mode ask\nfrobnicate x\n"), "policy line 2: unknown directive: frobnicate");
  EXPECT_EQ(err("mode maybe\n"), "policy line 1: unknown mode: maybe");
  EXPECT_EQ(err("mode\n"), "policy line 1: usage: mode ask|allow|deny");
  EXPECT_EQ(err("mode ask allow\n"), "policy line 1: usage: mode ask|allow|deny");
  EXPECT_EQ(err("mode ask\n\nmode deny\n"), "policy line 3: mode already set on line 1");
  EXPECT_EQ(err("allow shell\n"), "policy line 1: usage: allow <tool|*> <glob>");
  EXPECT_EQ(err("deny\n"), "policy line 1: usage: deny <tool|*> <glob>");
  EXPECT_EQ(err("allow sh/ell ls\n"), "policy line 1: invalid tool: sh/ell");
  EXPECT_EQ(err("allow shell ls\\\n"), "policy line 1: glob ends with a lone \\");
  EXPECT_EQ(err("sandbox abc /x\n"), "policy line 1: invalid hash: abc");
  EXPECT_EQ(err("sandbox " + std::string(64, 'a') + " rel/dir\n"), "policy line 1: dir must be absolute: rel/dir");
  EXPECT_EQ(err("sandbox " + std::string(64, 'a') + "\n"), "policy line 1: usage: sandbox <sha256> <dir>");
  // A sandbox line in a session policy is a bad line (§6.9.3).
  EXPECT_EQ(err("mode ask\nsandbox " + std::string(64, 'a') + " /x\n", Scope::session),
            "policy line 2: sandbox lines belong in the global policy");
  EXPECT_TRUE(parse("sandbox " + std::string(64, 'A') + " /x y\n", Scope::global));
  // Control characters in a named value are escaped, so the error stays one line.
  EXPECT_EQ(err("mode \x1b[2J\n"), "policy line 1: unknown mode: \\x1b[2J");
  // Bounds.
  EXPECT_EQ(err("allow shell " + std::string(max_line, 'x') + "\n"), "policy line 1: line longer than 1 MiB");
}

TEST(BypassPolicy, GlobsMatchTheWholeSummary) {
  EXPECT_TRUE(glob_match("git status", cmd("git status")));
  EXPECT_FALSE(glob_match("git status", cmd("git status -s")));
  EXPECT_FALSE(glob_match("git", cmd("git status")));
  EXPECT_TRUE(glob_match("git status*", cmd("git status -s")));
  EXPECT_TRUE(glob_match("git ?tatus", cmd("git status")));
  EXPECT_TRUE(glob_match("*", cmd("")));
  EXPECT_FALSE(glob_match("?", cmd("")));
  EXPECT_TRUE(glob_match("a*b*c", cmd("aXXbYYc")));
  EXPECT_FALSE(glob_match("a*b*c", cmd("aXXbYY")));
  EXPECT_TRUE(glob_match("\\*", cmd("*")));
  EXPECT_FALSE(glob_match("\\*", cmd("x")));
  EXPECT_TRUE(glob_match("\\?\\\\", cmd("?\\")));
  // `?` is one character, not one byte.
  EXPECT_TRUE(glob_match("caf?", cmd("café")));
  EXPECT_TRUE(glob_match("*?", cmd("é")));
}

TEST(BypassPolicy, WildcardsNeverCrossShellMetacharactersOrNewlines) {
  EXPECT_FALSE(glob_match("git status*", cmd("git status; rm -rf ~")));
  for (const char* bad : {";", "&", "|", "<", ">", "$", "`", "(", ")", "{", "}"}) {
    EXPECT_FALSE(glob_match("ls *", cmd(std::string("ls a") + bad + "b"))) << bad;
    EXPECT_FALSE(glob_match("ls a?b", cmd(std::string("ls a") + bad + "b"))) << bad;
    // A literal metacharacter in the glob matches itself.
    EXPECT_TRUE(glob_match(std::string("ls a") + bad + "b", cmd(std::string("ls a") + bad + "b"))) << bad;
  }
  EXPECT_FALSE(glob_match("ls*", cmd("ls\nrm -rf /")));
  // A JSON summary is no command: only the newline is special (JSON has none unescaped).
  EXPECT_TRUE(glob_match("*", Summary{"{\"content\":\"a;b|c\",\"path\":\"x\"}", false}));
  EXPECT_FALSE(glob_match("*", Summary{"a\nb", false}));
}

TEST(BypassPolicy, LongSummariesMatchInLinearTime) {
  // A backtracking matcher would take (n choose 8) steps here.
  const std::string big(1 << 16, 'a');
  EXPECT_TRUE(glob_match("*a*a*a*a*a*a*a*a*b", cmd(big + "b")));
  EXPECT_FALSE(glob_match("*a*a*a*a*a*a*a*a*b", cmd(big)));
  // An allow-always rule of a long summary has no star: compared character by character.
  const std::string huge(1 << 20, 'x');
  EXPECT_TRUE(glob_match(huge, cmd(huge)));
  EXPECT_FALSE(glob_match(huge, cmd(huge + "x")));
}

TEST(BypassPolicy, TheSummaryIsTheCommandOrSortedCompactJson) {
  EXPECT_EQ(summarize(json{{"cmd", "git status"}}).text, "git status");
  EXPECT_TRUE(summarize(json{{"cmd", "git status"}}).command);
  // Any other key: all the arguments as compact JSON with sorted keys.
  auto s = summarize(json{{"timeout_hint", 3}, {"cmd", "git status"}});
  EXPECT_FALSE(s.command);
  EXPECT_EQ(s.text, "{\"cmd\":\"git status\",\"timeout_hint\":3}");
  EXPECT_EQ(summarize(json{{"path", "/home/me/notes/todo.md"}}).text, "{\"path\":\"/home/me/notes/todo.md\"}");
  EXPECT_FALSE(summarize(json{{"cmd", 3}}).command);
  EXPECT_EQ(summarize(json::object()).text, "{}");
}

TEST(BypassPolicy, EvaluationOrderSessionRulesGlobalRulesThenModes) {
  EXPECT_EQ(verdict("", "", "shell", cmd("ls")), Verdict::ask);
  EXPECT_EQ(verdict("", "mode deny\n", "shell", cmd("ls")), Verdict::deny);
  EXPECT_EQ(verdict("mode allow\n", "mode deny\n", "shell", cmd("ls")), Verdict::allow);
  // The first matching rule decides, session rules first, even over a global rule and a mode.
  EXPECT_EQ(verdict("allow shell ls\n", "deny shell ls\n", "shell", cmd("ls")), Verdict::allow);
  EXPECT_EQ(verdict("deny shell l*\nallow shell ls\n", "", "shell", cmd("ls")), Verdict::deny);
  EXPECT_EQ(verdict("mode deny\n", "allow shell ls\n", "shell", cmd("ls")), Verdict::allow);
  // A rule for another tool does not apply; `*` is every tool.
  EXPECT_EQ(verdict("", "allow file_read ls\nmode deny\n", "shell", cmd("ls")), Verdict::deny);
  EXPECT_EQ(verdict("", "allow * ls\nmode deny\n", "shell", cmd("ls")), Verdict::allow);
  // Chained commands escape no rule.
  EXPECT_EQ(verdict("", "allow shell git status*\n", "shell", cmd("git status; rm -rf ~")), Verdict::ask);
  // A summary with a newline matches no allow rule.
  EXPECT_EQ(verdict("", "allow shell *\nmode deny\n", "shell", cmd("ls\nrm x")), Verdict::deny);
  // What decided is named for the audit log.
  auto d = decide(ok("\nallow shell ls\n", Scope::session), ok(""), "shell", cmd("ls"));
  EXPECT_EQ(d.by, "session policy line 2: allow shell ls");
  EXPECT_EQ(decide(Policy{}, ok("mode allow\n"), "shell", cmd("x")).by, "global policy mode");
  EXPECT_EQ(decide(Policy{}, Policy{}, "shell", cmd("x")).by, "default mode");
}

TEST(BypassPolicy, AllowAlwaysRulesMatchExactlyTheirSummary) {
  const std::vector<std::string> commands = {"git status", "ls *.txt", "echo a?b\\c", "  lead", "trail  ", "rm -rf ~; echo $(id)",
                                             "\tx\t"};
  for (const auto& c : commands) {
    auto rule = allow_rule("shell", cmd(c));
    ASSERT_TRUE(rule) << c;
    auto p = parse(*rule + "\n", Scope::session);
    ASSERT_TRUE(p) << *rule << ": " << p.ename();
    ASSERT_EQ(p->rules.size(), 1u);
    EXPECT_TRUE(glob_match(p->rules[0].glob, cmd(c))) << *rule;
    EXPECT_FALSE(glob_match(p->rules[0].glob, cmd(c + "x"))) << *rule;
    EXPECT_FALSE(glob_match(p->rules[0].glob, cmd("x" + c))) << *rule;
  }
  EXPECT_EQ(*allow_rule("shell", cmd("ls *.txt")), "allow shell ls \\*.txt");
  EXPECT_EQ(allow_rule("shell", cmd("ls\nrm x")).ename(), "multi-line command");
  EXPECT_EQ(allow_rule("shell", cmd("")).ename(), "empty command");
  // A JSON summary works too.
  Summary j = summarize(json{{"path", "/tmp/a*b"}});
  auto rule = allow_rule("file_read", j);
  ASSERT_TRUE(rule);
  EXPECT_TRUE(glob_match(parse(*rule, Scope::session)->rules[0].glob, j));
}

TEST(BypassPolicy, EscapeMakesOneLineATerminalShowsAsIs) {
  EXPECT_EQ(escape("git status"), "git status");
  EXPECT_EQ(escape("a\\b"), "a\\\\b");
  EXPECT_EQ(escape("a\tb\rc\nd"), "a\\tb\\rc\\nd");
  EXPECT_EQ(escape("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(escape(std::string("\0x", 2)), "\\x00x");
  EXPECT_EQ(escape("\x7f"), "\\x7f");
  EXPECT_EQ(escape("café ✓"), "café ✓");
  // C1 controls, bidirectional overrides and bytes that are not UTF-8, byte by byte.
  EXPECT_EQ(escape("\xc2\x9b" "2J"), "\\xc2\\x9b2J");
  EXPECT_EQ(escape("a\xe2\x80\xae" "b"), "a\\xe2\\x80\\xaeb");
  EXPECT_EQ(escape("\xff\xc3"), "\\xff\\xc3");
}

// An error names a long value by its first 64 bytes and marks the cut: the cut alone could be a
// valid name, or the current one.
TEST(BypassPolicy, ShownMarksAValueItCuts) {
  EXPECT_EQ(shown(std::string(64, 'a')), std::string(64, 'a'));
  EXPECT_EQ(shown(std::string(70, 'a')), std::string(64, 'a') + "…");
  EXPECT_EQ(shown(std::string(63, 'a') + "é!"), std::string(63, 'a') + "…");  // not half of é
  EXPECT_EQ(shown("bad\nname"), "bad\\nname");
}

TEST(BypassPolicy, ASessionSavedBeforePoliciesLoadsWithNoneAndCounterZero) {
  auto s = ollie::parse_session(R"({"id":"x","name":"old","cwd":"/","agents":[]})");
  ASSERT_TRUE(s) << s.ename();
  EXPECT_EQ(s->bypass, "");
  EXPECT_EQ(s->bypass_counter, 0u);
  // An empty policy asks.
  EXPECT_EQ(decide(ok("", Scope::session), ok(""), "shell", cmd("ls")).verdict, Verdict::ask);
}
