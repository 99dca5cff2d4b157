// Landlock really denies and allows, on the running kernel, through real tool processes.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include "toolsrv/elf.hpp"
#include "toolsrv/landlock.hpp"
#include "world.hpp"

namespace toolsrv::test {
namespace {

class LandlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (landlock_abi() < 6) GTEST_SKIP() << "needs Landlock ABI 6 (kernel has " << landlock_abi() << ")";
  }
};

std::string policy_with(const std::string& extra_fs, const std::string& network = "network: {enabled: true, unrestricted: true}") {
  return "general: {best_effort: false}\n"
         "filesystem:\n"
         "  ro:  [\"/etc\", \"/proc\", \"/dev/urandom\"" + extra_fs + "]\n"
         "  rox: [\"/usr\", \"/bin\", \"/lib\", \"/lib64\"]\n"
         "  rw:  [\"/dev/null\"]\n"
         "  rwx: [\"{CWD}\", \"{TMPDIR}\"]\n" + network + "\n"
         "env: [HOME, PATH]\n";
}

// A loopback TCP listener on an ephemeral port.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd, 8);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
};

std::string connect_cmd(int port) {
  return "bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(port) + "' 2>/dev/null && echo connected || echo refused";
}

TEST_F(LandlockTest, AbiIsNegotiated) {
  EXPECT_GE(landlock_abi(), 1);
  EXPECT_TRUE(landlock_missing_reason().empty());
}

TEST_F(LandlockTest, ReadOutsideAllowedPathsDenied) {
  Fixture f;
  f.load("shell");
  write_file(world().home + "/secret", "s3cret\n");
  const auto r = f.sh("cat $HOME/secret; echo rc=$?");
  EXPECT_EQ(header(r, "status"), "exited");
  EXPECT_EQ(body_stdout(r).find("s3cret"), std::string::npos) << r;
  EXPECT_NE(body_stdout(r).find("rc=1"), std::string::npos) << r;
  EXPECT_NE(body_stderr(r).find("Permission denied"), std::string::npos) << r;
}

TEST_F(LandlockTest, ReadInsideAllowedPathsWorks) {
  Fixture f;
  f.load("shell");
  write_file(f.cwd + "/mine.txt", "hello\n");
  const auto r = f.sh("cat mine.txt && head -c 4 /etc/hostname >/dev/null && echo ok");
  EXPECT_EQ(body_stdout(r), "hello\nok\n") << r;
}

TEST_F(LandlockTest, WriteOutsideRwDeniedSharedTmpIncluded) {
  Fixture f;
  f.load("shell");
  const auto outside = "/tmp/toolsrv-landlock-" + std::to_string(::getpid());
  const auto r = f.sh("echo x > " + outside + "; echo rc=$?; echo y > $HOME/planted; echo rc=$?");
  EXPECT_EQ(body_stdout(r), "rc=2\nrc=2\n") << r;  // dash: a failed redirection is status 2
  EXPECT_NE(body_stderr(r).find("cannot create " + outside + ": Permission denied"), std::string::npos) << r;
  EXPECT_FALSE(std::filesystem::exists(outside));
  EXPECT_FALSE(std::filesystem::exists(world().home + "/planted"));
}

TEST_F(LandlockTest, WriteInCwdAndPrivateTmpdirWorks) {
  Fixture f;
  f.load("shell");
  const auto r = f.sh("echo x > out.txt && echo y > $TMPDIR/t && mkdir d && mv out.txt d/ && echo ok");
  EXPECT_EQ(body_stdout(r), "ok\n") << r;
  EXPECT_TRUE(std::filesystem::exists(f.cwd + "/d/out.txt"));
}

TEST_F(LandlockTest, ExecuteOutsideRoxDenied) {
  const auto dir = temp_dir("ro");
  std::filesystem::copy_file("/usr/bin/true", dir + "/mytrue");
  Fixture f(policy_with(", \"" + dir + "\""));
  f.load("shell");
  std::filesystem::copy_file("/usr/bin/true", f.cwd + "/cwdtrue");
  const auto r = f.sh(dir + "/mytrue; echo rc=$?; ./cwdtrue; echo rc=$?; cat " + dir + "/mytrue > /dev/null; echo rc=$?");
  // rc=126: exec refused (EACCES); the cwd (rwx) may execute; the ro dir can still be read.
  EXPECT_EQ(body_stdout(r), "rc=126\nrc=0\nrc=0\n") << r;
}

// advanced.ldd grants the ELF interpreter and the shared objects of the tool's executable: with no
// rox on /usr or /lib, a dynamically linked tool cannot even start without it, and runs with it.
TEST_F(LandlockTest, LddGrantsWhatTheToolsExecutableLinks) {
  const auto tools = temp_dir("lddtools");
  std::filesystem::copy_file("/usr/bin/true", tools + "/mytrue");
  write_file(tools + "/mytrue.meta", "{\"description\": \"true (test fixture)\", \"scope\": \"read\"}");
  auto policy = [](bool ldd) {
    return std::string("general: {best_effort: false}\nfilesystem:\n  ro: [\"/etc\"]\n  rwx: [\"{CWD}\", \"{TMPDIR}\"]\n"
                       "network: {enabled: true, unrestricted: true}\nadvanced: {ldd: ") +
           (ldd ? "true" : "false") + "}\n";
  };
  Fixture without(policy(false), std::chrono::seconds(300), tools);
  without.load("mytrue");
  auto r = without.run("tool=mytrue\nagent=a1\n\n{}");
  EXPECT_EQ(header(r, "status"), "failed") << r;
  Fixture with(policy(true), std::chrono::seconds(300), tools);
  with.load("mytrue");
  r = with.run("tool=mytrue\nagent=a1\n\n{}");
  EXPECT_EQ(header(r, "status"), "exited") << r;
  EXPECT_EQ(header(r, "exit"), "0") << r;
}

TEST(Elf, LinkedLibrariesOfADynamicExecutable) {
  const auto libs = linked_libraries("/usr/bin/true");
  ASSERT_FALSE(libs.empty());
  EXPECT_EQ(libs.front(), "/lib64/ld-linux-x86-64.so.2");  // PT_INTERP first
  EXPECT_NE(std::find_if(libs.begin(), libs.end(), [](auto& l) { return l.ends_with("/libc.so.6"); }), libs.end());
  EXPECT_TRUE(linked_libraries("/bin/sh").size() >= 2);
  const auto script = temp_dir("elf") + "/script";
  write_file(script, "#!/bin/sh\ntrue\n");
  EXPECT_TRUE(linked_libraries(script).empty());  // not ELF: nothing
  write_file(script, std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(100, '\xff'));
  EXPECT_TRUE(linked_libraries(script).empty());  // headers pointing nowhere: nothing, no crash
  EXPECT_TRUE(linked_libraries("/nonexistent").empty());
}

TEST_F(LandlockTest, TcpConnectDeniedWhenNetworkOff) {
  Listener l;
  Fixture f(policy_with("", "network: {enabled: false, unrestricted: false}"));
  f.load("shell");
  EXPECT_EQ(body_stdout(f.sh(connect_cmd(l.port))), "refused\n");
}

TEST_F(LandlockTest, TcpConnectOnlyToListedPorts) {
  Listener listed, other;
  Fixture f(policy_with("", "network: {enabled: true, unrestricted: false, connect_tcp: [" + std::to_string(listed.port) + "]}"));
  f.load("shell");
  EXPECT_EQ(body_stdout(f.sh(connect_cmd(listed.port))), "connected\n");
  EXPECT_EQ(body_stdout(f.sh(connect_cmd(other.port))), "refused\n");
}

TEST_F(LandlockTest, TcpConnectAllowedWhenUnrestricted) {
  Listener l;
  Fixture f;
  f.load("shell");
  EXPECT_EQ(body_stdout(f.sh(connect_cmd(l.port))), "connected\n");
}

TEST_F(LandlockTest, SignalOutsideSandboxDenied) {
  const pid_t victim = ::fork();
  if (victim == 0) {
    ::execl("/usr/bin/sleep", "sleep", "30", nullptr);
    ::_exit(127);
  }
  Fixture f;
  f.load("shell");
  const auto r = f.sh("kill -TERM " + std::to_string(victim) + "; echo rc=$?; sleep 0.1 & kill -TERM $! && echo own=ok");
  EXPECT_NE(body_stdout(r).find("rc=1"), std::string::npos) << r;
  EXPECT_NE(body_stdout(r).find("own=ok"), std::string::npos) << r;
  EXPECT_EQ(::waitpid(victim, nullptr, WNOHANG), 0) << "the process outside the sandbox was killed";
  ::kill(victim, SIGKILL);
  ::waitpid(victim, nullptr, 0);
}

TEST_F(LandlockTest, MissingSandboxYamlFailsEveryCall) {
  Fixture f("");
  f.load("echo");
  const auto r = f.run("tool=echo\nagent=a1\n\n{}");
  EXPECT_EQ(header(r, "status"), "failed");
  EXPECT_EQ(body_stderr(r).rfind("sandbox.yaml: cannot open", 0), 0u) << r;
}

TEST_F(LandlockTest, UnparsableSandboxYamlFailsEveryCall) {
  Fixture f("filesystem: [unclosed\n");
  f.load("echo");
  const auto r = f.run("tool=echo\nagent=a1\n\n{}");
  EXPECT_EQ(header(r, "status"), "failed");
  EXPECT_EQ(body_stderr(r).rfind("sandbox.yaml: line ", 0), 0u) << r;
}

TEST_F(LandlockTest, UnapprovedOverrideIgnoredAndReported) {
  Fixture f;
  f.load("shell");
  write_file(world().home + "/granted", "g\n");
  const std::string override_text = "filesystem:\n  ro: [\"" + world().home + "\"]\n";
  write_file(f.cwd + "/.ollie-sandbox.yaml", override_text);
  const auto sha = sha256_hex(override_text);
  auto r = f.sh("cat $HOME/granted");
  EXPECT_EQ(header(r, "override"), sha + " ignored") << r;
  EXPECT_EQ(body_stdout(r), "");
  // The same file approved in another directory is still not approved.
  ASSERT_TRUE(f.session->set_approvals({{sha, "/elsewhere"}}));
  EXPECT_EQ(header(f.sh("true"), "override"), sha + " ignored");
  ASSERT_TRUE(f.session->set_approvals({{sha, f.cwd}}));
  r = f.sh("cat $HOME/granted");
  EXPECT_EQ(header(r, "override"), sha + " applied") << r;
  EXPECT_EQ(body_stdout(r), "g\n");
}

TEST_F(LandlockTest, SymlinkedOverrideIgnored) {
  Fixture f;
  f.load("shell");
  const auto real = temp_dir("ovr") + "/o.yaml";
  write_file(real, "filesystem: {ro: [\"/\"]}\n");
  std::filesystem::create_symlink(real, f.cwd + "/.ollie-sandbox.yaml");
  ASSERT_TRUE(f.session->set_approvals({{sha256_hex(read_file(real)), f.cwd}}));
  const auto r = f.sh("true");
  EXPECT_EQ(header(r, "override"), "");
  EXPECT_EQ(header(r, "status"), "exited");
}

// sandbox.yaml is read at every call: an edit takes effect at the next one, in both directions,
// and a file that breaks it fails the calls until it is fixed.
TEST_F(LandlockTest, SandboxYamlEditTakesEffectOnTheNextCall) {
  Fixture f(policy_with(""));
  f.load("shell");
  const auto dir = temp_dir("granted");
  write_file(dir + "/g", "g\n");
  EXPECT_EQ(body_stdout(f.sh("cat " + dir + "/g")), "");
  write_file(f.config + "/sandbox.yaml", policy_with(", \"" + dir + "\""));
  EXPECT_EQ(body_stdout(f.sh("cat " + dir + "/g")), "g\n");
  write_file(f.config + "/sandbox.yaml", "filesystem: [unclosed\n");
  auto r = f.sh("cat " + dir + "/g");
  EXPECT_EQ(header(r, "status"), "failed");
  EXPECT_EQ(body_stderr(r).rfind("sandbox.yaml: line ", 0), 0u) << r;
  write_file(f.config + "/sandbox.yaml", policy_with(""));
  EXPECT_EQ(body_stdout(f.sh("cat " + dir + "/g")), "");
  write_file(f.config + "/sandbox.yaml", policy_with(", \"" + dir + "\""));
  EXPECT_EQ(body_stdout(f.sh("cat " + dir + "/g")), "g\n");
}

// Rulesets are reused between calls, yet every call sees the files as they are at its start: a
// granted file replaced by rename (a new inode, as editors save) stays granted, a granted path
// created after an earlier call is granted, one removed is not.
TEST_F(LandlockTest, GrantedPathsAreResolvedAtEveryCall) {
  const auto dir = temp_dir("paths");
  write_file(dir + "/file", "one\n");
  Fixture f(policy_with(", \"" + dir + "/file\", \"" + dir + "/later\""));
  f.load("shell");
  EXPECT_EQ(body_stdout(f.sh("cat " + dir + "/file")), "one\n");
  EXPECT_EQ(body_stdout(f.sh("cat " + dir + "/file")), "one\n");
  write_file(dir + "/file.new", "two\n");
  std::filesystem::rename(dir + "/file.new", dir + "/file");
  EXPECT_EQ(body_stdout(f.sh("cat " + dir + "/file")), "two\n");
  EXPECT_EQ(body_stdout(f.sh("cat " + dir + "/later")), "");
  write_file(dir + "/later", "later\n");
  EXPECT_EQ(body_stdout(f.sh("cat " + dir + "/later")), "later\n");
  std::filesystem::remove(dir + "/later");
  write_file(dir + "/other", "other\n");
  std::filesystem::create_symlink(dir + "/other", dir + "/later");
  EXPECT_EQ(body_stdout(f.sh("cat " + dir + "/later")), "other\n");
  EXPECT_EQ(body_stdout(f.sh("cat " + dir + "/file")), "two\n");
}

// Calls that share a ruleset still get a Landlock domain each: a later call cannot signal a
// background process of an earlier one (§7.3.2).
TEST_F(LandlockTest, EveryCallGetsItsOwnDomain) {
  Fixture f;
  f.load("shell");
  std::promise<p9::Result<int>> p;
  ASSERT_TRUE(f.session->call_background(*parse_call_request("tool=shell\nagent=a1\n\n{\"cmd\":\"exec sleep 30\"}"),
                                         [&](p9::Result<int> r) { p.set_value(std::move(r)); }));
  const auto pid = p.get_future().get();
  ASSERT_TRUE(pid);
  auto proc = f.session->processes().find(*pid);
  ASSERT_TRUE(proc);
  const auto r = f.sh("kill -TERM " + std::to_string(proc->os_pid()) + "; echo rc=$?");
  EXPECT_NE(body_stdout(r).find("rc=1"), std::string::npos) << r;
  EXPECT_FALSE(proc->finished());
  f.session->processes().dismiss(*pid);
}

TEST(LandlockAbi, RulesetCacheReusesOnlyAnEqualPlan) {
  const int abi = landlock_abi();
  if (abi == 0) GTEST_SKIP() << "no Landlock";
  const auto dir = temp_dir("cache");
  write_file(dir + "/f", "x");
  Policy policy;
  policy.ro = {dir + "/f"};
  policy.rwx = {"{CWD}"};
  const auto vars = TemplateVars::for_call(dir, dir, dir, dir, dir);
  RulesetCache cache;
  auto a = cache.get(plan_sandbox(policy, vars, {}, "", ""), abi);
  auto b = cache.get(plan_sandbox(policy, vars, {}, "", ""), abi);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(cache.built(), 1u);
  // Same path, another file: a new ruleset.
  write_file(dir + "/g", "y");
  std::filesystem::rename(dir + "/g", dir + "/f");
  auto c = cache.get(plan_sandbox(policy, vars, {}, "", ""), abi);
  ASSERT_TRUE(c);
  EXPECT_NE(a->get(), c->get());
  EXPECT_EQ(cache.built(), 2u);
  // Another cwd, another network section: new rulesets; the first cwd's is still kept.
  const auto other = TemplateVars::for_call("/tmp", dir, dir, dir, dir);
  EXPECT_TRUE(cache.get(plan_sandbox(policy, other, {}, "", ""), abi));
  EXPECT_EQ(cache.built(), 3u);
  policy.network.unrestricted = false;
  EXPECT_TRUE(cache.get(plan_sandbox(policy, vars, {}, "", ""), abi));
  EXPECT_EQ(cache.built(), 4u);
  policy.network.unrestricted = true;
  auto d = cache.get(plan_sandbox(policy, vars, {}, "", ""), abi);
  ASSERT_TRUE(d);
  EXPECT_EQ(c->get(), d->get());
  EXPECT_EQ(cache.built(), 4u);
}

TEST(LandlockAbi, UnenforceablePoliciesNamed) {
  SandboxPlan plan;
  EXPECT_EQ(*sandbox_unavailable(plan, 2), "sandbox unavailable: truncate needs Landlock ABI 3, kernel has 2");
  EXPECT_FALSE(sandbox_unavailable(plan, 3));
  plan.network.unrestricted = false;
  EXPECT_EQ(*sandbox_unavailable(plan, 3), "sandbox unavailable: network needs Landlock ABI 4, kernel has 3");
  EXPECT_FALSE(sandbox_unavailable(plan, 4));
  EXPECT_EQ(sandbox_unavailable(plan, 0)->rfind("sandbox unavailable: Landlock not supported by this kernel", 0), 0u);
}

TEST(LandlockAbi, RulesetBuildsOnEveryAbiUpToTheKernels) {
  const int abi = landlock_abi();
  if (abi == 0) GTEST_SKIP() << "no Landlock";
  SandboxPlan plan;
  plan.rules = {{"/usr", Access::rox}, {"/etc/hostname", Access::rw}, {"/tmp", Access::rwx}};
  plan.network.unrestricted = false;
  plan.network.connect_tcp = {443};
  for (int a = 1; a <= abi; ++a) {
    auto r = build_ruleset(plan, a);
    EXPECT_TRUE(r) << "ABI " << a << ": " << (r ? "" : r.ename());
  }
}

}  // namespace
}  // namespace toolsrv::test
