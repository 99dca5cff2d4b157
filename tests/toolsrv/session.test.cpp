// Whole calls through a Session: requests, ctl, environment, cwd, tool results, tools and info.

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "toolsrv/landlock.hpp"
#include "world.hpp"

namespace toolsrv::test {
namespace {

using namespace std::chrono_literals;

template <class F>
bool eventually_true(F ok, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!ok()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

std::string env_of(const std::string& env_dump, const std::string& key) {
  const auto at = ("\n" + env_dump).find("\n" + key + "=");
  if (at == std::string::npos) return "<unset>";
  const auto start = at + key.size() + 1;
  return env_dump.substr(start, env_dump.find('\n', start) - start);
}

TEST(CallRequest, Parsing) {
  auto r = parse_call_request("tool=t\nagent=a\ntimeout=0\nbypass=true\nauth=abc\n\n{\"x\": 1}\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(*r->timeout, 0);
  EXPECT_TRUE(r->bypass);
  EXPECT_EQ(r->auth, "abc");
  EXPECT_EQ(r->args_text, "{\"x\": 1}\n");
  EXPECT_EQ(parse_call_request("agent=a\n\n{}").ename(), "missing tool");
  EXPECT_EQ(parse_call_request("tool=t\n\n{}").ename(), "missing agent");
  EXPECT_EQ(parse_call_request("tool=t\nagent=a\n\n[1]").ename(), "invalid args: not a JSON object");
  EXPECT_EQ(parse_call_request("tool=t\nagent=a\n\n{").ename(), "invalid args: not valid JSON");
  EXPECT_EQ(parse_call_request("tool=t\nagent=a\ntimeout=x\n\n{}").ename(), "invalid timeout: x");
  EXPECT_EQ(parse_call_request("tool=t\nagent=a\ncolour=red\n\n{}").ename(), "bad header: colour=red");
  EXPECT_EQ(parse_call_request("tool=t\nagent=a\nnonsense\n\n{}").ename(), "bad header: nonsense");
}

TEST(Session, CtlErrors) {
  Fixture f;
  auto& s = *f.session;
  EXPECT_EQ(s.set_env("1BAD", "x").ename(), "invalid env name: 1BAD");
  EXPECT_EQ(s.set_cwd("rel").ename(), "cwd must be absolute: rel");
  EXPECT_EQ(s.set_cwd("/no/such/dir").ename(), "cwd: /no/such/dir: not a directory");
  EXPECT_EQ(s.set_agent_cwd("a1", "/etc/hostname").ename(), "cwd: /etc/hostname: not a directory");
  EXPECT_EQ(s.load("a1", {"echo", "noexec"}).ename(),
            "invalid tool: noexec: no executable and no cmd: " + fixture_tools + "/noexec is not an executable file");
  EXPECT_EQ(s.tools("a1"), "[]\n");
  EXPECT_EQ(s.load("a1", {"unavailable"}).ename(), "tool not available on this host: unavailable");
}

TEST(Session, ToolNotLoadedIsARequestError) {
  Fixture f;
  EXPECT_EQ(f.run("tool=echo\nagent=a1\n\n{}"), "Rerror tool not loaded: echo");
}

TEST(Session, ToolsListing) {
  Fixture f;
  f.load("echo");
  f.load("shell");
  const auto list = nlohmann::json::parse(f.session->tools("a1"));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["name"], "echo");
  EXPECT_EQ(list[1]["name"], "shell");
  const auto catalog = nlohmann::json::parse(f.session->tools("*"));
  EXPECT_GE(catalog.size(), 10u);
  EXPECT_EQ(f.session->tools("nobody"), "[]\n");
  // Asked again, the same list; a tool loaded since is in the next one.
  EXPECT_EQ(nlohmann::json::parse(f.session->tools("a1")), list);
  f.load("flood");
  EXPECT_EQ(nlohmann::json::parse(f.session->tools("a1")).size(), 3u);
}

TEST(Session, EchoReplyHasBothStreams) {
  Fixture f;
  f.load("echo");
  const auto r = f.run("tool=echo\nagent=a1\n\n{\"hello\":\"world\"}");
  EXPECT_EQ(r, "pid=1\nstatus=exited\nexit=0\nstdout=17\nstderr=10\n\n{\"hello\":\"world\"}to stderr\n");
}

TEST(Session, EnvironmentOfASandboxedTool) {
  Fixture f;
  f.load("shell");
  ASSERT_TRUE(f.session->set_env("SESSION_VAR", "with blanks  kept"));
  ::setenv("TOOLSRV_TEST_SECRET_NOT_LISTED", "leak", 1);
  const auto r = f.run("tool=shell\nagent=a1\nauth=0123abcd\n\n{\"cmd\":\"env\"}");
  const auto env = body_stdout(r);
  EXPECT_EQ(env_of(env, "OLLIE_AGENT_ID"), "a1");
  EXPECT_EQ(env_of(env, "OLLIE_UNAME"), "a1");
  EXPECT_EQ(env_of(env, "OLLIE_AUTH"), "0123abcd");
  EXPECT_EQ(env_of(env, "OLLIE_TOOLS_PATH"), fixture_tools);
  EXPECT_EQ(env_of(env, "SESSION_VAR"), "with blanks  kept");
  EXPECT_EQ(env_of(env, "TOOLSRV_TEST_SECRET_NOT_LISTED"), "<unset>");
  EXPECT_EQ(env_of(env, "HOME"), world().home);
  EXPECT_EQ(env_of(env, "TMPDIR").rfind(world().root + "/run/ollie/tmp/test-", 0), 0u);
  EXPECT_EQ(env_of(env, "PATH").rfind(fixture_tools + ":", 0), 0u);
  EXPECT_EQ(env_of(env, "GIT_CONFIG_COUNT"), "1");
  EXPECT_EQ(env_of(env, "GIT_CONFIG_KEY_0"), "core.fsmonitor");
  EXPECT_EQ(env_of(env, "GIT_CONFIG_VALUE_0"), "false");
  // An inherited GIT_CONFIG_COUNT keeps its entries; ours comes after them.
  ASSERT_TRUE(f.session->set_env("GIT_CONFIG_COUNT", "2"));
  const auto env2 = body_stdout(f.run("tool=shell\nagent=a1\n\n{\"cmd\":\"env\"}"));
  EXPECT_EQ(env_of(env2, "GIT_CONFIG_COUNT"), "3");
  EXPECT_EQ(env_of(env2, "GIT_CONFIG_KEY_2"), "core.fsmonitor");
  // A count no environment holds is not one: ours are the only entries (LONG_MAX + 1 overflowed).
  ASSERT_TRUE(f.session->set_env("GIT_CONFIG_COUNT", "9223372036854775807"));
  const auto r3 = f.run("tool=shell\nagent=a1\n\n{\"cmd\":\"env\"}");
  EXPECT_EQ(header(r3, "status"), "exited") << r3;
  const auto env3 = body_stdout(r3);
  EXPECT_EQ(env_of(env3, "GIT_CONFIG_COUNT"), "1");
  EXPECT_EQ(env_of(env3, "GIT_CONFIG_KEY_0"), "core.fsmonitor");
}

TEST(Session, CwdFromAgentOverrideNeverFromRequest) {
  Fixture f;
  f.load("shell");
  EXPECT_EQ(body_stdout(f.sh("pwd")), f.cwd + "\n");
  const auto other = temp_dir("agentcwd");
  ASSERT_TRUE(f.session->set_agent_cwd("a1", other));
  EXPECT_EQ(body_stdout(f.sh("pwd")), other + "\n");
  EXPECT_EQ(f.session->info("a1").find("cwd=" + other + "\n") != std::string::npos, true);
  ASSERT_TRUE(f.session->set_agent_cwd("a1", std::nullopt));
  EXPECT_EQ(body_stdout(f.sh("pwd")), f.cwd + "\n");
}

TEST(Session, InvalidJsonOutputIsPassedThrough) {
  Fixture f;
  f.load("badjson");
  const auto r = f.run("tool=badjson\nagent=a1\n\n{}");
  EXPECT_EQ(header(r, "status"), "exited");
  EXPECT_EQ(body_stdout(r), "{\"content\": [oops\n");
}

TEST(Session, ToolThatBecameNonExecutableFailsClearly) {
  const auto dir = temp_dir("tools");
  write_file(dir + "/t", "#!/bin/sh\necho hi\n", 0755);
  write_file(dir + "/t.meta", "{\"description\": \"t\"}\n");
  Fixture f(default_policy(), 300s, dir);
  f.load("t");
  ::chmod((dir + "/t").c_str(), 0644);
  const auto r = f.run("tool=t\nagent=a1\n\n{}");
  EXPECT_EQ(header(r, "status"), "failed");
  EXPECT_EQ(body_stderr(r), "invalid tool: t: no executable and no cmd: " + dir + "/t is not an executable file\n");
}

// `ln -s ~/src/mytool/mytool ~/.config/ollie/tools/`: the program a tool directory links to runs
// (the link is the hostowner's, in a directory the model cannot write); nothing else of its
// directory is granted.
TEST(Session, ALinkedExecutableRunsAndOnlyItIsGranted) {
  const auto dir = temp_dir("tools"), elsewhere = temp_dir("mytool");
  write_file(elsewhere + "/mytool", "#!/bin/sh\necho linked\ncat \"$(dirname \"$(readlink -f \"$0\")\")/secret\"\n", 0755);
  write_file(elsewhere + "/secret", "not for the tool\n");
  std::filesystem::create_symlink(elsewhere + "/mytool", dir + "/t");
  write_file(dir + "/t.meta", "{\"description\": \"t\"}\n");
  Fixture f(default_policy(), 300s, dir);
  f.load("t");
  const auto r = f.run("tool=t\nagent=a1\n\n{}");
  EXPECT_EQ(body_stdout(r), "linked\n") << r;
  EXPECT_NE(body_stderr(r).find("Permission denied"), std::string::npos) << r;

  // A link in a tool directory the model can write (inside the cwd) could be its own: it grants
  // nothing, so a planted `t -> /some/secret/program` does not open that file to the call.
  const auto planted = f.cwd + "/tools";
  std::filesystem::create_directories(planted);
  std::filesystem::create_symlink(elsewhere + "/mytool", planted + "/t");
  write_file(planted + "/t.meta", "{\"description\": \"t\"}\n");
  auto c = SessionConfig::from_environment(f.config, f.cwd, "/usr/bin");
  c.session_id = "planted";
  c.tmpdir = world().root + "/run/ollie/tmp/planted";
  c.tools_path = planted;
  Session in_cwd(c);
  ASSERT_TRUE(in_cwd.load("a1", {"t"}));
  std::promise<std::string> q;
  ASSERT_TRUE(in_cwd.call(*parse_call_request("tool=t\nagent=a1\n\n{}"), [&](std::string r) { q.set_value(r); }));
  const auto refused = q.get_future().get();
  EXPECT_EQ(body_stdout(refused), "") << refused;
  EXPECT_EQ(body_stderr(refused), "exec " + planted + "/t: Permission denied\n") << refused;
}

TEST(Session, ToolDeletedAfterLoadFailsClearly) {
  const auto dir = temp_dir("tools");
  write_file(dir + "/t", "#!/bin/sh\necho hi\n", 0755);
  write_file(dir + "/t.meta", "{\"description\": \"t\"}\n");
  Fixture f(default_policy(), 300s, dir);
  f.load("t");
  Session& s = *f.session;
  auto run = [&] { return f.run("tool=t\nagent=a1\n\n{}"); };
  EXPECT_EQ(body_stdout(run()), "hi\n");
  // Calls use the tool as load found it, without rescanning, but its executable is checked again.
  std::filesystem::remove(dir + "/t");
  std::filesystem::remove(dir + "/t.meta");
  auto r = run();
  EXPECT_EQ(header(r, "status"), "failed");
  EXPECT_EQ(body_stderr(r), "invalid tool: t: no executable and no cmd: " + dir + "/t is not an executable file\n");
  // Once a rescan (tools) no longer finds it, the call names it unknown.
  EXPECT_EQ(s.tools("a1"), "[]\n");
  r = run();
  EXPECT_EQ(header(r, "status"), "failed");
  EXPECT_EQ(body_stderr(r), "unknown tool: t\n");
  // Back again (a .meta saved by rename, a checkout): still loaded, the agent's next listing
  // finds it, with no load (§7.2.2: hot reload); it stayed gone until a full rescan.
  write_file(dir + "/t", "#!/bin/sh\necho again\n", 0755);
  write_file(dir + "/t.meta", "{\"description\": \"t\"}\n");
  EXPECT_NE(s.tools("a1").find("\"name\":\"t\""), std::string::npos) << s.tools("a1");
  EXPECT_EQ(body_stdout(run()), "again\n");
}

TEST(Session, MetaEditTakesEffectWhenToolsAreListed) {
  const auto dir = temp_dir("tools");
  write_file(dir + "/t.meta", "{\"description\": \"t\", \"cmd\": \"echo v1\"}\n");
  Fixture f(default_policy(), 300s, dir);
  f.load("t");
  Session& s = *f.session;
  auto run = [&] { return body_stdout(f.run("tool=t\nagent=a1\n\n{}")); };
  EXPECT_EQ(run(), "v1\n");
  EXPECT_NE(s.tools("a1").find("\"description\":\"t\""), std::string::npos);
  write_file(dir + "/t.meta", "{\"description\": \"t2\", \"cmd\": \"echo v2\"}\n");
  EXPECT_NE(s.tools("a1").find("\"description\":\"t2\""), std::string::npos);
  EXPECT_EQ(run(), "v2\n");
}

TEST(Session, VariantsTestTheEnvironmentOfSandboxedToolsAndFollowCtlEnv) {
  // §7.2.3: `env`/`nenv` see §6.6's environment (its additions too), and a session variable set
  // later chooses again.
  Fixture f;
  const auto dir = temp_dir("tools");
  write_file(dir + "/t.meta", R"({"description": "t", "variants": [
    {"when": {"env": "FLAVOUR=b"}, "cmd": "echo b"},
    {"when": {"env": ["OLLIE_TOOLS_PATH=)" + dir + R"(", "TMPDIR", "OLLIE_SESSION_ID=variants"]}, "cmd": "echo additions"}]}
)");
  auto c = SessionConfig::from_environment(f.config, f.cwd, "/usr/bin");
  c.session_id = "variants";
  c.tmpdir = world().root + "/run/ollie/tmp/variants";
  c.tools_path = dir;
  Session s(c);
  ASSERT_TRUE(s.load("a1", {"t"}));
  auto run = [&] {
    std::promise<std::string> p;
    EXPECT_TRUE(s.call(*parse_call_request("tool=t\nagent=a1\n\n{}"), [&](std::string r) { p.set_value(r); }));
    return body_stdout(p.get_future().get());
  };
  EXPECT_EQ(run(), "additions\n");
  ASSERT_TRUE(s.set_env("FLAVOUR", "b"));
  EXPECT_NE(s.tools("a1").find("\"name\":\"t\""), std::string::npos);
  EXPECT_EQ(run(), "b\n");
  ASSERT_TRUE(s.set_env("FLAVOUR", ""));
  EXPECT_EQ(run(), "additions\n");
}

TEST(Session, StrayChildReturnsAtOnce) {
  Fixture f;
  f.load("stray");
  const auto start = std::chrono::steady_clock::now();
  const auto r = f.run("tool=stray\nagent=a1\n\n{}");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
  EXPECT_EQ(body_stdout(r), "started\n");
}

TEST(Session, HundredMegabyteToolIsCapped) {
  Fixture f;
  f.load("flood");
  const auto r = f.run("tool=flood\nagent=a1\n\n{}", 120s);
  EXPECT_EQ(header(r, "status"), "exited");
  const std::size_t omitted = 104857600 - output_head_cap - output_tail_cap;
  const std::string line = "\n[\u2026 " + std::to_string(omitted) + " bytes omitted \u2026]\n";
  EXPECT_EQ(header(r, "stdout"), std::to_string(output_head_cap + line.size() + output_tail_cap));
}

TEST(Session, TimeoutHeaderAndToolDefault) {
  Fixture f;
  f.load("shell");
  const auto r = f.sh("sleep 5", "timeout=1\n");
  EXPECT_EQ(header(r, "status"), "timeout");
}

TEST(Session, BackgroundCallGivesPidAtOnce) {
  Fixture f;
  f.load("shell");
  std::promise<p9::Result<int>> p;
  ASSERT_TRUE(f.session->call_background(*parse_call_request("tool=shell\nagent=a1\ntimeout=1\n\n{\"cmd\":\"sleep 2; echo done\"}"),
                                         [&](p9::Result<int> r) { p.set_value(std::move(r)); }));
  auto fut = p.get_future();
  ASSERT_EQ(fut.wait_for(2s), std::future_status::ready);
  const auto pid = fut.get();
  ASSERT_TRUE(pid);
  auto proc = f.session->processes().find(*pid);
  ASSERT_TRUE(proc);
  EXPECT_TRUE(proc->background());
  EXPECT_FALSE(proc->finished());
  // Background processes have no timeout.
  while (!proc->finished()) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(proc->wait_text().find("status=exited\nexit=0\n"), 6u) << proc->wait_text();
  EXPECT_EQ(proc->read_out(0, 100).data, "done\n");
}

TEST(Session, CancelKillsARunningCall) {
  Fixture f;
  f.load("shell");
  std::promise<std::string> p;
  auto call = f.session->call(*parse_call_request("tool=shell\nagent=a1\n\n{\"cmd\":\"sleep 30\"}"),
                              [&](std::string r) { p.set_value(r); });
  ASSERT_TRUE(call);
  while ((*call)->pid() == 0) std::this_thread::sleep_for(10ms);
  (*call)->cancel();
  const auto r = p.get_future().get();
  EXPECT_EQ(header(r, "status"), "signaled");
  EXPECT_EQ(header(r, "signal"), "9");
}

TEST(Session, ForgetKillsTheAgentsProcesses) {
  Fixture f;
  f.load("shell");
  std::promise<p9::Result<int>> p;
  ASSERT_TRUE(f.session->call_background(*parse_call_request("tool=shell\nagent=a1\n\n{\"cmd\":\"sleep 30\"}"),
                                         [&](p9::Result<int> r) { p.set_value(std::move(r)); }));
  const auto pid = p.get_future().get();
  ASSERT_TRUE(pid);
  f.session->forget("a1");
  EXPECT_EQ(f.session->processes().find(*pid), nullptr);
  EXPECT_EQ(f.session->tools("a1"), "[]\n");
}

TEST(Session, InfoAndStat) {
  Fixture f;
  const auto info = f.session->info("");
  EXPECT_EQ(info.rfind("os=linux\narch=", 0), 0u);
  EXPECT_NE(info.find("\nlandlock=" + std::to_string(landlock_abi()) + "\n"), std::string::npos);
  EXPECT_NE(info.find("\ncwd=" + f.cwd + "\ngit=false\n"), std::string::npos);
  std::filesystem::create_directories(f.cwd + "/.git");
  std::filesystem::create_directories(f.cwd + "/sub");
  ASSERT_TRUE(f.session->set_agent_cwd("a1", f.cwd + "/sub"));
  EXPECT_NE(f.session->info("a1").find("git=true"), std::string::npos);
  write_file(f.cwd + "/sub/f.txt", "12345");
  const auto st = f.session->stat_paths("a1", {"f.txt", "missing", f.cwd + "/sub/f.txt"});
  EXPECT_EQ(st.substr(0, 12), "f.txt\ttrue\t1");
  EXPECT_NE(st.find("\t5\nmissing\tfalse\t-\t-\n" + f.cwd + "/sub/f.txt\ttrue\t"), std::string::npos) << st;
}

// ---- invalid UTF-8 ----

// A tool file name that is not UTF-8 is listed (as invalid) with the bytes replaced, not thrown.
TEST(Session, ToolListingWithInvalidUtf8NameIsReplaced) {
  const auto tools = temp_dir("utf8tools");
  write_file(tools + "/bad\xff.meta", "{\"description\": \"x\"}\n");
  Fixture f(default_policy(), 300s, tools);
  const auto list = nlohmann::json::parse(f.session->tools("*"));
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["name"], "bad\xef\xbf\xbd");
}

// ---- leaks ----

// Once the reply of a foreground call was handed over, the process keeps one copy of its output
// (for `out`), not its separate stdout and stderr captures besides.
TEST(Session, CollectedCallKeepsOneCopyOfItsOutput) {
  Fixture f;
  f.load("shell");
  const auto r = f.sh("head -c 300000 /dev/zero; head -c 1000 /dev/zero >&2");
  ASSERT_EQ(header(r, "stdout"), "300000") << r.substr(0, 200);
  auto proc = f.session->processes().find(std::stoi(header(r, "pid")));
  ASSERT_TRUE(proc);
  EXPECT_EQ(proc->reply(), proc->wait_text() + "\n") << "the separate captures are still held";
  EXPECT_EQ(proc->wait_text(), r.substr(0, r.find("\n\n") + 1));
  EXPECT_NE(proc->stat_text().find("\noutput=301000\n"), std::string::npos);
  EXPECT_EQ(proc->read_out(0, 400000).data.size(), 301000u);
}

// Starts a foreground `sleep 30` of a1 (scope global: it holds the global lock) and waits until
// it runs.
std::shared_ptr<Call> hold_global_lock(Fixture& f, std::promise<std::string>& done) {
  auto call = f.session->call(*parse_call_request("tool=shell\nagent=a1\n\n{\"cmd\":\"sleep 30\"}"),
                              [&done](std::string r) { done.set_value(r); });
  if (!call) return nullptr;
  while ((*call)->pid() == 0) std::this_thread::sleep_for(10ms);
  return *call;
}

// `forget a2` withdraws a2's calls that wait for a lock or a bypass answer: they end at once and
// never start, even once the lock is free.
TEST(Session, ForgetCancelsQueuedLockWaitsAndBypassRequests) {
  Fixture f;
  f.load("shell");
  ASSERT_TRUE(f.session->load("a2", {"shell"}));
  std::promise<std::string> held_done, queued, asked;
  auto held = hold_global_lock(f, held_done);
  ASSERT_TRUE(held);
  const auto marker = f.cwd + "/ran";
  auto reader = f.session->bypass().open_pending();
  ASSERT_TRUE(f.session->call(*parse_call_request("tool=shell\nagent=a2\n\n{\"cmd\":\"touch " + marker + "\"}"),
                              [&](std::string r) { queued.set_value(r); }));
  ASSERT_TRUE(f.session->call(*parse_call_request("tool=shell\nagent=a2\nbypass=true\n\n{\"cmd\":\"touch " + marker + "\"}"),
                              [&](std::string r) { asked.set_value(r); }));
  EXPECT_EQ(f.session->locks().waiting(), 1u);
  f.session->forget("a2");
  auto q = queued.get_future();
  auto a = asked.get_future();
  ASSERT_EQ(q.wait_for(5s), std::future_status::ready);
  ASSERT_EQ(a.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(header(q.get(), "status"), "failed");
  EXPECT_EQ(header(a.get(), "status"), "denied");
  EXPECT_EQ(f.session->locks().waiting(), 0u);
  EXPECT_NE(f.session->bypass().read_pending(reader).find("\"reason\":\"withdrawn\""), std::string::npos);
  held->cancel();
  held_done.get_future().get();
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(std::filesystem::exists(marker));
}

// A session that goes (toolsrv stopping) with a call running under the global lock and another
// queued behind it: the kill of the first releases the lock, whose next waiter then asks the
// process table for a start from the table's own thread. It fails with `toolsrv is stopping`;
// it reached the table through a pointer the session's destructor had already nulled (UBSan:
// member call on null pointer of type 'ProcessTable').
TEST(Session, GoingWithACallQueuedBehindARunningOneFailsTheQueuedCall) {
  auto f = std::make_unique<Fixture>();
  f->load("shell");
  std::promise<std::string> held_done, queued;
  auto held = hold_global_lock(*f, held_done);
  ASSERT_TRUE(held);
  const auto marker = f->cwd + "/ran";
  ASSERT_TRUE(f->session->call(*parse_call_request("tool=shell\nagent=a1\n\n{\"cmd\":\"touch " + marker + "\"}"),
                               [&](std::string r) { queued.set_value(r); }));
  EXPECT_EQ(f->session->locks().waiting(), 1u);
  f->session.reset();
  auto q = queued.get_future();
  ASSERT_EQ(q.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(header(q.get(), "status"), "failed");
  EXPECT_FALSE(std::filesystem::exists(marker));
  held_done.get_future().get();
}

// Calls queued behind a held lock while another thread forgets their agent: whenever the cancel
// lands (before the call has its lock ticket or after), no waiter is left in the queue.
TEST(Session, ForgetRacingNewCallsLeavesNoLockWaiter) {
  Fixture f;
  f.load("shell");
  std::promise<std::string> held_done;
  auto held = hold_global_lock(f, held_done);
  ASSERT_TRUE(held);
  constexpr int calls = 300;
  std::atomic<int> ended{0};
  std::atomic<bool> stop{false};
  std::thread forgetter([&] {
    while (!stop) f.session->forget("a2");
  });
  for (int i = 0; i < calls; ++i) {
    (void)f.session->load("a2", {"shell"});  // fails while forgotten only if not loaded: it is a rescan
    auto req = parse_call_request("tool=shell\nagent=a2\n\n{\"cmd\":\"true\"}");
    auto call = f.session->call(*req, [&](std::string) { ++ended; });
    if (!call) ++ended;  // forgotten before the call: tool not loaded
  }
  stop = true;
  forgetter.join();
  f.session->forget("a2");
  EXPECT_EQ(f.session->locks().waiting(), 0u);
  EXPECT_TRUE(eventually_true([&] { return ended == calls; }));
  held->cancel();
  held_done.get_future().get();
}

}  // namespace
}  // namespace toolsrv::test
