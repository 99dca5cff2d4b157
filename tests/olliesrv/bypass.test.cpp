// The bypass broker (spec §2.3, §5.1, §6.9.2, §6.9.3) through the real socket: the real olliesrv
// and toolsrv, the shipped shell tool, the fake provider asking for calls with `bypass: true`.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "olliesrv/world.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

std::string trimmed(p9::Result<std::string> r) {
  std::string s = r ? *r : "";
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

/// A shell call asking to run outside the sandbox.
json bypass_shell(const std::string& id, const std::string& cmd) {
  return {{"id", id}, {"name", "shell"}, {"arguments", {{"cmd", cmd}, {"bypass", true}}}};
}

/// An `event` fid filtered to the bypass topics.
p9::CFid bypass_events(World& w) {
  auto f = w.walk("event");
  if (!f) throw std::runtime_error("event: " + f.ename());
  if (auto st = f->open(p9::ORDWR); !st) throw std::runtime_error("event: " + st.ename());
  if (auto wr = f->write("bypass.*\n"); !wr) throw std::runtime_error("event: " + wr.ename());
  return std::move(*f);
}

/// The lines of a bypass/pending file.
std::size_t pending_count(World& w, const std::string& session) {
  auto r = w.read("bypass/pending/" + session);
  return r ? static_cast<std::size_t>(std::count(r->begin(), r->end(), '\n')) : 0;
}

std::vector<json> audit(World& w) { return blocks_of(read_file(w.data + "/bypass.audit.jsonl")); }

/// Waits until the audit log has n lines.
std::vector<json> audit_lines(World& w, std::size_t n) {
  eventually([&] { return audit(w).size() >= n; });
  return audit(w);
}

/// The roles of the agent's `call`, `bypass` and `tool` blocks, with each `bypass` block's
/// content, in log.raw's order: "call", "bypass <content>", "tool".
std::vector<std::string> call_sequence(World& w, const std::string& agent) {
  std::vector<std::string> out;
  for (const auto& b : blocks_of(w, agent)) {
    const std::string role = b["role"];
    if (role == "bypass") out.push_back("bypass " + b["content"].get<std::string>());
    else if (role == "call" || role == "tool") out.push_back(role);
  }
  return out;
}

/// Session "work", agent "main", whose turn waits on bypass request 1: a shell call of `cmd`,
/// then the answer "one". Returns the agent's path.
std::string waiting_on_request_1(World& w, const std::string& cmd) {
  auto a = w.agent(w.session("work"), "main");
  auto ev = bypass_events(w);
  w.fake.push({{"tool_calls", json::array({bypass_shell("c1", cmd)})}});
  w.fake.push({{"text", "one"}});
  if (auto st = w.write(a + "/prompt", "go"); !st) throw std::runtime_error("prompt: " + st.ename());
  World::read_until(ev, ".request 1 ");
  return a;
}

}  // namespace

TEST(Bypass, AnApprovedCallRunsUnsandboxedAndIsAudited) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string sid = trimmed(w.read(s + "/id"));
  auto ev = bypass_events(w);
  w.fake.push({{"tool_calls", json::array({bypass_shell("c1", "grep NoNewPrivs /proc/self/status")})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "check"));
  auto seen = World::read_until(ev, "\n");
  EXPECT_EQ(seen, "bypass." + sid + ".request 1 session/work/agent/main shell\n");
  EXPECT_EQ(*w.read("bypass/pending/work"), "1\tmain\tshell\tgrep NoNewPrivs /proc/self/status\n");
  // The directory lists every session by name.
  EXPECT_TRUE(has(contents(w, a, "bypass"), "request 1: shell grep NoNewPrivs /proc/self/status"));
  // As a shell script answers: ollie-9p reads the list and writes the answer (a Write's error
  // is its exit status).
  const std::string o9p = testing_support::built("bin/ollie-9p");
  auto listed = testing_support::run({o9p, "-a", "unix!" + w.sock, "read", "bypass/pending/work"}, "", w.env());
  EXPECT_EQ(listed.out, "1\tmain\tshell\tgrep NoNewPrivs /proc/self/status\n") << listed.err;
  auto wrong = testing_support::run({o9p, "-a", "unix!" + w.sock, "write", "bypass/pending/work"}, "7 allow\n", w.env());
  EXPECT_EQ(wrong.status, 1);
  EXPECT_NE(wrong.err.find("no such request: 7"), std::string::npos) << wrong.err;
  auto answered = testing_support::run({o9p, "-a", "unix!" + w.sock, "write", "bypass/pending/work"}, "1 allow\n", w.env());
  ASSERT_EQ(answered.status, 0) << answered.err;
  seen = World::read_until(ev, "resolve 1 allow\n", seen);
  EXPECT_NE(seen.find("bypass." + sid + ".resolve 1 allow\n"), std::string::npos) << seen;
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(*w.read("bypass/pending/work"), "");
  auto tools = contents(w, a, "tool");
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_NE(tools[0].find("NoNewPrivs:\t0\n"), std::string::npos) << tools[0];  // no sandbox: no no_new_privs
  auto bypass = contents(w, a, "bypass");
  EXPECT_EQ(bypass, (std::vector<std::string>{"request 1: shell grep NoNewPrivs /proc/self/status", "approved 1"}));
  // The audit log: one line per decision, 0600.
  auto lines = audit_lines(w, 1);
  ASSERT_EQ(lines.size(), 1u);
  const auto& l = lines[0];
  EXPECT_EQ(l["session"], sid);
  EXPECT_EQ(l["sessionName"], "work");
  EXPECT_EQ(l["agentName"], "main");
  EXPECT_EQ(l["agent"], trimmed(w.read(a + "/id")));
  EXPECT_EQ(l["reqid"], 1);
  EXPECT_EQ(l["tool"], "shell");
  EXPECT_EQ(l["args"], (json{{"cmd", "grep NoNewPrivs /proc/self/status"}}));
  EXPECT_EQ(l["summary"], "grep NoNewPrivs /proc/self/status");
  EXPECT_EQ(l["cwd"], w.project);
  EXPECT_EQ(l["decision"], "allow");
  EXPECT_EQ(l["by"], "hostowner");
  EXPECT_EQ(l["how"], "allow");
  EXPECT_EQ(l["who"], World::login());
  EXPECT_TRUE(l["time"].is_string() && l["requested"].is_string()) << l.dump();
  struct stat st{};
  ASSERT_EQ(::stat((w.data + "/bypass.audit.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // The same call without the flag runs in the sandbox.
  w.fake.push({{"tool_calls", json::array({{{"id", "c2"}, {"name", "shell"}, {"arguments", {{"cmd", "grep NoNewPrivs /proc/self/status"}}}}})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "again"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "tool").size() == 2; }));
  EXPECT_NE(contents(w, a, "tool")[1].find("NoNewPrivs:\t1\n"), std::string::npos) << contents(w, a, "tool")[1];
}

TEST(Bypass, ADeniedCallRunsNothingAndSeveralLinesResolveSeveralRequests) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto ev = bypass_events(w);
  // file_read is read scope: the three calls run at once, so three requests wait together.
  json calls = json::array();
  for (int i = 1; i <= 3; i++)
    calls.push_back({{"id", "c" + std::to_string(i)}, {"name", "file_read"},
                     {"arguments", {{"path", "/etc/hostname"}, {"offset", i}, {"bypass", true}}}});
  w.fake.push({{"tool_calls", calls}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "read"));
  auto seen = World::read_until(ev, ".request 3 ");
  ASSERT_TRUE(eventually([&] { return pending_count(w, "work") == 3; }));
  auto pending = *w.read("bypass/pending/work");
  EXPECT_NE(pending.find("1\tmain\tfile_read\t{\"offset\":1,\"path\":\"/etc/hostname\"}\n"), std::string::npos) << pending;
  // Any bad line refuses the whole write: nothing is resolved.
  EXPECT_EQ(w.write("bypass/pending/work", "1 deny\n2 maybe\n").ename(), "usage: <reqid> allow [always] | deny");
  EXPECT_EQ(w.write("bypass/pending/work", "1 deny\n9 deny\n").ename(), "no such request: 9");
  EXPECT_EQ(pending_count(w, "work"), 3u);
  ASSERT_TRUE(w.write("bypass/pending/work", "1 deny\n2 deny\n\n3 deny\n"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  for (const auto& t : contents(w, a, "tool")) EXPECT_EQ(t, "error: bypass denied\n\n[stderr]\nbypass denied\n");  // §8.3.4: toolsrv says why on stderr
  auto b = contents(w, a, "bypass");
  EXPECT_TRUE(has(b, "denied 1") && has(b, "denied 2") && has(b, "denied 3")) << json(b).dump();
  // A resolved request is gone.
  EXPECT_EQ(w.write("bypass/pending/work", "1 allow\n").ename(), "no such request: 1");
  auto lines = audit_lines(w, 3);
  ASSERT_EQ(lines.size(), 3u);
  for (const auto& l : lines) {
    EXPECT_EQ(l["decision"], "deny");
    EXPECT_EQ(l["by"], "hostowner");
  }
}

TEST(Bypass, AllowAlwaysAddsASessionRuleAndTheNextCallRunsWithoutAsking) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto ev = bypass_events(w);
  w.fake.push({{"tool_calls", json::array({bypass_shell("c1", "echo 'hi *'")})}});
  w.fake.push({{"text", "one"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  auto seen = World::read_until(ev, ".request 1 ");
  ASSERT_TRUE(w.write("bypass/pending/work", "1 allow always\n"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(*w.read(s + "/bypass"), "allow shell echo 'hi \\*'\n");
  // The same command again: decided by the rule, no request for the hostowner.
  w.fake.push({{"tool_calls", json::array({bypass_shell("c2", "echo 'hi *'")})}});
  w.fake.push({{"text", "two"}});
  ASSERT_TRUE(w.write(a + "/prompt", "again"));
  seen = World::read_until(ev, ".resolve 2 allow\n", seen);
  EXPECT_EQ(seen.find(".request 2 "), std::string::npos) << seen;
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto b = contents(w, a, "bypass");
  EXPECT_TRUE(has(b, "approved 1") && has(b, "auto-approved 2 (policy)")) << json(b).dump();
  auto tools = contents(w, a, "tool");
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[1], "hi *\n");
  // A different command still asks: the rule matches exactly its summary.
  w.fake.push({{"tool_calls", json::array({bypass_shell("c3", "echo hi x")})}});
  w.fake.push({{"text", "three"}});
  ASSERT_TRUE(w.write(a + "/prompt", "other"));
  seen = World::read_until(ev, ".request 3 ", seen);
  // A multi-line command is allowed once: no rule could match it.
  ASSERT_TRUE(w.write("bypass/pending/work", "3 deny\n"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  w.fake.push({{"tool_calls", json::array({bypass_shell("c4", "echo one\necho two")})}});
  w.fake.push({{"text", "four"}});
  ASSERT_TRUE(w.write(a + "/prompt", "lines"));
  seen = World::read_until(ev, ".request 4 ", seen);
  EXPECT_EQ(*w.read("bypass/pending/work"), "4\tmain\tshell\techo one\\necho two\n");
  EXPECT_EQ(w.write("bypass/pending/work", "4 allow always\n").ename(), "allow always: multi-line command, allowed once");
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(contents(w, a, "tool").back(), "one\ntwo\n");
  EXPECT_EQ(*w.read(s + "/bypass"), "allow shell echo 'hi \\*'\n");
  auto lines = audit_lines(w, 4);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["how"], "allow always");
  EXPECT_EQ(lines[0]["rule"], "allow shell echo 'hi \\*'");
  EXPECT_EQ(lines[1]["by"], "policy");
  EXPECT_EQ(lines[1]["how"], "session policy line 1: allow shell echo 'hi \\*'");
  EXPECT_EQ(lines[3]["ruleError"], "multi-line command");
  EXPECT_EQ(lines[3]["decision"], "allow");
}

// §7.7: the global policy and a session rule added by `allow always` are on disk when their
// writes are answered, so a kill -9 right after the reply keeps them.
TEST(Bypass, KillNineRightAfterAPolicyOrAnAllowAlwaysKeepsIt) {
  World w;
  waiting_on_request_1(w, "echo 'hi *'");
  const std::string s = "session/work";
  ASSERT_TRUE(w.write("bypass/policy", "allow shell uname -s\n"));
  ASSERT_TRUE(w.write("bypass/pending/work", "1 allow always\n"));
  w.stop_server(SIGKILL);
  w.kill_toolsrvs();
  w.start();
  EXPECT_EQ(*w.read("bypass/policy"), "allow shell uname -s\n");
  EXPECT_EQ(*w.read(s + "/bypass"), "allow shell echo 'hi \\*'\n");
}

// §7.7: when the disk takes nothing, `allow always` still approves the call and keeps its rule
// for this run, and the reply says the rule was not saved.
TEST(Bypass, AllowAlwaysOnADiskThatTakesNothingSaysItWasNotSaved) {
  World w;
  const auto a = waiting_on_request_1(w, "echo kept");
  const std::string s = "session/work";
  const std::string dir = w.data + "/sessions/" + id_of(w, s);
  std::filesystem::rename(dir, dir + ".aside");
  write_file(dir, "");  // the session's directory is a file now: every save fails
  auto answered = w.write("bypass/pending/work", "1 allow always\n");
  ASSERT_FALSE(answered);
  EXPECT_EQ(answered.ename().rfind("save: ", 0), 0u) << answered.ename();
  EXPECT_EQ(*w.read(s + "/bypass"), "allow shell echo kept\n");
  std::filesystem::remove(dir);
  std::filesystem::rename(dir + ".aside", dir);
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(contents(w, a, "tool").back(), "kept\n");
}

TEST(Bypass, PolicyRulesDecideWithNoPersonAndTheGlobalPolicyIsPersisted) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  // A headless olliesrv: known commands allowed, dangerous ones denied, everything else denied.
  const std::string policy = "# headless\nallow shell uname -s\ndeny * *secret*\nmode deny\n";
  ASSERT_TRUE(w.write("bypass/policy", policy));
  EXPECT_EQ(*w.read("bypass/policy"), policy);
  EXPECT_EQ(read_file(w.config + "/bypass.policy"), policy);  // written before the reply
  struct stat st{};
  ASSERT_EQ(::stat((w.config + "/bypass.policy").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto ev = bypass_events(w);
  w.fake.push({{"tool_calls", json::array({bypass_shell("c1", "uname -s")})}});
  w.fake.push({{"tool_calls", json::array({bypass_shell("c2", "cat secret.txt")})}});
  w.fake.push({{"tool_calls", json::array({bypass_shell("c3", "uname -a")})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  auto seen = World::read_until(ev, ".resolve 3 deny\n");
  EXPECT_EQ(seen.find(".request "), std::string::npos) << seen;
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto tools = contents(w, a, "tool");
  ASSERT_EQ(tools.size(), 3u);
  EXPECT_EQ(tools[0], "Linux\n");
  EXPECT_EQ(tools[1], "error: bypass denied\n\n[stderr]\nbypass denied\n");
  EXPECT_EQ(tools[2], "error: bypass denied\n\n[stderr]\nbypass denied\n");
  EXPECT_EQ(contents(w, a, "bypass"),
            (std::vector<std::string>{"auto-approved 1 (policy)", "auto-denied 2 (policy)", "auto-denied 3 (policy)"}));
  auto lines = audit_lines(w, 3);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["by"], "policy");
  EXPECT_EQ(lines[0]["how"], "global policy line 2: allow shell uname -s");
  EXPECT_EQ(lines[1]["how"], "global policy line 3: deny * *secret*");
  EXPECT_EQ(lines[2]["how"], "global policy mode");
  EXPECT_FALSE(lines[0].contains("who"));
  // The session policy comes first.
  ASSERT_TRUE(w.write(s + "/bypass", "allow shell uname -a\n"));
  w.fake.push({{"tool_calls", json::array({bypass_shell("c4", "uname -a")})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "again"));
  World::read_until(ev, ".resolve 4 allow\n", seen);
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_NE(contents(w, a, "tool").back().find("Linux"), std::string::npos);
}

TEST(Bypass, PolicyFilesRefuseBadLinesAndPendingIsHostownerOnly) {
  World w;
  auto s = w.session("work");
  ASSERT_TRUE(w.write("bypass/policy", "mode ask\n"));
  EXPECT_EQ(w.write("bypass/policy", "mode ask\nallow shell\n").ename(), "policy line 2: usage: allow <tool|*> <glob>");
  EXPECT_EQ(w.write("bypass/policy", "permit shell ls\n").ename(), "policy line 1: unknown directive: permit");
  EXPECT_EQ(*w.read("bypass/policy"), "mode ask\n");  // a refused write changes nothing
  const std::string hash(64, 'a');
  ASSERT_TRUE(w.write("bypass/policy", "sandbox " + hash + " /srv/proj\n"));
  EXPECT_EQ(w.write(s + "/bypass", "sandbox " + hash + " /srv/proj\n").ename(),
            "policy line 1: sandbox lines belong in the global policy");
  EXPECT_EQ(w.write(s + "/bypass", "mode sometimes\n").ename(), "policy line 1: unknown mode: sometimes");
  ASSERT_TRUE(w.write(s + "/bypass", "mode deny\n"));
  EXPECT_EQ(*w.read(s + "/bypass"), "mode deny\n");
  EXPECT_EQ(w.write("bypass/pending/work", "x allow\n").ename(), "no such request: x");
  EXPECT_EQ(w.write("bypass/pending/work", "1\n").ename(), "usage: <reqid> allow [always] | deny");
  EXPECT_EQ(w.write("bypass/pending/work", "1 allow sometimes\n").ename(), "usage: <reqid> allow [always] | deny");
  EXPECT_EQ(w.write("bypass/pending/work", "1 allow\n").ename(), "no such request: 1");
  EXPECT_EQ(w.read("bypass/pending/nosuch").ename(), "nosuch: file not found");
  // pending/ lists the sessions by name.
  auto d = w.walk("bypass/pending");
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->open(p9::OREAD));
  auto entries = d->dirread_all();
  ASSERT_TRUE(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].name, "work");
  EXPECT_EQ((*entries)[0].mode & 0777, 0600u);
  // An agent's tools cannot reach bypass/ (walking it needs x): a sandboxed call cannot answer
  // for the hostowner, nor read or change a policy.
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"},
                                            {"arguments", {{"cmd", "echo '1 allow' | ollie-9p write bypass/pending/work; "
                                                                   "ollie-9p read bypass/policy; ollie-9p read session/work/bypass"}}}}})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "escape"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto tools = contents(w, a, "tool");
  ASSERT_EQ(tools.size(), 1u);
  // Each of the three is refused: bypass/ has no x for an agent, so the walk stops at it (a
  // partial Rwalk: "file not found", §1.5 OP-80); the session's bypass file is mode 0600.
  EXPECT_NE(tools[0].find("ollie-9p: bypass/pending/work: pending: file not found\n"), std::string::npos) << tools[0];
  EXPECT_NE(tools[0].find("ollie-9p: bypass/policy: policy: file not found\n"), std::string::npos) << tools[0];
  EXPECT_NE(tools[0].find("ollie-9p: session/work/bypass: permission denied\n"), std::string::npos) << tools[0];
  EXPECT_EQ(tools[0].find("mode"), std::string::npos) << tools[0];
}

TEST(Bypass, ControlCharactersOfTheSummaryAreEscaped) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto ev = bypass_events(w);
  w.fake.push({{"tool_calls", json::array({bypass_shell("c1", "printf '\x1b[2J\\\\'\t# \r")})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  World::read_until(ev, ".request 1 ");
  EXPECT_EQ(*w.read("bypass/pending/work"), "1\tmain\tshell\tprintf '\\x1b[2J\\\\\\\\'\\t# \\r\n");
  EXPECT_TRUE(has(contents(w, a, "bypass"), "request 1: shell printf '\\x1b[2J\\\\\\\\'\\t# \\r"));
  ASSERT_TRUE(w.write("bypass/pending/work", "1 deny"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
}

TEST(Bypass, TimeoutWithdrawalAndToolServerLossEndRequests) {
  World w;
  w.restart_with({"OLLIE_TEST_BYPASS_TIMEOUT=1"});
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string sid = trimmed(w.read(s + "/id"));
  auto ev = bypass_events(w);
  // No answer within the (shortened) 300 s.
  w.fake.push({{"tool_calls", json::array({bypass_shell("c1", "echo late")})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  auto seen = World::read_until(ev, "resolve 1 deny\n");
  EXPECT_NE(seen.find("bypass." + sid + ".request 1 "), std::string::npos) << seen;
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(*w.read("bypass/pending/work"), "");
  EXPECT_TRUE(has(contents(w, a, "bypass"), "denied 1 (timeout)"));
  EXPECT_EQ(w.write("bypass/pending/work", "1 allow").ename(), "no such request: 1");
  auto lines = audit_lines(w, 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["by"], "timeout");
  // Withdrawn: the call is cancelled (ctl stop) while it waits.
  w.restart_with({});
  auto ev2 = bypass_events(w);
  w.fake.push({{"tool_calls", json::array({bypass_shell("c2", "echo never")})}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  seen = World::read_until(ev2, ".request 2 ");  // the counter survived the restart
  EXPECT_NE(seen.find(".request 2 session/work/agent/main shell"), std::string::npos) << seen;
  ASSERT_TRUE(w.rdwr(a + "/ctl", "stop"));
  seen = World::read_until(ev2, "resolve 2 deny\n", seen);
  EXPECT_NE(seen.find("resolve 2 deny\n"), std::string::npos) << seen;
  EXPECT_TRUE(has(contents(w, a, "bypass"), "denied 2 (withdrawn)"));
  EXPECT_EQ(*w.read("bypass/pending/work"), "");
  EXPECT_EQ(audit_lines(w, 2).back()["by"], "withdrawal");
  // The tool server dies while a request waits.
  ASSERT_TRUE(w.wait_state(a, "idle"));
  w.fake.push({{"tool_calls", json::array({bypass_shell("c3", "echo lost")})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  seen = World::read_until(ev2, ".request 3 ", seen);
  w.kill_toolsrvs();
  seen = World::read_until(ev2, "resolve 3 deny\n", seen);
  EXPECT_NE(seen.find("resolve 3 deny\n"), std::string::npos) << seen;
  EXPECT_TRUE(eventually([&] { return has(contents(w, a, "bypass"), "denied 3 (tool server restarted)"); }));
  EXPECT_EQ(*w.read("bypass/pending/work"), "");
  EXPECT_EQ(audit_lines(w, 3).back()["by"], "restart");
}

TEST(Bypass, TheRateLimitDeniesWhatWouldFloodTheHostowner) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto ev = bypass_events(w);
  json calls = json::array();
  for (int i = 1; i <= 7; i++)
    calls.push_back({{"id", "c" + std::to_string(i)}, {"name", "file_read"},
                     {"arguments", {{"path", "/etc/hostname"}, {"offset", i}, {"bypass", true}}}});
  w.fake.push({{"tool_calls", calls}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "flood"));
  // Five requests wait; the sixth and seventh are denied at once.
  std::string seen;
  for (int n = 0; n < 7; n++) seen = World::read_until(ev, n < 5 ? ".request " + std::to_string(n + 1) : ".resolve " + std::to_string(n + 1) + " deny\n", seen);
  EXPECT_EQ(pending_count(w, "work"), 5u) << *w.read("bypass/pending/work");
  auto b = contents(w, a, "bypass");
  EXPECT_TRUE(has(b, "rate limited: denied 6") && has(b, "rate limited: denied 7")) << json(b).dump();
  ASSERT_TRUE(w.write("bypass/pending/work", "1 deny\n2 deny\n3 deny\n4 deny\n5 deny\n"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto lines = audit_lines(w, 7);
  std::size_t limited = 0;
  for (const auto& l : lines) limited += l["by"] == "rate limit";
  EXPECT_EQ(limited, 2u);
}

TEST(Bypass, PoliciesAndTheCounterSurviveARestart) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write("bypass/policy", "allow shell echo ok\n"));
  ASSERT_TRUE(w.write(s + "/bypass", "deny shell echo no\n"));
  w.fake.push({{"tool_calls", json::array({bypass_shell("c1", "echo ok")})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return has(contents(w, a, "bypass"), "auto-approved 1 (policy)"); }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  w.stop_server(SIGTERM);
  json saved;
  for (const auto& d : std::filesystem::directory_iterator(w.data + "/sessions")) saved = json::parse(read_file(d.path().string() + "/session.json"));
  EXPECT_EQ(saved["bypass"], "deny shell echo no\n");
  EXPECT_EQ(saved["bypassCounter"], 1);
  w.start();
  EXPECT_EQ(*w.read("bypass/policy"), "allow shell echo ok\n");
  EXPECT_EQ(*w.read(s + "/bypass"), "deny shell echo no\n");
  w.fake.push({{"tool_calls", json::array({bypass_shell("c2", "echo no")})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "again"));
  ASSERT_TRUE(eventually([&] { return has(contents(w, a, "bypass"), "auto-denied 2 (policy)"); }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
}

// bypass.policy is read at start as every configuration file is: a FIFO put there (a cwd that
// holds ~/.config lets a tool do it) is refused at once, not waited on with the listener down.
TEST(Bypass, AFifoInPlaceOfThePolicyFileIsRefusedNotWaitedOn) {
  World w;
  w.stop_server(SIGTERM);
  ASSERT_EQ(::mkfifo((w.config + "/bypass.policy").c_str(), 0600), 0);
  w.start();
  EXPECT_EQ(*w.read("bypass/policy"), "");
  EXPECT_NE(w.log_text().find("bypass.policy: not a regular file; none of it applies"), std::string::npos) << w.log_text();
}

// §6.9.2: the decision comes first, then what the call does. The broker appends the decision
// block before it sends the decision to toolsrv, so the block precedes the call's result (and
// the model's next call) every time, not only when the broker wins a race. Many rounds, one
// call each: a late block shows as a `bypass` block after its `tool` block.
TEST(Bypass, TheDecisionBlockPrecedesTheCallsResult) {
  World w;
  auto ev = bypass_events(w);
  constexpr int rounds = 8, asked = 5;  // asked: §6.9.2's rate limit
  const auto push_rounds = [&](const std::string& prefix) {
    for (int i = 1; i <= rounds; i++)
      w.fake.push({{"tool_calls", json::array({bypass_shell(prefix + std::to_string(i), "echo " + std::to_string(i))})}});
    w.fake.push({{"text", "done"}});
  };
  // Denied by policy.
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write(s + "/bypass", "deny shell *\n"));
  push_rounds("p");
  ASSERT_TRUE(w.write(a + "/prompt", "policy"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  std::vector<std::string> want;
  for (int n = 1; n <= rounds; n++)
    for (const std::string& b : {std::string("call"), "bypass auto-denied " + std::to_string(n) + " (policy)", std::string("tool")})
      want.push_back(b);
  EXPECT_EQ(call_sequence(w, a), want);
  // Denied by the hostowner, in two sessions: each asks the hostowner 5 times (the rate limit),
  // then is denied by the rate limit.
  std::string seen;
  for (const std::string name : {"one", "two"}) {
    auto s2 = w.session(name);
    auto a2 = w.agent(s2, "main");
    push_rounds(name);
    ASSERT_TRUE(w.write(a2 + "/prompt", "hostowner"));
    for (int n = 1; n <= asked; n++) {
      seen = World::read_until(ev, "/" + name + "/agent/main shell\n", seen);
      ASSERT_NE(seen.find(".request " + std::to_string(n) + " session/" + name + "/"), std::string::npos) << seen;
      ASSERT_TRUE(w.write("bypass/pending/" + name, std::to_string(n) + " deny\n"));
      seen.clear();
    }
    ASSERT_TRUE(w.wait_state(a2, "idle"));
    want.clear();
    for (int n = 1; n <= rounds; n++) {
      const std::string i = std::to_string(n);
      want.push_back("call");
      if (n <= asked) {
        want.push_back("bypass request " + i + ": shell echo " + i);
        want.push_back("bypass denied " + i);
      } else {
        want.push_back("bypass rate limited: denied " + i);
      }
      want.push_back("tool");
    }
    EXPECT_EQ(call_sequence(w, a2), want) << name;
  }
  // Denied by the hostowner, several at once: the calls of a batch wait together and one write
  // answers them all.
  auto s3 = w.session("three");
  auto a3 = w.agent(s3, "main");
  json calls = json::array();
  for (int i = 1; i <= asked; i++)
    calls.push_back({{"id", "b" + std::to_string(i)}, {"name", "file_read"},
                     {"arguments", {{"path", "/etc/hostname"}, {"offset", i}, {"bypass", true}}}});
  w.fake.push({{"tool_calls", calls}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a3 + "/prompt", "batch"));
  ASSERT_TRUE(eventually([&] { return pending_count(w, "three") == asked; }));
  std::string answer;
  for (int n = 1; n <= asked; n++) answer += std::to_string(n) + " deny\n";
  ASSERT_TRUE(w.write("bypass/pending/three", answer));
  ASSERT_TRUE(w.wait_state(a3, "idle"));
  // The results come in call order, each as soon as it is there: every decision of the write
  // precedes the first of them.
  const auto got = call_sequence(w, a3);
  const auto at = [&](const std::string& b) { return std::find(got.begin(), got.end(), b) - got.begin(); };
  for (int n = 1; n <= asked; n++) EXPECT_LT(at("bypass denied " + std::to_string(n)), at("tool")) << json(got).dump();
}

// §2.3: a reqid is a canonical decimal. `01` is not request 1: a mistyped or padded number
// names no request, so it cannot resolve a live one by accident.
TEST(Bypass, OnlyACanonicalDecimalNamesARequest) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto ev = bypass_events(w);
  w.fake.push({{"tool_calls", json::array({bypass_shell("c1", "echo waiting")})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  World::read_until(ev, ".request 1 ");
  for (const std::string id : {"01", "001", "00", "0", "+1", "-1", "1.0", "0x1", "1e0", "18446744073709551617",
                               "000000000000000000001"})
    for (const std::string verb : {" allow", " allow always", " deny"})
      EXPECT_EQ(w.write("bypass/pending/work", id + verb + "\n").ename(), "no such request: " + id) << id << verb;
  // Nothing was resolved: the request still waits, and its own number answers it.
  EXPECT_EQ(*w.read("bypass/pending/work"), "1\tmain\tshell\techo waiting\n");
  EXPECT_EQ(*w.read(s + "/bypass"), "");
  ASSERT_TRUE(w.write("bypass/pending/work", "1 deny\n"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(contents(w, a, "bypass"), (std::vector<std::string>{"request 1: shell echo waiting", "denied 1"}));
}
