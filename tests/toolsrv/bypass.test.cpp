// Bypass: pending lines, allow, deny, timeout, withdrawal; and what an allowed call may do.

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <thread>

#include "toolsrv/bypass.hpp"
#include "world.hpp"

namespace toolsrv::test {
namespace {

using namespace std::chrono_literals;

TEST(BypassBroker, DefaultTimeoutIsFiveMinutes) { EXPECT_EQ(bypass_timeout_default, 300s); }

TEST(BypassBroker, PendingAllowDeny) {
  BypassBroker b;
  std::optional<BypassDecision> d1, d2;
  b.request("a1", "shell", {{"cmd", "ls"}}, "/w", false, [&](BypassDecision d) { d1 = d; });
  auto reader = b.open_pending();
  b.request("a1", "shell", {{"cmd", "rm"}}, "/w", true, [&](BypassDecision d) { d2 = d; });
  EXPECT_EQ(b.read_pending(reader),
            "{\"id\":\"1\",\"agent\":\"a1\",\"tool\":\"shell\",\"args\":{\"cmd\":\"ls\"},\"cwd\":\"/w\",\"background\":false}\n"
            "{\"id\":\"2\",\"agent\":\"a1\",\"tool\":\"shell\",\"args\":{\"cmd\":\"rm\"},\"cwd\":\"/w\",\"background\":true}\n");  // §6.9.1's order
  EXPECT_EQ(b.read_pending(reader), "");
  EXPECT_TRUE(b.resolve("1 allow\n2 deny\n"));
  ASSERT_TRUE(d1 && d2);
  EXPECT_TRUE(d1->allowed);
  EXPECT_FALSE(d2->allowed);
  EXPECT_EQ(b.resolve("1 allow").ename(), "no such request: 1");
  EXPECT_EQ(b.resolve("x").ename(), "bad resolve line: x");
  EXPECT_EQ(b.resolve("3 maybe").ename(), "bad resolve line: 3 maybe");
  // A new reader sees nothing resolved.
  auto late = b.open_pending();
  EXPECT_EQ(b.read_pending(late), "");
}

TEST(BypassBroker, TimeoutDeniesAndSaysSo) {
  BypassBroker b(1s);
  std::promise<BypassDecision> p;
  auto reader = b.open_pending();
  b.request("a1", "shell", {{"cmd", "x"}}, "/w", false, [&](BypassDecision d) { p.set_value(d); });
  auto f = p.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  const auto d = f.get();
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "timeout");
  const auto lines = b.read_pending(reader);
  EXPECT_NE(lines.find("{\"id\":\"1\",\"resolved\":\"deny\",\"reason\":\"timeout\"}\n"), std::string::npos) << lines;
}

TEST(BypassBroker, WithdrawnRequestIsReported) {
  BypassBroker b;
  bool called = false;
  auto reader = b.open_pending();
  const auto id = b.request("a1", "t", nlohmann::json::object(), "/w", false, [&](BypassDecision) { called = true; });
  EXPECT_TRUE(b.withdraw(id));
  EXPECT_FALSE(b.withdraw(id));
  EXPECT_FALSE(called);
  EXPECT_NE(b.read_pending(reader).find("\"reason\":\"withdrawn\""), std::string::npos);
}

// Resolves the next pending request with `verb` once it appears.
void resolve_next(Session& s, const std::string& verb) {
  auto reader = s.bypass().open_pending();
  for (int i = 0; i < 500; ++i) {
    const auto text = s.bypass().read_pending(reader);
    if (!text.empty()) {
      const auto j = nlohmann::json::parse(text.substr(0, text.find('\n')));
      ASSERT_TRUE(s.bypass().resolve(j["id"].get<std::string>() + " " + verb));
      return;
    }
    std::this_thread::sleep_for(10ms);
  }
  FAIL() << "no pending request";
}

TEST(BypassCall, AllowedRunsUnconfined) {
  Fixture f;
  f.load("shell");
  const auto outside = "/tmp/toolsrv-bypass-" + std::to_string(::getpid());
  std::thread resolver([&] { resolve_next(*f.session, "allow"); });
  const auto r = f.sh("echo x > " + outside + " && echo wrote; echo $PATH", "bypass=true\n");
  resolver.join();
  EXPECT_EQ(header(r, "status"), "exited") << r;
  EXPECT_EQ(body_stdout(r).substr(0, 6), "wrote\n") << r;
  EXPECT_EQ(body_stdout(r).find(fixture_tools), std::string::npos) << "a bypass call gets no tool dirs on PATH";
  EXPECT_TRUE(std::filesystem::exists(outside));
  std::filesystem::remove(outside);
}

TEST(BypassCall, DeniedRunsNothing) {
  Fixture f;
  f.load("shell");
  const auto marker = f.cwd + "/ran";
  std::thread resolver([&] { resolve_next(*f.session, "deny"); });
  const auto r = f.sh("touch " + marker, "bypass=true\n");
  resolver.join();
  EXPECT_EQ(header(r, "status"), "denied");
  EXPECT_EQ(body_stderr(r), "bypass denied\n");
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(BypassCall, TimeoutDenies) {
  Fixture f(default_policy(), 1s);
  f.load("shell");
  const auto r = f.sh("true", "bypass=true\n");
  EXPECT_EQ(header(r, "status"), "denied");
  EXPECT_EQ(body_stderr(r), "bypass denied: no answer within 1 s\n");
}

TEST(BypassCall, BackgroundDeniedIsAnError) {
  Fixture f;
  f.load("shell");
  auto req = parse_call_request("tool=shell\nagent=a1\nbypass=true\n\n{\"cmd\":\"true\"}");
  ASSERT_TRUE(req);
  std::promise<p9::Result<int>> p;
  auto fut = p.get_future();
  std::thread resolver([&] { resolve_next(*f.session, "deny"); });
  ASSERT_TRUE(f.session->call_background(*req, [&](p9::Result<int> r) { p.set_value(std::move(r)); }));
  resolver.join();
  const auto r = fut.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "bypass denied");
}

TEST(BypassCall, ToolInsideWritablePathRefused) {
  Fixture f;
  // A tools directory inside the cwd ({CWD} is rwx): the model could have planted this tool.
  write_file(f.cwd + "/tools/planted", "#!/bin/sh\necho planted\n", 0755);
  write_file(f.cwd + "/tools/planted.meta", "{\"description\": \"planted\"}\n");
  auto c = SessionConfig::from_environment(f.config, f.cwd, "/usr/bin");
  c.session_id = "bypass-planted";
  c.tmpdir = world().root + "/run/ollie/tmp/bypass-planted";
  c.tools_path = f.cwd + "/tools:" + fixture_tools;
  Session s(c);
  ASSERT_TRUE(s.load("a1", {"planted"}));
  auto req = parse_call_request("tool=planted\nagent=a1\nbypass=true\n\n{}");
  std::promise<std::string> p;
  ASSERT_TRUE(s.call(*req, [&](std::string r) { p.set_value(r); }));
  const auto r = p.get_future().get();
  EXPECT_EQ(header(r, "status"), "denied");
  EXPECT_EQ(body_stderr(r), "bypass refused: tool inside a writable path: " + f.cwd + "/tools/planted\n");
  // Sandboxed, it still runs, but its directory is not on PATH.
  req = parse_call_request("tool=shell\nagent=a1\n\n{\"cmd\":\"echo $PATH\"}");
  ASSERT_TRUE(s.load("a1", {"shell"}));
  std::promise<std::string> p2;
  ASSERT_TRUE(s.call(*req, [&](std::string r) { p2.set_value(r); }));
  const auto path = body_stdout(p2.get_future().get());
  EXPECT_EQ(path.rfind(fixture_tools + ":", 0), 0u) << path;
  EXPECT_EQ(path.find(f.cwd), std::string::npos) << path;
}

// A tool directory that is a link the model can write (in the cwd) resolves outside every writable
// path, but the model retargets it between the check and the exec: its tools are the model's to
// choose, and so are those reached through a link that passes through such a link.
TEST(BypassCall, ToolThroughALinkTheModelCanRetargetRefused) {
  Fixture f;
  const std::string outside = world().root + "/bypass-linked-tools";
  write_file(outside + "/honest", "#!/bin/sh\necho honest\n", 0755);
  write_file(outside + "/honest.meta", "{\"description\": \"honest\"}\n");
  std::filesystem::remove_all(f.cwd + "/linked");
  std::filesystem::remove_all(f.cwd + "/hop");
  std::filesystem::create_directory_symlink(outside, f.cwd + "/linked");
  std::filesystem::create_directory_symlink(outside, f.cwd + "/hop");
  const std::string chain = world().root + "/bypass-chain";
  std::filesystem::remove_all(chain);
  std::filesystem::create_directory_symlink(f.cwd + "/hop", chain);  // outside the cwd, through it
  for (const auto& dir : {f.cwd + "/linked", chain}) {
    auto c = SessionConfig::from_environment(f.config, f.cwd, "/usr/bin");
    c.session_id = "bypass-linked";
    c.tmpdir = world().root + "/run/ollie/tmp/bypass-linked";
    c.tools_path = dir + ":" + fixture_tools;
    c.bypass_timeout = 1s;  // asked (as it was), the call is denied for want of an answer
    Session s(c);
    ASSERT_TRUE(s.load("a1", {"honest"}));
    auto req = parse_call_request("tool=honest\nagent=a1\nbypass=true\n\n{}");
    std::promise<std::string> p;
    ASSERT_TRUE(s.call(*req, [&](std::string r) { p.set_value(r); }));
    const auto r = p.get_future().get();
    EXPECT_EQ(header(r, "status"), "denied") << dir;
    EXPECT_EQ(body_stderr(r), "bypass refused: tool inside a writable path: " + dir + "/honest\n");
  }
}

// The same linked directory for a sandboxed call: it is not granted (the model could point the link
// anywhere), and the call says why rather than exec's bare `Permission denied`.
TEST(BypassCall, ASandboxedToolBehindALinkTheModelCanRetargetSaysWhyItCannotRun) {
  Fixture f;
  const std::string outside = world().root + "/sandboxed-linked-tools";
  write_file(outside + "/honest", "#!/bin/sh\necho honest\n", 0755);
  write_file(outside + "/honest.meta", "{\"description\": \"honest\"}\n");
  std::filesystem::remove_all(f.cwd + "/linked");
  std::filesystem::create_directory_symlink(outside, f.cwd + "/linked");
  auto c = SessionConfig::from_environment(f.config, f.cwd, "/usr/bin");
  c.session_id = "sandboxed-linked";
  c.tmpdir = world().root + "/run/ollie/tmp/sandboxed-linked";
  c.tools_path = f.cwd + "/linked:" + fixture_tools;
  Session s(c);
  ASSERT_TRUE(s.load("a1", {"honest"}));
  auto req = parse_call_request("tool=honest\nagent=a1\n\n{}");
  std::promise<std::string> p;
  ASSERT_TRUE(s.call(*req, [&](std::string r) { p.set_value(r); }));
  const auto r = p.get_future().get();
  EXPECT_EQ(header(r, "status"), "failed") << r;
  EXPECT_EQ(body_stderr(r), "sandbox: tool directory " + f.cwd + "/linked: a link the sandbox can write is on the way: honest "
                            "cannot run sandboxed (a tool directory inside a writable path must be a directory, not a link)\n");
}

TEST(BypassCall, CancelWithdraws) {
  Fixture f;
  f.load("shell");
  auto req = parse_call_request("tool=shell\nagent=a1\nbypass=true\n\n{\"cmd\":\"true\"}");
  std::promise<std::string> p;
  auto reader = f.session->bypass().open_pending();
  auto call = f.session->call(*req, [&](std::string r) { p.set_value(r); });
  ASSERT_TRUE(call);
  (*call)->cancel();
  const auto r = p.get_future().get();
  EXPECT_EQ(header(r, "status"), "denied");
  EXPECT_NE(f.session->bypass().read_pending(reader).find("\"reason\":\"withdrawn\""), std::string::npos);
}

// ---- bounds ----

// Nobody reads pending for a while: the lines of resolved requests are dropped, and the log
// keeps at most bypass_log_max lines however many requests came and went.
TEST(BypassBroker, ResolvedRequestLinesAreDroppedAndTheLogIsBounded) {
  BypassBroker b;
  auto reader = b.open_pending();
  for (int i = 0; i < 3000; ++i) {
    const auto id = b.request("a1", "t", {{"cmd", std::string(1000, 'x')}}, "/w", false, [](BypassDecision) {});
    if (i % 2) ASSERT_TRUE(b.resolve(std::to_string(id) + " deny"));
    else ASSERT_TRUE(b.withdraw(id));
  }
  const auto text = b.read_pending(reader);
  EXPECT_EQ(text.find("\"tool\""), std::string::npos) << "a request line of a resolved request was kept";
  const auto lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
  EXPECT_LE(lines, bypass_log_max);
  EXPECT_GT(lines, bypass_log_max - 8);
  EXPECT_EQ(text.substr(text.rfind('{')), "{\"id\":\"2999\",\"resolved\":\"deny\",\"reason\":\"withdrawn\"}\n");
}

// A reader further behind than the cap still gets every request that is unresolved, once.
TEST(BypassBroker, AReaderBehindTheCapStillGetsEveryPendingRequest) {
  BypassBroker b;
  auto reader = b.open_pending();
  const auto kept = b.request("a1", "t", {{"cmd", "keep"}}, "/w", false, [](BypassDecision) {});
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(b.withdraw(b.request("a1", "t", {{"cmd", "go"}}, "/w", false, [](BypassDecision) {})));
  const auto text = b.read_pending(reader);
  const auto line = "{\"id\":\"" + std::to_string(kept) +
                    "\",\"agent\":\"a1\",\"tool\":\"t\",\"args\":{\"cmd\":\"keep\"},\"cwd\":\"/w\",\"background\":false}\n";
  ASSERT_NE(text.find(line), std::string::npos);
  EXPECT_EQ(text.find(line, text.find(line) + 1), std::string::npos);
  EXPECT_EQ(b.read_pending(reader), "");
}

TEST(BypassBroker, PendingRequestsAreCapped) {
  BypassBroker b;
  for (std::size_t i = 0; i < bypass_pending_max; ++i)
    EXPECT_NE(b.request("a1", "t", nlohmann::json::object(), "/w", false, [](BypassDecision) {}), 0u);
  bool called = false;
  EXPECT_EQ(b.request("a1", "t", nlohmann::json::object(), "/w", false, [&](BypassDecision) { called = true; }), 0u);
  EXPECT_FALSE(called);
  ASSERT_TRUE(b.resolve("1 deny"));
  EXPECT_NE(b.request("a1", "t", nlohmann::json::object(), "/w", false, [](BypassDecision) {}), 0u);
}

TEST(BypassCall, RefusedWhenTooManyArePending) {
  Fixture f;
  f.load("shell");
  for (std::size_t i = 0; i < bypass_pending_max; ++i)
    f.session->bypass().request("a0", "t", nlohmann::json::object(), "/w", false, [](BypassDecision) {});
  const auto r = f.sh("true", "bypass=true\n");
  EXPECT_EQ(header(r, "status"), "denied");
  EXPECT_EQ(body_stderr(r), "bypass refused: 64 requests are pending already\n");
}

// ---- what an approved call runs ----

// An approved call runs unconfined, so it must run what the hostowner read: no program planted
// on a PATH entry inside a writable path, no git hook planted in the cwd's .git/hooks.
TEST(BypassCall, RunsNoPlantedProgramNorGitHook) {
  Fixture f;
  f.load("shell");
  write_file(f.cwd + "/bin/hello", "#!/bin/sh\necho planted\n", 0755);
  ASSERT_TRUE(f.session->set_env("PATH", f.cwd + "/bin:/usr/bin:/bin"));
  ASSERT_EQ(std::system(("git init -q " + f.cwd).c_str()), 0);
  const auto marker = f.cwd + "/hook-ran";
  write_file(f.cwd + "/.git/hooks/pre-commit", "#!/bin/sh\ntouch " + marker + "\n", 0755);
  std::thread resolver([&] { resolve_next(*f.session, "allow"); });
  const auto r = f.sh("hello; git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m x; "
                      "echo rc=$?; git config core.hooksPath; echo PATH=$PATH",
                      "bypass=true\n");
  resolver.join();
  EXPECT_EQ(header(r, "status"), "exited") << r;
  EXPECT_EQ(body_stdout(r), "rc=0\n/dev/null\nPATH=/usr/bin:/bin\n") << r;
  EXPECT_FALSE(std::filesystem::exists(marker));
  // Sandboxed, the same PATH entry stays (the tool can only run what it could run anyway).
  EXPECT_EQ(body_stdout(f.sh("hello")), "planted\n");
}

// Invalid UTF-8 in what a pending line names (here the agent id) is replaced, never thrown.
TEST(BypassCall, InvalidUtf8IsReplacedOnPending) {
  Fixture f;
  const std::string agent = "a\xff\xfe";
  ASSERT_TRUE(f.session->load(agent, {"shell"}));
  auto reader = f.session->bypass().open_pending();
  std::promise<std::string> p;
  auto call = f.session->call(*parse_call_request("tool=shell\nagent=" + agent + "\nbypass=true\n\n{\"cmd\":\"true\"}"),
                              [&](std::string r) { p.set_value(r); });
  ASSERT_TRUE(call);
  const auto text = f.session->bypass().read_pending(reader);
  const auto j = nlohmann::json::parse(text.substr(0, text.find('\n')));
  EXPECT_EQ(j["agent"], "a\xef\xbf\xbd\xef\xbf\xbd");
  ASSERT_TRUE(f.session->bypass().resolve(j["id"].get<std::string>() + " deny"));
  EXPECT_EQ(header(p.get_future().get(), "status"), "denied");
}

}  // namespace
}  // namespace toolsrv::test
