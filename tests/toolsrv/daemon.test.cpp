// toolsrv as olliesrv runs it: the real binary, its secret on descriptor 3, its real socket, a
// p9::Client; and the lifecycle of the daemon run in-process with short timers.
#include <sys/socket.h>
#include <sys/un.h>

#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <future>

#include "daemon.hpp"
#include "lib9p/errors.hpp"
#include "toolsrv/toolsrv.hpp"

namespace toolsrv::test {
namespace {

using namespace std::chrono_literals;

// A started daemon and an attached client.
struct Served : ::testing::Test {
  Daemon d;
  p9::CFid root;
  std::shared_ptr<p9::Client> c;

  void SetUp() override {
    ASSERT_TRUE(d.listening()) << d.err_text();
    c = d.client(root);
  }
  void ctl(const std::string& text) { ASSERT_TRUE(write_file9(root, "ctl", text)) << text; }
  std::string call(const std::string& request, const std::string& file = "proc/new") {
    auto r = rdwr(root, file, request);
    return r ? *r : "Rerror " + r.ename();
  }
  std::string sh(const std::string& cmd, const std::string& headers = "") {
    return call("tool=shell\nagent=a1\n" + headers + "\n{\"cmd\":\"" + cmd + "\"}");
  }
};

bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  // A zombie waiting for its reaper is dead too.
  return read_file("/proc/" + std::to_string(pid) + "/stat").find(") Z ") != std::string::npos;
}

// ---- start and authentication ----

TEST(ToolsrvStart, NoSecretOnFd3RefusesToStart) {
  for (std::optional<std::string> fd3 : {std::optional<std::string>{}, std::optional<std::string>{""},
                                         std::optional<std::string>{"abc\n"}, std::optional<std::string>{test_secret}}) {
    Daemon d(fd3);
    EXPECT_EQ(d.wait_exit(), 1);
    EXPECT_NE(d.err_text().find("toolsrv: no secret on fd 3\n"), std::string::npos) << d.err_text();
    EXPECT_FALSE(exists(d.sock));
  }
}

TEST(ToolsrvStart, VersionFlag) {
  auto r = testing_support::run({testing_support::built("bin/toolsrv"), "-version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("toolsrv ", 0), 0u) << r.out;
}

TEST(ToolsrvStart, SocketIsPrivate) {
  Daemon d;
  ASSERT_TRUE(d.listening()) << d.err_text();
  struct stat s;
  ASSERT_EQ(::stat(d.sock.c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((d.root + "/run").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 0777, 0700u);
}

// The socket's directory is checked as olliesrv checks its namespace directory (one check,
// p9::ensure_private_dir): a directory another user could have made or widened is refused.
TEST(ToolsrvStart, RefusesASocketDirectoryThatIsNotPrivate) {
  world();
  const auto root = temp_dir("sockdir");
  const auto dir = root + "/run";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  auto r = testing_support::run({"/bin/sh", "-c",
                                 "exec \"$0\" -a \"unix!$1/toolsrv.sock\" -cwd / -config \"$2\" 3<<END\n" + test_secret + "\nEND",
                                 testing_support::built("bin/toolsrv"), dir, root});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("toolsrv: " + dir + ": mode 0777, not 0700: chmod 700 " + dir + "\n"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(dir + "/toolsrv.sock"));
}

TEST(ToolsrvAuth, EveryWrongAttachIsRefused) {
  Daemon d;
  ASSERT_TRUE(d.listening()) << d.err_text();
  auto c = p9::Client::dial(d.addr());
  ASSERT_TRUE(c) << c.ename();
  EXPECT_EQ((*c)->attach("olliesrv").ename(), "authentication required");

  auto empty = (*c)->auth("olliesrv");
  ASSERT_TRUE(empty) << empty.ename();
  EXPECT_EQ((*c)->attach("olliesrv", "", &*empty).ename(), "empty secret");

  const std::string wrong = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
  auto bad = (*c)->auth("olliesrv");
  ASSERT_TRUE(bad);
  ASSERT_TRUE(bad->write(wrong));
  EXPECT_EQ((*c)->attach("olliesrv", "", &*bad).ename(), "authentication failed");
  auto shorter = (*c)->auth("olliesrv");
  ASSERT_TRUE(shorter->write(test_secret.substr(0, 63)));
  EXPECT_EQ((*c)->attach("olliesrv", "", &*shorter).ename(), "authentication failed");

  auto good = (*c)->auth("olliesrv");
  ASSERT_TRUE(good->write(test_secret + "\n"));
  auto root = (*c)->attach("olliesrv", "", &*good);
  ASSERT_TRUE(root) << root.ename();
  EXPECT_TRUE(read9(*root, "proc").ok());

  // Refusals are logged without the bytes presented.
  ASSERT_TRUE(eventually([&] { return d.err_text().find("authentication failed") != std::string::npos; }));
  EXPECT_EQ(d.err_text().find(wrong), std::string::npos);
  EXPECT_EQ(d.err_text().find(test_secret), std::string::npos);
}

// ---- calls ----

TEST_F(Served, EchoRoundTripThroughProcNew) {
  ctl("load a1 echo\n");
  EXPECT_EQ(call("tool=echo\nagent=a1\nauth=" + test_secret + "\n\n{\"hello\":\"world\"}"),
            "pid=1\nstatus=exited\nexit=0\nstdout=17\nstderr=10\n\n{\"hello\":\"world\"}to stderr\n");
  auto stat = read9(root, "proc/1/stat");
  ASSERT_TRUE(stat) << stat.ename();
  EXPECT_NE(stat->find("pid=1\ntool=echo\nagent=a1\nbackground=false\nstatus=exited\nexit=0\n"), std::string::npos) << *stat;
}

TEST_F(Served, RequestErrorsAreRerrors) {
  EXPECT_EQ(call("tool=echo\nagent=a1\n\n{}"), "Rerror tool not loaded: echo");
  EXPECT_EQ(call("agent=a1\n\n{}"), "Rerror missing tool");
  ctl("load a1 echo");
  EXPECT_EQ(call("tool=echo\nagent=a1\n\n[1]"), "Rerror invalid args: not a JSON object");
  EXPECT_EQ(call("tool=echo\nagent=a1\ntimeout=soon\n\n{}"), "Rerror invalid timeout: soon");
}

TEST_F(Served, BackgroundOutputStreamsWhileRunning) {
  ctl("load a1 shell");
  // The tool prints, then waits for a file the test creates only after reading that output.
  EXPECT_EQ(call("tool=shell\nagent=a1\n\n{\"cmd\":\"echo first; while [ ! -e go ]; do sleep 0.05; done; echo second\"}",
                 "proc/new.bg"),
            "pid=1\n");
  auto listing = root.walk("proc");
  ASSERT_TRUE(listing && listing->open(p9::OREAD));
  auto entries = listing->dirread_all();
  ASSERT_TRUE(entries);
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[2].name, "1");

  auto stat = read9(root, "proc/1/stat");
  EXPECT_NE(stat->find("background=true\nstatus=running\n"), std::string::npos) << *stat;
  auto out = root.walk("proc/1/out");
  ASSERT_TRUE(out && out->open(p9::OREAD));
  std::string got;
  while (got.find("first\n") == std::string::npos) {
    auto r = out->read(8192);
    ASSERT_TRUE(r && !r->empty()) << "early EOF";
    got += *r;
  }
  write_file(d.cwd + "/go", "");
  auto rest = out->read_all();
  ASSERT_TRUE(rest);
  EXPECT_EQ(got + *rest, "first\nsecond\n");
  EXPECT_EQ(*read9(root, "proc/1/wait"), "pid=1\nstatus=exited\nexit=0\nstdout=13\nstderr=0\n");
  stat = read9(root, "proc/1/stat");
  EXPECT_NE(stat->find("status=exited\nexit=0\n"), std::string::npos) << *stat;

  ASSERT_TRUE(write_file9(root, "proc/1/ctl", "dismiss"));
  EXPECT_EQ(root.walk("proc/1").ename(), "1: file not found");
}

TEST_F(Served, WaitBlocksUntilTheEndAndKillEndsIt) {
  ctl("load a1 shell");
  ASSERT_EQ(call("tool=shell\nagent=a1\n\n{\"cmd\":\"sleep 1000\"}", "proc/new.bg"), "pid=1\n");
  auto waiting = std::async(std::launch::async, [&] { return read9(root, "proc/1/wait"); });
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  ASSERT_TRUE(write_file9(root, "proc/1/ctl", "signal 15"));
  auto w = waiting.get();
  ASSERT_TRUE(w) << w.ename();
  EXPECT_EQ(*w, "pid=1\nstatus=signaled\nsignal=15\nstdout=0\nstderr=0\n");
  EXPECT_EQ(write_file9(root, "proc/1/ctl", "kill").ename(), "process has exited");
}

TEST_F(Served, FlushOfABlockedCallKillsItsProcessGroup) {
  ctl("load a1 shell");
  auto f = root.walk("proc/new");
  ASSERT_TRUE(f && f->open(p9::ORDWR));
  ASSERT_TRUE(f->write("tool=shell\nagent=a1\ntimeout=0\n\n{\"cmd\":\"sleep 1000 & echo $! > child; wait\"}"));
  p9::Fcall t;
  t.type = p9::Tread;
  t.fid = f->num();
  t.offset = 0;
  t.count = 8192;
  std::promise<std::string> answer;
  auto tag = c->start(t, [&](p9::Result<p9::Fcall> r) { answer.set_value(r ? "reply" : r.ename()); });
  ASSERT_TRUE(eventually([&] { return read_file(d.cwd + "/child").find('\n') != std::string::npos; }));
  const pid_t grandchild = std::stoi(read_file(d.cwd + "/child"));
  c->flush(tag);
  EXPECT_EQ(answer.get_future().get(), p9::err::interrupted);
  EXPECT_TRUE(eventually([&] { return gone(grandchild); })) << "sleep survived the flush";
  auto w = read9(root, "proc/1/wait");
  EXPECT_EQ(*w, "pid=1\nstatus=signaled\nsignal=9\nstdout=0\nstderr=0\n");
}

TEST_F(Served, BypassAllowAndDeny) {
  ctl("load a1 shell");
  auto pending = root.walk("bypass/pending");
  ASSERT_TRUE(pending && pending->open(p9::OREAD));
  auto next_request = [&] {
    std::string line;
    while (line.find('\n') == std::string::npos) {
      auto r = pending->read(8192);
      if (!r || r->empty()) return nlohmann::json();
      line += *r;
    }
    return nlohmann::json::parse(line);
  };

  auto allowed = std::async(std::launch::async, [&] { return sh("grep NoNewPrivs /proc/self/status", "bypass=true\n"); });
  auto req = next_request();
  EXPECT_EQ(req["tool"], "shell");
  EXPECT_EQ(req["agent"], "a1");
  EXPECT_EQ(req["args"]["cmd"], "grep NoNewPrivs /proc/self/status");
  EXPECT_EQ(req["background"], false);
  EXPECT_EQ(allowed.wait_for(100ms), std::future_status::timeout);  // nothing runs before the answer
  ASSERT_TRUE(write_file9(root, "bypass/resolve", req["id"].get<std::string>() + " allow\n"));
  auto r = allowed.get();
  EXPECT_EQ(header(r, "status"), "exited");
  EXPECT_EQ(body_stdout(r), "NoNewPrivs:\t0\n");

  auto denied = std::async(std::launch::async, [&] { return sh("touch ran", "bypass=true\n"); });
  req = next_request();
  ASSERT_TRUE(write_file9(root, "bypass/resolve", req["id"].get<std::string>() + " deny\n"));
  EXPECT_EQ(header(denied.get(), "status"), "denied");
  EXPECT_FALSE(exists(d.cwd + "/ran"));
  EXPECT_EQ(write_file9(root, "bypass/resolve", req["id"].get<std::string>() + " allow\n").ename(),
            "no such request: " + req["id"].get<std::string>());
}

// ---- ctl, tools, info ----

TEST_F(Served, CtlErrorsNameTheProblem) {
  EXPECT_EQ(write_file9(root, "ctl", "frobnicate x\n").ename(), "unknown command: frobnicate");
  EXPECT_EQ(write_file9(root, "ctl", "load a1 nosuchtool\n").ename(), "unknown tool: nosuchtool");
  EXPECT_EQ(write_file9(root, "ctl", "load a1\n").ename(), "usage: load <agent> <tool>...");
  EXPECT_EQ(write_file9(root, "ctl", "cwd relative\n").ename(), "cwd must be absolute: relative");
  EXPECT_EQ(write_file9(root, "ctl", "env 1X=y\n").ename(), "invalid env name: 1X");
  EXPECT_EQ(write_file9(root, "ctl", "sandboxok abc\n").ename(), "usage: sandboxok [<sha256> <dir>]...");
  EXPECT_EQ(write_file9(root, "ctl", "agentcwd a1 'unterminated\n").ename(), "unterminated quote");
  // Lines run in order and the first error stops: the echo load took effect, shell did not.
  EXPECT_EQ(write_file9(root, "ctl", "load a1 echo\nbogus\nload a1 shell\n").ename(), "unknown command: bogus");
  auto tools = nlohmann::json::parse(*rdwr(root, "tools", "a1"));
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0]["name"], "echo");

  ctl("load a1 shell");
  ASSERT_EQ(call("tool=shell\nagent=a1\n\n{\"cmd\":\"sleep 1000\"}", "proc/new.bg"), "pid=1\n");
  EXPECT_EQ(write_file9(root, "proc/1/ctl", "stop\n").ename(), "unknown command: stop");
  EXPECT_EQ(write_file9(root, "proc/1/ctl", "signal 99\n").ename(), "invalid signal: 99");
  EXPECT_EQ(write_file9(root, "proc/1/ctl", "signal\n").ename(), "usage: signal <N>");
  EXPECT_TRUE(write_file9(root, "proc/1/ctl", "kill\n"));
  EXPECT_EQ(root.walk("proc/7").ename(), "7: file not found");
}

TEST_F(Served, EnvAndAgentCwdReachTheTool) {
  ctl("load a1 shell\nenv GREETING=hello  world\n");
  const auto other = d.root + "/other dir";
  std::filesystem::create_directories(other);
  ctl("agentcwd a1 '" + other + "'\n");
  EXPECT_EQ(body_stdout(sh("printenv GREETING; pwd")), "hello  world\n" + other + "\n");
  ctl("agentcwd a1 -\nenv GREETING=\n");
  EXPECT_EQ(body_stdout(sh("echo ${GREETING:-unset}; pwd")), "unset\n" + d.cwd + "\n");
}

TEST_F(Served, ToolsAndInfo) {
  auto catalog = nlohmann::json::parse(*rdwr(root, "tools", "*"));
  bool broken_listed = false;
  for (auto& t : catalog)
    if (t["name"] == "broken") broken_listed = t.contains("error");
  EXPECT_TRUE(broken_listed) << catalog.dump();
  EXPECT_EQ(*rdwr(root, "tools", "nobody\n"), "[]\n");

  auto info = rdwr(root, "info", "");
  ASSERT_TRUE(info) << info.ename();
  EXPECT_EQ(info->rfind("os=linux\n", 0), 0u) << *info;
  EXPECT_NE(info->find("\ncwd=" + d.cwd + "\n"), std::string::npos) << *info;

  write_file(d.cwd + "/a file", "12345");
  auto st = rdwr(root, "info", "stat a1 'a file' missing");
  ASSERT_TRUE(st) << st.ename();
  EXPECT_NE(st->find("a file\ttrue\t"), std::string::npos) << *st;
  EXPECT_NE(st->find("\t5\nmissing\tfalse\t-\t-\n"), std::string::npos) << *st;
  EXPECT_EQ(rdwr(root, "info", "stat a1").ename(), "usage: stat <agent> <path>...");

  // `resolve`: directories as this host resolves them (`..`, symlinks); anything else `-`.
  std::filesystem::create_directories(d.cwd + "/sub/deeper");
  std::filesystem::create_directory_symlink(d.cwd + "/sub/deeper", d.cwd + "/link");
  char real[PATH_MAX];
  ASSERT_TRUE(::realpath(d.cwd.c_str(), real));
  const std::string cwd = real;
  auto rs = rdwr(root, "info", "resolve a1 link sub/../sub/deeper/ link/.. 'a file' missing " + d.cwd);
  ASSERT_TRUE(rs) << rs.ename();
  EXPECT_EQ(*rs, "link\t" + cwd + "/sub/deeper\nsub/../sub/deeper/\t" + cwd + "/sub/deeper\nlink/..\t" + cwd +
                     "/sub\na file\t-\nmissing\t-\n" + d.cwd + "\t" + cwd + "\n");
}

// ---- hardening, through the binary ----

// One agent turns another's cwd into a symlink to `/` from inside its sandbox: the other's next
// call fails clearly and writes nothing outside (toolsrv held the cwd when it was set).
TEST_F(Served, AgentCwdRetargetedBySymlinkFailsTheCall) {
  ctl("load a1 shell\nload a2 shell\n");
  std::filesystem::create_directories(d.cwd + "/sub");
  ctl("agentcwd a2 " + d.cwd + "/sub\n");
  const auto owned = world().home + "/owned-by-a2-" + std::to_string(::getpid());
  const auto a2 = "tool=shell\nagent=a2\n\n{\"cmd\":\"echo x > " + owned + "; pwd\"}";
  EXPECT_EQ(body_stdout(call(a2)), d.cwd + "/sub\n");
  ASSERT_EQ(body_stdout(sh("rm -r sub && ln -s / sub && echo swapped")), "swapped\n");
  const auto r = call(a2);
  EXPECT_EQ(header(r, "status"), "failed") << r;
  EXPECT_EQ(body_stderr(r), "cwd changed since it was set: " + d.cwd + "/sub\n");
  EXPECT_FALSE(std::filesystem::exists(owned));
}

// olliesrv sends an agent's cwd resolved (§4.2 compares resolved paths): one that resolves
// elsewhere when toolsrv opens it had a component replaced in between (an agent racing its own
// agent/new from a tool), and is refused rather than held where it now leads.
TEST_F(Served, AgentCwdThatResolvesElsewhereIsRefused) {
  ctl("load a1 shell\n");
  std::filesystem::create_directories(d.cwd + "/real");
  std::filesystem::create_directory_symlink("/", d.cwd + "/sub");
  auto st = write_file9(root, "ctl", "agentcwd a1 " + d.cwd + "/sub\n");
  EXPECT_EQ(st.ename(), "cwd: " + d.cwd + "/sub: changed while being set");
  EXPECT_TRUE(write_file9(root, "ctl", "agentcwd a1 " + d.cwd + "/real\n"));
  const auto r = call("tool=shell\nagent=a1\n\n{\"cmd\":\"pwd\"}");
  EXPECT_EQ(body_stdout(r), d.cwd + "/real\n") << r;
}

// `resolve` of a relative path starts from the directory the agent's tools run in, held since it
// was set, not from its name: swapped for a symlink (to `/` here, $HOME in an attack), the name
// would move olliesrv's containment of that agent's agent/new (§4.2) out of its cwd.
TEST_F(Served, ResolveStartsFromTheHeldCwdNotItsName) {
  std::filesystem::create_directories(d.cwd + "/sub/inner");
  ctl("agentcwd a2 " + d.cwd + "/sub\n");
  std::filesystem::rename(d.cwd + "/sub", d.cwd + "/moved");
  std::filesystem::create_directory_symlink("/", d.cwd + "/sub");
  char real[PATH_MAX];
  ASSERT_TRUE(::realpath(d.cwd.c_str(), real));
  const std::string cwd = real;
  auto rs = rdwr(root, "info", "resolve a2 . inner " + d.cwd + "/sub");
  ASSERT_TRUE(rs) << rs.ename();
  EXPECT_EQ(*rs, ".\t" + cwd + "/moved\ninner\t" + cwd + "/moved/inner\n" + d.cwd + "/sub\t/\n");
}

// Invalid UTF-8 in what a pending line names (the agent id here) neither throws nor stops the
// server: the line carries U+FFFD and the request is resolved as usual.
TEST_F(Served, InvalidUtf8AgentIsReplacedOnPending) {
  const std::string agent = "a\xff";
  ctl("load " + agent + " shell\n");
  auto pending = root.walk("bypass/pending");
  ASSERT_TRUE(pending && pending->open(p9::OREAD));
  auto asked = std::async(std::launch::async, [&] {
    return call("tool=shell\nagent=" + agent + "\nbypass=true\n\n{\"cmd\":\"true\"}");
  });
  std::string line;
  while (line.find('\n') == std::string::npos) {
    auto r = pending->read(8192);
    ASSERT_TRUE(r && !r->empty());
    line += *r;
  }
  const auto req = nlohmann::json::parse(line);
  EXPECT_EQ(req["agent"], "a\xef\xbf\xbd");
  ASSERT_TRUE(write_file9(root, "bypass/resolve", req["id"].get<std::string>() + " deny\n"));
  EXPECT_EQ(header(asked.get(), "status"), "denied");
}

// ---- exit ----

// §7.3.2: a policy path that does not exist is skipped with a warning in toolsrv's log, once;
// sandbox.yaml's general.log_level governs it, whatever OLLIE_LOG says (the daemon runs at info).
TEST(ToolsrvLog, ASkippedSandboxPathIsWarnedOnceUnlessLogLevelSaysLess) {
  for (const std::string level : {"", "warn", "error"}) {
    std::string policy = default_policy();
    const auto general = policy.find("general: {best_effort: false}"), ro = policy.find("ro:  [\"/etc\"");
    ASSERT_TRUE(general != std::string::npos && ro != std::string::npos && general < ro);
    policy.replace(ro, 6, "ro:  [\"/nonexistent/ollie-typo\", ");
    if (!level.empty()) policy.replace(general, 29, "general: {best_effort: false, log_level: " + level + "}");
    Daemon d(test_secret + "\n", policy);
    ASSERT_TRUE(d.listening()) << d.err_text();
    p9::CFid root;
    auto c = d.client(root);
    ASSERT_TRUE(write_file9(root, "ctl", "load a1 echo\n"));
    for (int i = 0; i < 2; i++) {
      auto r = rdwr(root, "proc/new", "tool=echo\nagent=a1\n\n{}");
      ASSERT_TRUE(r && r->find("status=exited\nexit=0\n") != std::string::npos) << (r ? *r : r.ename());
    }
    const std::string warned = "[warning] toolsrv: sandbox path skipped: /nonexistent/ollie-typo: does not exist";
    const auto& log = d.err_text();
    const auto at = log.find(warned);
    if (level == "error") {
      EXPECT_EQ(log.find("ollie-typo"), std::string::npos) << log;
    } else {
      ASSERT_NE(at, std::string::npos) << "log_level " << level << ":\n" << log;
      EXPECT_EQ(log.find(warned, at + 1), std::string::npos) << "more than once:\n" << log;
    }
  }
}

TEST(ToolsrvExit, SigtermKillsEveryGroupAndRemovesTheSocket) {
  Daemon d;
  ASSERT_TRUE(d.listening()) << d.err_text();
  p9::CFid root;
  auto c = d.client(root);
  ASSERT_TRUE(write_file9(root, "ctl", "load a1 shell"));
  ASSERT_EQ(*rdwr(root, "proc/new.bg", "tool=shell\nagent=a1\n\n{\"cmd\":\"sleep 1000 & echo $! > child; wait\"}"), "pid=1\n");
  ASSERT_TRUE(eventually([&] { return read_file(d.cwd + "/child").find('\n') != std::string::npos; }));
  const pid_t grandchild = std::stoi(read_file(d.cwd + "/child"));
  // Run without OLLIE_SESSION_ID (by hand), its TMPDIR is its own: it goes with it.
  const std::string tmpdir = world().root + "/run/ollie/tmp/pid-" + std::to_string(d.pid());
  EXPECT_TRUE(exists(tmpdir));
  ::kill(d.pid(), SIGTERM);
  EXPECT_EQ(d.wait_exit(), 0) << d.err_text();
  EXPECT_FALSE(exists(d.sock));
  EXPECT_FALSE(exists(tmpdir));
  EXPECT_TRUE(eventually([&] { return gone(grandchild); })) << "sleep survived toolsrv";
}

// The lifecycle timers, with the daemon in-process and its durations shortened.
struct InProcess {
  std::string dir = temp_dir("inproc");
  Options opt;
  InProcess() {
    world();
    std::filesystem::create_directories(dir + "/cwd");
    opt.address = "unix!" + dir + "/run/toolsrv.sock";
    opt.cwd = dir + "/cwd";
    opt.config_root = dir + "/config";
    opt.secret = test_secret;
    opt.startup_grace = 1s;
    opt.idle_timeout = 1s;
  }
  std::string sock() const { return dir + "/run/toolsrv.sock"; }
};

TEST(ToolsrvLifecycle, ExitsWhenNoClientAttachesInTime) {
  InProcess p;
  Toolsrv srv(p.opt);
  ASSERT_TRUE(srv.start());
  // A connection that never attaches does not keep it alive.
  auto c = p9::Client::dial("unix!" + p.sock());
  ASSERT_TRUE(c);
  auto done = std::async(std::launch::async, [&] { srv.wait(); });
  EXPECT_EQ(done.wait_for(30s), std::future_status::ready);
  EXPECT_FALSE(exists(p.sock()));
}

TEST(ToolsrvLifecycle, ExitsOnceTheLastConnectionClosed) {
  InProcess p;
  Toolsrv srv(p.opt);
  ASSERT_TRUE(srv.start());
  auto done = std::async(std::launch::async, [&] { srv.wait(); });
  {
    auto c = p9::Client::dial("unix!" + p.sock());
    ASSERT_TRUE(c);
    auto afid = (*c)->auth("olliesrv");
    ASSERT_TRUE(afid && afid->write(test_secret));
    auto root = (*c)->attach("olliesrv", "", &*afid);
    ASSERT_TRUE(root);
    // Attached and connected: neither the startup grace nor the idle timeout applies.
    EXPECT_EQ(done.wait_for(3s), std::future_status::timeout);
    EXPECT_TRUE(rdwr(*root, "info", "").ok());
  }
  EXPECT_EQ(done.wait_for(30s), std::future_status::ready);
  EXPECT_FALSE(exists(p.sock()));
}

// Connections that never attach (a client that only said Tversion, a socket that says nothing)
// do not keep toolsrv from its idle exit once the last attached one closed.
TEST(ToolsrvLifecycle, UnattachedConnectionsDoNotPreventTheIdleExit) {
  InProcess p;
  Toolsrv srv(p.opt);
  ASSERT_TRUE(srv.start());
  auto done = std::async(std::launch::async, [&] { srv.wait(); });
  auto idle = p9::Client::dial("unix!" + p.sock());
  ASSERT_TRUE(idle);
  const int raw = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, p.sock().c_str(), sizeof a.sun_path - 1);
  ASSERT_EQ(::connect(raw, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  {
    auto c = p9::Client::dial("unix!" + p.sock());
    ASSERT_TRUE(c);
    auto afid = (*c)->auth("olliesrv");
    ASSERT_TRUE(afid && afid->write(test_secret));
    auto root = (*c)->attach("olliesrv", "", &*afid);
    ASSERT_TRUE(root);
    EXPECT_EQ(done.wait_for(2s), std::future_status::timeout);
  }
  // Idle timeout 1 s; lib9p would close the unattached ones only after its 10 s attach deadline.
  EXPECT_EQ(done.wait_for(5s), std::future_status::ready);
  ::close(raw);
}

}  // namespace
}  // namespace toolsrv::test
