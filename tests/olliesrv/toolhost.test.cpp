// ToolHost against the real toolsrv of this build: lazy start, sync, calls, flush, loss and
// respawn, a missing binary, two sessions at once.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <optional>
#include <set>
#include <thread>

#include "lib9p/dirs.hpp"
#include "olliesrv/toolhost.hpp"
#include "support/coro.hpp"
#include "support/process.hpp"

using namespace ollie;
using testing_support::OneThread;

namespace {

void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  ::chmod(path.c_str(), mode);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

using testing_support::exists;

/// Polls ok every 10 ms for at most limit.
template <class F>
bool eventually(F ok, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!ok()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

/// The test binary's world: its own HOME and XDG directories, a config root with the shipped
/// sandbox policy and the fixture tools. Set once, before any thread of these tests starts.
struct World {
  std::string root, config, cwd;
  World() {
    std::string t = "/tmp/olliesrv-toolhost-XXXXXX";
    root = ::mkdtemp(t.data());
    config = root + "/config/ollie";
    cwd = root + "/cwd";
    std::filesystem::create_directories(root + "/home");
    std::filesystem::create_directories(root + "/run");
    std::filesystem::create_directories(cwd + "/sub");
    ::chmod((root + "/run").c_str(), 0700);
    ::setenv("HOME", (root + "/home").c_str(), 1);
    ::setenv("XDG_RUNTIME_DIR", (root + "/run").c_str(), 1);
    ::setenv("XDG_CONFIG_HOME", (root + "/config").c_str(), 1);
    ::setenv("XDG_DATA_HOME", (root + "/data").c_str(), 1);
    ::unsetenv("OLLIE_TOOLS_PATH");
    ::setenv("OLLIE_ANTHROPIC_KEY", "secret-not-for-tools", 1);
    ::setenv("CORP_KEY", "a-key_env-of-backends.conf", 1);
    const char* src = (std::getenv("OLLIE_SOURCE_DIR") ? std::getenv("OLLIE_SOURCE_DIR") : OLLIE_TEST_SOURCE_DIR);
    write_file(config + "/sandbox.yaml", read_file(std::string(src ? src : "/work/main") + "/data/sandbox.yaml"));
    const std::string tools = config + "/tools/";
    write_file(tools + "echo", "#!/bin/sh\ncat\n", 0755);
    write_file(tools + "echo.meta", R"({"description":"Echo the arguments.","scope":"read","timeout":7})");
    write_file(tools + "envcwd",
               "#!/bin/sh\nprintf 'FOO=%s\\ncwd=%s\\nkey=%s\\n' \"$FOO\" \"$(pwd)\" \"$OLLIE_ANTHROPIC_KEY\"\n", 0755);
    write_file(tools + "envcwd.meta", R"({"description":"Print FOO and the cwd.","scope":"read"})");
    write_file(tools + "ppid", "#!/bin/sh\necho $PPID\n", 0755);
    write_file(tools + "ppid.meta", R"({"description":"Print the parent pid.","scope":"read"})");
    write_file(tools + "fail", "#!/bin/sh\necho partial\necho boom >&2\nexit 3\n", 0755);
    write_file(tools + "fail.meta", R"({"description":"Fail.","scope":"read"})");
    // Writes "<its pid> <its background child> <toolsrv>" to $1 of the args, then waits.
    write_file(tools + "sleeper",
               "#!/bin/sh\nf=$(sed 's/.*\"file\":\"\\([^\"]*\\)\".*/\\1/')\nsleep 60 &\n"
               "echo \"$$ $! $PPID\" > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"\nwait\n",
               0755);
    write_file(tools + "sleeper.meta", R"({"description":"Sleep.","scope":"read"})");
  }
  ~World() {  // at the test program's exit
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
};

World& world() {
  static World w;
  return w;
}

std::string agent = "3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77";

std::string session_sock(const std::string& sid) { return p9::runtime_root() + "/toolsrv/" + sid + ".sock"; }

struct Host : ::testing::Test {
  World& w = world();
  OneThread t;
  // Short: a Unix socket path holds at most 107 bytes, and the test's name would pass that.
  std::string sid = "test-" + std::to_string(::getpid()) + "-" + std::to_string(++count());
  static int& count() {
    static int n = 0;
    return n;
  }
  std::shared_ptr<ToolHost> host = make(sid);

  std::shared_ptr<ToolHost> make(const std::string& id, const std::string& bin = testing_support::built("bin/toolsrv")) {
    return ToolHost::make(t.io.get_executor(), ToolHost::Config{id, w.cwd, bin, w.config});
  }

  ToolOutcome call(ToolHost& h, const std::string& tool, const std::string& args = "{}", std::optional<int> timeout = {}) {
    return t.run(h.call(ToolCallRequest{tool, agent, std::string(64, 'a'), args, timeout}));
  }

  /// Starts sleeper; returns its pids file (the future ends with the call).
  std::string sleeper_file() {
    static int n = 0;
    return w.cwd + "/pids-" + sid + "-" + std::to_string(++n);
  }
  static std::vector<pid_t> pids(const std::string& file) {
    std::istringstream in(read_file(file));
    std::vector<pid_t> p;
    for (pid_t x; in >> x;) p.push_back(x);
    return p;
  }
};

}  // namespace

TEST_F(Host, NoToolsrvBeforeTheFirstNeed) {
  host->set_env("FOO", "bar");
  host->set_agent_cwd(agent, w.cwd + "/sub");
  host->want_tools(agent, {"envcwd"});
  t.run(host->forget("someone-else"));
  EXPECT_FALSE(host->running());
  EXPECT_FALSE(exists(session_sock(sid)));

  ASSERT_TRUE(t.run(host->ensure()).ok());
  EXPECT_TRUE(host->running());
  EXPECT_TRUE(exists(session_sock(sid)));

  host->stop();
  EXPECT_FALSE(host->running());
  // SIGTERM: toolsrv removes its socket as it exits.
  EXPECT_TRUE(eventually([&] { return !exists(session_sock(sid)); }));
}

TEST_F(Host, StartSyncsEnvAgentCwdAndTools) {
  host->set_env("FOO", "bar");
  host->set_agent_cwd(agent, w.cwd + "/sub");
  host->want_tools(agent, {"envcwd", "no_such_tool"});
  auto r = call(*host, "envcwd");
  EXPECT_FALSE(r.error) << r.text;
  // The backend secret of olliesrv's environment never reaches toolsrv.
  EXPECT_EQ(r.text, "FOO=bar\ncwd=" + w.cwd + "/sub\nkey=\n");

  auto tools = t.run(host->tools(agent));
  ASSERT_TRUE(tools) << tools.ename();
  ASSERT_EQ(tools->size(), 1u);  // the tool that does not load is dropped
  EXPECT_EQ((*tools)[0].name, "envcwd");
  EXPECT_EQ((*tools)[0].description, "Print FOO and the cwd.");
  EXPECT_EQ((*tools)[0].scope, "read");

  // Changes while it runs reach it before the next call.
  host->set_env("FOO", "baz qux");
  host->set_agent_cwd(agent, "");
  EXPECT_EQ(call(*host, "envcwd").text, "FOO=baz qux\ncwd=" + w.cwd + "\nkey=\n");

  auto info = t.run(host->info(""));
  ASSERT_TRUE(info) << info.ename();
  EXPECT_EQ(info->at("cwd"), w.cwd);
  EXPECT_EQ(info->at("os"), "linux");
}

// A wish made while a toolsrv runs reaches it at once, not at the next start: an agent whose
// autoLoad met the toolsrv before lost keeps its tools on the one a later load started.
TEST_F(Host, ToolsWishedWhileToolsrvRunsAreLoadedAtOnce) {
  ASSERT_TRUE(t.run(host->ensure()).ok());
  host->want_tools(agent, {"envcwd", "no_such_tool"});
  auto r = call(*host, "envcwd");
  EXPECT_FALSE(r.error) << r.text;
  auto tools = t.run(host->tools(agent));
  ASSERT_TRUE(tools) << tools.ename();
  ASSERT_EQ(tools->size(), 1u);
  EXPECT_EQ((*tools)[0].name, "envcwd");
}

// `tools <agent>` is read before every LLM request; toolsrv remakes it only when something changed:
// a load, an unload, an edited .meta of a loaded tool (§7.2.2). Each change shows at the next read.
TEST_F(Host, TheToolListFollowsLoadsUnloadsAndEdits) {
  const std::string tools = w.config + "/tools/";
  const std::string name = "edited" + std::to_string(::getpid());
  write_file(tools + name, "#!/bin/sh\ntrue\n", 0755);
  write_file(tools + name + ".meta", R"({"description":"First.","scope":"read"})");
  auto names = [&] {
    auto r = t.run(host->tools(agent));
    std::string out;
    if (!r) return "error: " + r.ename();
    for (const auto& ti : *r) out += ti.name + "=" + ti.description + ";";
    return out;
  };
  ASSERT_TRUE(t.run(host->load(agent, {name})));
  EXPECT_EQ(names(), name + "=First.;");
  EXPECT_EQ(names(), name + "=First.;");  // unchanged: the same list again
  write_file(tools + name + ".meta", R"({"description":"Second, longer.","scope":"read"})");
  EXPECT_EQ(names(), name + "=Second, longer.;");
  ASSERT_TRUE(t.run(host->load(agent, {"echo"})));
  EXPECT_EQ(names(), "echo=Echo the arguments.;" + name + "=Second, longer.;");
  ASSERT_TRUE(t.run(host->unload(agent, {name})));
  EXPECT_EQ(names(), "echo=Echo the arguments.;");
  ASSERT_TRUE(t.run(host->unload(agent, {"echo"})));
  EXPECT_EQ(names(), "");
  std::filesystem::remove(tools + name);
  std::filesystem::remove(tools + name + ".meta");
}

TEST_F(Host, CallRoundTripAndResults) {
  ASSERT_TRUE(t.run(host->load(agent, {"echo", "fail", "sleeper"})).ok());
  auto r = call(*host, "echo", R"({"x":1})");
  EXPECT_FALSE(r.error);
  EXPECT_EQ(r.text, R"({"x":1})");

  auto f = call(*host, "fail");
  EXPECT_TRUE(f.error);
  EXPECT_EQ(f.text, "error: exit status 3\npartial\n\n[stderr]\nboom\n");

  auto n = call(*host, "nope");
  EXPECT_TRUE(n.error);
  EXPECT_EQ(n.text, "error: tool not loaded: nope");

  auto bad = t.run(host->load(agent, {"echo", "no_such_tool"}));
  EXPECT_EQ(bad.ename(), "unknown tool: no_such_tool");

  auto to = call(*host, "sleeper", R"({"file":")" + sleeper_file() + R"("})", 1);
  EXPECT_TRUE(to.error);
  EXPECT_EQ(to.text.rfind("error: execution timeout after 1 seconds\n", 0), 0u) << to.text;

  auto cat = t.run(host->catalog());
  ASSERT_TRUE(cat) << cat.ename();
  bool saw_echo = false;
  for (auto& e : *cat)
    if (e.name == "echo") {
      saw_echo = true;
      EXPECT_EQ(e.timeout, 7);
    }
  EXPECT_TRUE(saw_echo);
}

TEST_F(Host, CancelledCallIsFlushedAndItsGroupKilled) {
  ASSERT_TRUE(t.run(host->load(agent, {"sleeper", "echo"})).ok());
  const std::string file = sleeper_file();
  asio::cancellation_signal sig;
  auto done = t.start(host->call(ToolCallRequest{"sleeper", agent, "", R"({"file":")" + file + R"("})", {}}), sig);
  ASSERT_TRUE(eventually([&] { return exists(file); }));
  auto p = pids(file);
  ASSERT_EQ(p.size(), 3u);
  t.cancel(sig);
  ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(testing_support::aborted(done.get()));
  EXPECT_TRUE(eventually([&] { return gone(p[0]) && gone(p[1]); })) << "tool process group survived the flush";
  EXPECT_FALSE(gone(p[2]));  // toolsrv itself keeps running
  EXPECT_EQ(call(*host, "echo", "{}").text, "{}");
}

TEST_F(Host, LostToolsrvEndsTheCallAndTheNextStartsAFreshSyncedOne) {
  host->set_env("FOO", "kept");
  ASSERT_TRUE(t.run(host->load(agent, {"sleeper", "envcwd", "ppid"})).ok());
  const std::string first = call(*host, "ppid").text;
  const std::string file = sleeper_file();
  auto done = t.start(host->call(ToolCallRequest{"sleeper", agent, "", R"({"file":")" + file + R"("})", {}}));
  ASSERT_TRUE(eventually([&] { return exists(file); }));
  auto p = pids(file);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(std::to_string(p[2]) + "\n", first);
  ::kill(p[2], SIGKILL);
  ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto r = done.get();
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r.text.rfind("error: tool server lost: ", 0), 0u) << r.text;
  ::kill(-p[0], SIGKILL);  // the tool's own background child outlives a SIGKILLed toolsrv (§6.1)
  EXPECT_TRUE(eventually([&] { return gone(p[2]); }));  // reaped: no zombie left

  // A new toolsrv, synced again: the env, and the tools loaded on the old one.
  auto again = call(*host, "envcwd");
  EXPECT_FALSE(again.error) << again.text;
  EXPECT_EQ(again.text, "FOO=kept\ncwd=" + w.cwd + "\nkey=\n");
  const std::string second = call(*host, "ppid").text;
  EXPECT_NE(second, first);
  EXPECT_TRUE(host->running());
}

// §6.1: a toolsrv that stops by itself (SIGTERM or SIGINT from outside) kills its tools, ends the
// read of the call in flight and refuses what comes meanwhile (`server shutting down`) until it
// exits: the call in flight ends as lost (or as its killed tool, when toolsrv answered that
// first), the instance is lost by its exit at the latest, and the next call runs on another.
TEST_F(Host, ToolsrvStoppedByASignalIsLostAndTheNextNeedStartsAnother) {
  host->set_env("FOO", "kept");
  ASSERT_TRUE(t.run(host->load(agent, {"sleeper", "envcwd", "ppid"})).ok());
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string before = call(*host, "ppid").text;
    const std::string file = sleeper_file();
    auto done = t.start(host->call(ToolCallRequest{"sleeper", agent, "", R"({"file":")" + file + R"("})", {}}));
    ASSERT_TRUE(eventually([&] { return exists(file); }));
    auto p = pids(file);
    ASSERT_EQ(p.size(), 3u);
    ::kill(p[2], sig);
    ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    auto r = done.get();
    EXPECT_TRUE(r.error);
    EXPECT_TRUE(r.text.starts_with("error: tool server lost: ") || r.text.starts_with("error: killed by signal 9")) << r.text;
    EXPECT_TRUE(eventually([&] { return !host->running(); }));
    auto again = call(*host, "envcwd");
    EXPECT_FALSE(again.error) << again.text;
    EXPECT_EQ(again.text, "FOO=kept\ncwd=" + w.cwd + "\nkey=\n");
    EXPECT_NE(call(*host, "ppid").text, before);
    EXPECT_TRUE(eventually([&] { return gone(p[0]) && gone(p[1]) && gone(p[2]); }));
  }
  // Idle: no request sees the stop, the exit does; the next call never meets the old one.
  const pid_t idle = std::stoi(call(*host, "ppid").text);
  ::kill(idle, SIGTERM);
  EXPECT_TRUE(eventually([&] { return !host->running(); }));
  auto after = call(*host, "envcwd");
  EXPECT_FALSE(after.error) << after.text;
}

// §3.3 and §6.1: a load that finds no toolsrv to take it fails and loads nothing, then or at the
// next start.
TEST_F(Host, ALoadWithNoToolsrvLoadsNothing) {
  const std::string bin = w.root + "/bin-" + sid + "/toolsrv";
  auto h = make(sid, bin);
  EXPECT_EQ(t.run(h->load(agent, {"echo", "nosuch"})).ename(),
            "tool server unavailable: " + bin + ": No such file or directory");
  EXPECT_TRUE(ToolHost::unreachable("tool server unavailable: " + bin + ": No such file or directory"));
  EXPECT_FALSE(ToolHost::unreachable("unknown tool: nosuch"));
  std::filesystem::create_directories(std::filesystem::path(bin).parent_path());
  std::filesystem::create_symlink(testing_support::built("bin/toolsrv"), bin);
  auto listed = t.run(h->tools(agent));
  ASSERT_TRUE(listed) << listed.ename();
  EXPECT_TRUE(listed->empty()) << listed->front().name;
  h->stop();
}

// §6.1: toolsrv's environment lacks every key_env of backends.conf, those of the file as
// olliesrv loaded it too: a file unreadable at the start (here: none at all) drops nothing.
TEST_F(Host, BackendSecretsOlliesrvLoadedNeverReachToolsrv) {
  ToolHost::Config cfg{sid + "k", w.cwd, testing_support::built("bin/toolsrv"), w.config};
  cfg.secret_vars = [] { return std::vector<std::string>{"CORP_KEY"}; };
  auto h = ToolHost::make(t.io.get_executor(), std::move(cfg));
  ASSERT_TRUE(t.run(h->load(agent, {"ppid"})).ok());
  auto r = call(*h, "ppid");
  ASSERT_FALSE(r.error) << r.text;
  const std::string env = read_file("/proc/" + r.text.substr(0, r.text.find('\n')) + "/environ");
  EXPECT_NE(env.find("HOME="), std::string::npos) << "toolsrv's environment was read";
  EXPECT_EQ(env.find("CORP_KEY="), std::string::npos);
  EXPECT_EQ(env.find("OLLIE_ANTHROPIC_KEY="), std::string::npos);
  h->stop();
}

TEST_F(Host, MissingBinaryIsUnavailableUntilItIsBack) {
  const std::string bin = w.root + "/bin-" + sid + "/toolsrv";
  auto h = make(sid, bin);
  h->want_tools(agent, {"echo"});
  auto r = call(*h, "echo");
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r.text, "error: tool server unavailable: " + bin + ": No such file or directory");
  EXPECT_FALSE(h->running());
  EXPECT_FALSE(t.run(h->ensure()).ok());

  std::filesystem::create_directories(std::filesystem::path(bin).parent_path());
  std::filesystem::create_symlink(testing_support::built("bin/toolsrv"), bin);
  auto ok = call(*h, "echo", R"({"back":true})");
  EXPECT_FALSE(ok.error) << ok.text;
  EXPECT_EQ(ok.text, R"({"back":true})");
}

TEST_F(Host, ABadSessionCwdFailsTheStartWithoutAProcess) {
  auto h = ToolHost::make(t.io.get_executor(), ToolHost::Config{sid + "-x", w.root + "/missing",
                                                                testing_support::built("bin/toolsrv"), w.config});
  auto st = t.run(h->ensure());
  EXPECT_EQ(st.ename(), "cwd: " + w.root + "/missing: not a directory");
  EXPECT_FALSE(h->running());
  ASSERT_TRUE(t.run(host->ensure()).ok());
  EXPECT_EQ(t.run(host->set_cwd(w.root + "/missing")).ename(), "cwd: " + w.root + "/missing: not a directory");
  EXPECT_TRUE(t.run(host->set_cwd(w.cwd + "/sub")).ok());
  auto info = t.run(host->info(""));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->at("cwd"), w.cwd + "/sub");
}

TEST_F(Host, TwoSessionsAtOnce) {
  auto other = make(sid + "-2");
  host->set_env("FOO", "one");
  other->set_env("FOO", "two");
  host->want_tools(agent, {"envcwd", "ppid"});
  other->want_tools(agent, {"envcwd", "ppid"});
  // Both start concurrently, each with its own socket and process.
  auto a = t.start(host->call(ToolCallRequest{"envcwd", agent, "", "{}", {}}));
  auto b = t.start(other->call(ToolCallRequest{"envcwd", agent, "", "{}", {}}));
  ASSERT_EQ(a.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  ASSERT_EQ(b.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(a.get().text, "FOO=one\ncwd=" + w.cwd + "\nkey=\n");
  EXPECT_EQ(b.get().text, "FOO=two\ncwd=" + w.cwd + "\nkey=\n");
  EXPECT_TRUE(exists(session_sock(sid)));
  EXPECT_TRUE(exists(session_sock(sid + "-2")));
  EXPECT_NE(call(*host, "ppid").text, call(*other, "ppid").text);
}

TEST_F(Host, ConcurrentNeedsShareOneStart) {
  host->want_tools(agent, {"ppid"});
  std::vector<std::future<ToolOutcome>> calls;
  for (int i = 0; i < 5; i++) calls.push_back(t.start(host->call(ToolCallRequest{"ppid", agent, "", "{}", {}})));
  std::set<std::string> seen;
  for (auto& c : calls) {
    ASSERT_EQ(c.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    auto r = c.get();
    EXPECT_FALSE(r.error) << r.text;
    seen.insert(r.text);
  }
  EXPECT_EQ(seen.size(), 1u);  // one toolsrv answered them all
}
