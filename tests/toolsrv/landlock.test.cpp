// Landlock really denies and allows, on the running kernel, through real tool processes.

#include <arpa/inet.h>
#include <elf.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>

#include <gtest/gtest.h>

#include "toolsrv/elf.hpp"
#include "toolsrv/landlock.hpp"
#include "toolsrv/override.hpp"
#include "toolsrv/process.hpp"
#include "toolsrv/spawn.hpp"
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

// /proc is readable (sandbox.yaml), but not another process' environment: Landlock's ptrace
// scope refuses it, unless the tool holds CAP_SYS_PTRACE (toolsrv run by root, as in a container).
// A sandboxed tool holds no capability, so toolsrv's environment (olliesrv's keys, other agents'
// secrets in their tools') stays out of reach either way. `grep` is an exec of the tool's own:
// when the tests run as root, it shows that an exec under no_new_privs gives root nothing back.
TEST_F(LandlockTest, AToolHoldsNoCapabilityAndCannotReadOtherEnvironments) {
  Fixture f;
  f.load("shell");
  const auto r = f.sh("grep -E 'Cap(Inh|Prm|Eff|Amb)' /proc/self/status; cat /proc/" + std::to_string(::getpid()) + "/environ >/dev/null; echo rc=$?");
  EXPECT_EQ(header(r, "status"), "exited") << r;
  EXPECT_EQ(body_stdout(r),
            "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
            "CapAmb:\t0000000000000000\nrc=1\n")
      << r;
}

// Landlock does not govern modes: the filter refuses the setuid and setgid bits to every chmod
// call, inside the sandbox too (a tool of a root olliesrv could make a root-owned program setuid
// root: it owns it), and lets ordinary modes through.
TEST_F(LandlockTest, AToolCannotSetTheSetuidOrSetgidBit) {
  Fixture f;
  f.load("shell");
  write_file(f.cwd + "/prog", "");
  const auto r = f.sh("chmod 4755 prog; echo rc=$?; chmod g+s prog; echo rc=$?; chmod 0755 prog; echo rc=$?; "
                      "chmod 6777 prog; echo rc=$?");
  EXPECT_EQ(body_stdout(r), "rc=1\nrc=1\nrc=0\nrc=1\n") << r;
  EXPECT_NE(body_stderr(r).find("Operation not permitted"), std::string::npos) << r;
  struct stat st {};
  ASSERT_EQ(::stat((f.cwd + "/prog").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

// Nor does it govern a file's mode, owner, times or extended attributes: toolsrv makes those
// changes for the tool, and only under a writable directory of the policy. Outside (here a
// readable directory), through a planted symlink, through a descriptor opened for reading, or on a
// writable file (/dev/null), the change is refused and the file is as it was.
TEST_F(LandlockTest, AToolChangesAFilesMetadataOnlyUnderWritablePaths) {
  const auto ro = temp_dir("meta-ro");
  write_file(ro + "/victim", "v");
  ASSERT_EQ(::chmod((ro + "/victim").c_str(), 0644), 0);
  ASSERT_EQ(::chmod(ro.c_str(), 0755), 0);
  Fixture f(policy_with(", \"" + ro + "\""));
  f.load("shell");
  write_file(f.cwd + "/mine", "m");
  struct stat before {};
  ASSERT_EQ(::stat((ro + "/victim").c_str(), &before), 0);
  const std::string victim = ro + "/victim";
  // perl's chmod and utime take a handle (fchmod, futimens); syscall 188 is setxattr.
  const std::string fchmod = "perl -e 'open(F, q{<}, $ARGV[0]) or die; chmod(0600, *F) or die $!' ";
  const std::string setxattr = "perl -e 'my @a = ($ARGV[0], q{user.k}, q{v}); syscall(188, $a[0], $a[1], $a[2], 1, 0) == 0 or die $!' ";
  const auto r = f.sh("chmod 600 " + victim + "; echo rc=$?; ln -s " + victim + " link; chmod 600 link; echo rc=$?; "
                      "touch -d 2001-01-01 " + victim + "; echo rc=$?; " + fchmod + victim + "; echo rc=$?; " +
                      setxattr + victim + "; echo rc=$?; chmod 000 /dev/null; echo rc=$?; "
                      "chmod 600 mine; echo rc=$?; touch -d 2001-01-01 mine; echo rc=$?; " + setxattr + "mine; echo rc=$?; " +
                      fchmod + "mine; echo rc=$?; chown 4321 mine; echo rc=$?; "
                      "mkdir -p sub/deep && chmod -R 700 sub; echo rc=$?; chmod -R 700 " + ro + "; echo rc=$?; "
                      "cp -p " + victim + " copied; echo rc=$?");
  // The last: a tool holds no CAP_CHOWN, and toolsrv's change for it drops its own (run as root).
  EXPECT_EQ(body_stdout(r), "rc=1\nrc=1\nrc=1\nrc=13\nrc=13\nrc=1\nrc=0\nrc=0\nrc=0\nrc=0\nrc=1\nrc=0\nrc=1\nrc=0\n") << r;
  EXPECT_NE(body_stderr(r).find("chmod: changing permissions of '" + victim + "': Permission denied"), std::string::npos) << r;
  struct stat after {};
  ASSERT_EQ(::stat(victim.c_str(), &after), 0);
  EXPECT_EQ(after.st_mode & 07777, 0644u);
  EXPECT_EQ(after.st_mtime, before.st_mtime);
  char value[8];
  EXPECT_LT(::getxattr(victim.c_str(), "user.k", value, sizeof value), 0);
  struct stat null {};
  ASSERT_EQ(::stat("/dev/null", &null), 0);
  EXPECT_EQ(null.st_mode & 0777, 0666u);
  struct stat mine {};
  ASSERT_EQ(::stat((f.cwd + "/mine").c_str(), &mine), 0);
  EXPECT_EQ(mine.st_mode & 07777, 0600u);
  EXPECT_EQ(mine.st_uid, ::getuid());
  EXPECT_LT(mine.st_mtime, 1000000000);  // 2001-01-01 is 978307200
  EXPECT_EQ(::getxattr((f.cwd + "/mine").c_str(), "user.k", value, sizeof value), 1);
  // chmod -R walks with directory descriptors (fchmodat); cp -p sets the copy's mode and times.
  ASSERT_EQ(::stat((f.cwd + "/sub/deep").c_str(), &mine), 0);
  EXPECT_EQ(mine.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat(ro.c_str(), &after), 0);
  EXPECT_EQ(after.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat((f.cwd + "/copied").c_str(), &mine), 0);
  EXPECT_EQ(mine.st_mode & 07777, 0644u);
  EXPECT_EQ(mine.st_mtime, before.st_mtime);
}

// The check is Landlock's, by the files of the rules it was given, not by names: an rw path the
// tool re-pointed with a link (Landlock skipped it) grants nothing, nor does a detached mount
// tree (open_tree in a user namespace) whose path reads like one under the cwd. /dev/fd is the
// tool's own; setgid may be kept or set on a directory; a memfd may change.
TEST_F(LandlockTest, AToolsMetadataIsCheckedByTheRulesFilesNotByNames) {
  const auto ro = temp_dir("meta-ro");
  std::filesystem::create_directories(ro + "/tree/cwd");
  write_file(ro + "/victim", "v");
  ASSERT_EQ(::chmod((ro + "/victim").c_str(), 0644), 0);
  auto policy = policy_with(", \"" + ro + "\"");
  const std::string rw = "rw:  [\"/dev/null\"]";
  policy.replace(policy.find(rw), rw.size(), "rw:  [\"/dev/null\", \"{CWD}/opt\"]");
  Fixture f(policy);
  f.load("shell");
  std::filesystem::create_directories(f.cwd + "/opt");
  // The copy of the cwd's path inside the tree: the file the detached tree names as <cwd>/victim.
  const auto inner = ro + "/tree" + f.cwd;
  std::filesystem::create_directories(inner);
  write_file(inner + "/victim", "v");
  ASSERT_EQ(::chmod((inner + "/victim").c_str(), 0644), 0);
  write_file(f.cwd + "/detach.py",
             "import ctypes, os, socket, sys\n"
             "libc = ctypes.CDLL(None, use_errno=True)\n"
             "a, b = socket.socketpair()\n"
             "if os.fork() == 0:\n"
             "    if libc.unshare(0x10000000 | 0x00020000) != 0: os._exit(1)\n"
             "    libc.syscall.restype = ctypes.c_long\n"
             "    fd = libc.syscall(428, -100, sys.argv[1].encode(), 1 | 0o2000000)\n"
             "    if fd < 0: os._exit(1)\n"
             "    socket.send_fds(a, [b'x'], [fd]); os._exit(0)\n"
             "try:\n"
             "    _, fds, _, _ = socket.recv_fds(b, 1, 1)\n"
             "    os.chmod(sys.argv[2], 0o600, dir_fd=fds[0]); print('changed')\n"
             "except (OSError, IndexError, ValueError) as e: print('refused', e)\n");
  write_file(f.cwd + "/memfd.py", "import os\nfd = os.memfd_create('m')\nos.fchmod(fd, 0o600); print('memfd', oct(os.fstat(fd).st_mode & 0o777))\n");
  const auto first = f.sh("rm -r opt && ln -s " + ro + " opt && echo planted");
  ASSERT_EQ(body_stdout(first), "planted\n") << first;
  const auto r = f.sh("chmod 600 opt/victim; echo rc=$?; /usr/bin/python3 detach.py " + ro + "/tree " +
                      f.cwd.substr(1) + "/victim; exec 7>f7; chmod 600 /dev/fd/7; echo rc=$?; "
                      "mkdir sg && chmod 2775 sg && mkdir sg/sub && chmod 755 sg/sub; echo rc=$?; "
                      "/usr/bin/python3 memfd.py");
  const auto out = body_stdout(r);
  EXPECT_EQ(out.substr(0, 5), "rc=1\n") << r;
  EXPECT_NE(out.find("refused [Errno 13] Permission denied"), std::string::npos) << r;  // by the guard
  EXPECT_NE(out.find("rc=0\nrc=0\nmemfd 0o600\n"), std::string::npos) << r;
  struct stat st {};
  ASSERT_EQ(::stat((ro + "/victim").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  ASSERT_EQ(::stat((inner + "/victim").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  ASSERT_EQ(::stat((f.cwd + "/f7").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::stat((f.cwd + "/sg/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 02755u);
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

// §7.3.2: a rule path behind a link the sandbox can write grants nothing. With the session cwd
// = $HOME, `.config/git` (ro) and the data root's `optmem` (rw) lie in the writable cwd: a link
// planted there would grant whatever it names, and toolsrv would make the rw directory wherever
// a planted parent points.
TEST(SandboxPlan, ARulePathBehindALinkTheSandboxCanWriteIsSkipped) {
  const auto dir = temp_dir("planted");
  const auto home = dir + "/home", secret = dir + "/secret", away = dir + "/away";
  for (const auto& d : {home + "/.config", home + "/plain", secret, away}) std::filesystem::create_directories(d);
  std::filesystem::create_directory_symlink(secret, home + "/.config/git");
  std::filesystem::create_directory_symlink(away, home + "/.local");
  Policy policy;
  policy.ro = {home + "/.config/git", home + "/plain", secret};
  policy.rw = {"{OLLIE_DATA_PATH}/optmem"};
  policy.rwx = {"{CWD}"};
  const auto data = home + "/.local/share/ollie";
  const auto vars = TemplateVars::for_call(home, dir, dir, data, dir);
  const auto plan = plan_sandbox(policy, vars, writable_paths(policy, vars), {}, data, "");
  std::vector<std::string> granted;
  for (const auto& r : plan.rules) granted.push_back(r.path);
  EXPECT_EQ(granted, (std::vector<std::string>{home + "/plain", secret, home})) << ::testing::PrintToString(plan.skipped);
  EXPECT_FALSE(std::filesystem::exists(away + "/share")) << "made through a planted link";
  EXPECT_EQ(plan.skipped, (std::vector<std::string>{home + "/.config/git: a link the sandbox can write is on the way",
                                                    data + "/optmem: a link the sandbox can write is on the way"}));
}

// The hostowner's own link leads a policy path into the writable cwd (dotfiles: ~/.config/git ->
// ~/dotfiles/git, the agent working in ~/dotfiles). The model cannot touch the link, but it can
// replace what it leads to with a link of its own: that one sits in a writable directory, so the
// path grants nothing. Before, only a path written under a writable one was walked, and the model's
// link to any directory was followed. Every rule is built from the descriptor its check opened
// (PathRule::fd): nothing is opened by name again, so no link swapped in after the check counts.
TEST(SandboxPlan, AHostownersLinkIntoTheCwdIsFollowedButNotTheModelsLinkBeyondIt) {
  const auto dir = temp_dir("dotfiles");
  const auto home = dir + "/home", cwd = dir + "/home/dotfiles", secret = dir + "/secret";
  for (const auto& d : {home + "/.config", cwd + "/git", secret}) std::filesystem::create_directories(d);
  std::filesystem::create_directory_symlink(cwd + "/git", home + "/.config/git");  // the hostowner's
  Policy policy;
  policy.ro = {home + "/.config/git", "/usr"};
  policy.rwx = {"{CWD}"};
  const auto vars = TemplateVars::for_call(cwd, dir, dir, "", dir);
  {
    const auto plan = plan_sandbox(policy, vars, writable_paths(policy, vars), {}, "", "");
    ASSERT_EQ(plan.rules.size(), 3u) << ::testing::PrintToString(plan.skipped);
    struct stat st {};
    ASSERT_EQ(::stat((cwd + "/git").c_str(), &st), 0);
    EXPECT_EQ(plan.rules[0].path, home + "/.config/git");
    EXPECT_EQ(plan.rules[0].ino, st.st_ino);
    for (const auto& r : plan.rules) EXPECT_GE(r.fd, 0) << r.path;
  }
  std::filesystem::remove(cwd + "/git");
  std::filesystem::create_directory_symlink(secret, cwd + "/git");  // the model's
  const auto plan = plan_sandbox(policy, vars, writable_paths(policy, vars), {}, "", "");
  std::vector<std::string> granted;
  for (const auto& r : plan.rules) granted.push_back(r.path);
  EXPECT_EQ(granted, (std::vector<std::string>{"/usr", cwd})) << ::testing::PrintToString(plan.skipped);
  EXPECT_EQ(plan.skipped, (std::vector<std::string>{home + "/.config/git: a link the sandbox can write is on the way"}));
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
  auto a = cache.get(plan_sandbox(policy, vars, writable_paths(policy, vars), {}, "", ""), abi);
  auto b = cache.get(plan_sandbox(policy, vars, writable_paths(policy, vars), {}, "", ""), abi);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(cache.built(), 1u);
  // Same path, another file: a new ruleset.
  write_file(dir + "/g", "y");
  std::filesystem::rename(dir + "/g", dir + "/f");
  auto c = cache.get(plan_sandbox(policy, vars, writable_paths(policy, vars), {}, "", ""), abi);
  ASSERT_TRUE(c);
  EXPECT_NE(a->get(), c->get());
  EXPECT_EQ(cache.built(), 2u);
  // Another cwd, another network section: new rulesets; the first cwd's is still kept.
  const auto other = TemplateVars::for_call("/tmp", dir, dir, dir, dir);
  EXPECT_TRUE(cache.get(plan_sandbox(policy, other, writable_paths(policy, other), {}, "", ""), abi));
  EXPECT_EQ(cache.built(), 3u);
  policy.network.unrestricted = false;
  EXPECT_TRUE(cache.get(plan_sandbox(policy, vars, writable_paths(policy, vars), {}, "", ""), abi));
  EXPECT_EQ(cache.built(), 4u);
  policy.network.unrestricted = true;
  auto d = cache.get(plan_sandbox(policy, vars, writable_paths(policy, vars), {}, "", ""), abi);
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

// ---- a cwd retargeted through a symlink ----

// Agent a1 (sandboxed, cwd rwx) replaces a2's cwd, a directory inside its own, by a symlink to
// `/`. a2's next call must not get `/` as {CWD}: the cwd was resolved and held when it was set,
// and a call whose cwd no longer resolves there fails, having run nothing.
TEST_F(LandlockTest, CwdReplacedBySymlinkFailsTheCallAndGrantsNothing) {
  Fixture f;
  f.load("shell");
  ASSERT_TRUE(f.session->load("a2", {"shell"}));
  std::filesystem::create_directories(f.cwd + "/sub");
  ASSERT_TRUE(f.session->set_agent_cwd("a2", f.cwd + "/sub"));
  const auto owned = world().home + "/owned-" + std::to_string(::getpid());
  auto a2 = [&] { return f.run("tool=shell\nagent=a2\n\n{\"cmd\":\"echo x > " + owned + "; pwd\"}"); };
  auto r = a2();
  EXPECT_EQ(body_stdout(r), f.cwd + "/sub\n") << r;
  EXPECT_FALSE(std::filesystem::exists(owned));
  r = f.sh("rm -r sub && ln -s / sub && echo swapped");
  ASSERT_EQ(body_stdout(r), "swapped\n") << r;
  r = a2();
  EXPECT_EQ(header(r, "status"), "failed") << r;
  EXPECT_EQ(body_stderr(r), "cwd changed since it was set: " + f.cwd + "/sub\n");
  EXPECT_FALSE(std::filesystem::exists(owned));
  // Setting it again resolves it again: the hostowner asked for `/` now.
  std::filesystem::remove(f.cwd + "/sub");
  std::filesystem::create_directories(f.cwd + "/sub");
  EXPECT_EQ(header(a2(), "status"), "failed");
  ASSERT_TRUE(f.session->set_agent_cwd("a2", f.cwd + "/sub"));
  EXPECT_EQ(header(a2(), "status"), "exited");
  std::filesystem::remove(owned);
}

// The same for the session cwd, moved away and replaced: the held directory is no longer where
// it was resolved.
TEST_F(LandlockTest, SessionCwdMovedAwayFailsTheCall) {
  Fixture f;
  f.load("shell");
  const auto base = temp_dir("movedcwd");
  std::filesystem::create_directories(base + "/proj");
  ASSERT_TRUE(f.session->set_cwd(base + "/proj"));
  EXPECT_EQ(body_stdout(f.sh("pwd")), base + "/proj\n");
  std::filesystem::rename(base + "/proj", base + "/moved");
  std::filesystem::create_directory_symlink("/", base + "/proj");
  const auto r = f.sh("ls /");
  EXPECT_EQ(header(r, "status"), "failed") << r;
  EXPECT_EQ(body_stderr(r), "cwd changed since it was set: " + base + "/proj\n");
}

// ---- advanced.ldd ----

// A minimal ELF64 executable (no code) with PT_INTERP `interp` and these DT_NEEDED names.
std::string crafted_elf(const std::string& interp, const std::vector<std::string>& needed) {
  std::string strtab(1, '\0');
  std::vector<Elf64_Dyn> dyn;
  for (const auto& n : needed) {
    dyn.push_back({DT_NEEDED, {strtab.size()}});
    strtab += n + '\0';
  }
  const std::size_t interp_off = sizeof(Elf64_Ehdr) + 3 * sizeof(Elf64_Phdr);
  const std::size_t str_off = interp_off + interp.size() + 1;
  const std::size_t dyn_off = (str_off + strtab.size() + 7) & ~std::size_t{7};
  dyn.push_back({DT_STRTAB, {str_off}});
  dyn.push_back({DT_STRSZ, {strtab.size()}});
  dyn.push_back({DT_NULL, {0}});
  const std::size_t size = dyn_off + dyn.size() * sizeof(Elf64_Dyn);
  std::string out(size, '\0');
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_EXEC;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_phoff = sizeof eh;
  eh.e_ehsize = sizeof eh;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = 3;
  const Elf64_Phdr ph[3] = {
      {PT_LOAD, PF_R, 0, 0, 0, size, size, 4096},
      {PT_INTERP, PF_R, interp_off, interp_off, interp_off, interp.size() + 1, interp.size() + 1, 1},
      {PT_DYNAMIC, PF_R, dyn_off, dyn_off, dyn_off, dyn.size() * sizeof(Elf64_Dyn), dyn.size() * sizeof(Elf64_Dyn), 8},
  };
  std::memcpy(out.data(), &eh, sizeof eh);
  std::memcpy(out.data() + sizeof eh, ph, sizeof ph);
  std::memcpy(out.data() + interp_off, interp.c_str(), interp.size() + 1);
  std::memcpy(out.data() + str_off, strtab.data(), strtab.size());
  std::memcpy(out.data() + dyn_off, dyn.data(), dyn.size() * sizeof(Elf64_Dyn));
  return out;
}

// Runs argv under `ruleset` (real spawn, real Landlock) and returns its stdout.
std::string run_confined(UniqueFd ruleset, const std::vector<std::string>& argv) {
  ProcessTable t;
  Launch l;
  l.tool = "probe";
  l.agent = "a1";
  l.spec.argv = argv;
  l.spec.env = {"PATH=/usr/bin:/bin"};
  l.spec.cwd = "/";
  l.ruleset = std::make_shared<const UniqueFd>(std::move(ruleset));
  auto p = start_sync(t, std::move(l));
  for (int i = 0; i < 3000 && !p->finished(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto r = p->reply();
  return r.substr(r.find("\n\n") + 2, std::stoul(header(r, "stdout")));
}

// A crafted executable naming `/` (as its interpreter and as a needed object) and other
// directories: ldd grants none of them, only regular files the loader would map, so the ruleset
// built from the plan still keeps a secret under $HOME unreadable.
TEST_F(LandlockTest, LddOfACraftedExecutableNamingRootGrantsNoDirectory) {
  const auto tools = temp_dir("lddcraft");
  write_file(tools + "/crafted", crafted_elf("/", {"/", "/tmp", "sub/../..", "libc.so.6"}), 0755);
  write_file(world().home + "/ldd-secret", "s3cret\n");
  const auto libs = linked_libraries(tools + "/crafted");
  EXPECT_NE(std::find_if(libs.begin(), libs.end(), [](auto& l) { return l.ends_with("/libc.so.6"); }), libs.end());
  for (const auto& l : libs) EXPECT_TRUE(std::filesystem::is_regular_file(l)) << l;
  Policy policy;
  policy.rox = {"/usr", "/bin", "/lib", "/lib64"};
  policy.ldd = true;
  const auto vars = TemplateVars::for_call(temp_dir("cwd"), "/tmp", "/cfg", "/data", "/usr/bin");
  const auto plan = plan_sandbox(policy, vars, writable_paths(policy, vars), {}, "", tools + "/crafted");
  for (const auto& r : plan.rules) EXPECT_NE(r.path, "/") << "a directory named by an ELF file was granted";
  auto ruleset = build_ruleset(plan, landlock_abi());
  ASSERT_TRUE(ruleset) << ruleset.ename();
  EXPECT_EQ(run_confined(std::move(*ruleset), {"/bin/sh", "-c", "cat " + world().home + "/ldd-secret; echo done"}), "done\n");
}

// An executable inside a writable path may have been written by the model: ldd reads nothing
// from it and grants nothing for it.
TEST_F(LandlockTest, LddReadsNoExecutableInsideAWritablePath) {
  const auto cwd = temp_dir("lddcwd");
  std::filesystem::copy_file("/usr/bin/true", cwd + "/mytrue");
  Policy policy;
  policy.rwx = {"{CWD}"};
  policy.ldd = true;
  const auto vars = TemplateVars::for_call(cwd, "/tmp", "/cfg", "/data", "/usr/bin");
  EXPECT_TRUE(linked_libraries(cwd + "/mytrue", writable_paths(policy, vars)).empty());
  const auto plan = plan_sandbox(policy, vars, writable_paths(policy, vars), {}, "", cwd + "/mytrue");
  ASSERT_EQ(plan.rules.size(), 1u);
  EXPECT_EQ(plan.rules[0].path, cwd);
  // The same file outside every writable path is read as before.
  EXPECT_GT(plan_sandbox(policy, vars, writable_paths(policy, vars), {}, "", "/usr/bin/true").rules.size(), 1u);
}

// ---- network ----

// `enabled: false` means no TCP at all, whatever `unrestricted` says (§7.3.1, revised): neither
// connect nor bind.
TEST_F(LandlockTest, NetworkDisabledRefusesTcpWhateverUnrestrictedSays) {
  Listener l;
  const std::string bind_cmd = "/usr/bin/python3 -c 'import socket; socket.socket().bind((str(), 0))' 2>/dev/null && echo bound || echo refused";
  for (const std::string net : {"network: {enabled: false}", "network: {enabled: false, unrestricted: true}"}) {
    Fixture f(policy_with("", net));
    f.load("shell");
    EXPECT_EQ(body_stdout(f.sh(connect_cmd(l.port))), "refused\n") << net;
    EXPECT_EQ(body_stdout(f.sh(bind_cmd)), "refused\n") << net;
  }
  Fixture open(policy_with("", "network: {enabled: true}"));
  open.load("shell");
  EXPECT_EQ(body_stdout(open.sh(connect_cmd(l.port))), "connected\n");
  EXPECT_EQ(body_stdout(open.sh(bind_cmd)), "bound\n");
}

// ---- .ollie-sandbox.yaml size ----

// A file the model can write in its cwd must not stop its calls: too large to be approved, it is
// ignored as an unapproved one is (no header: it was not read to be hashed).
TEST_F(LandlockTest, OversizedOverrideIsIgnoredAndTheCallRuns) {
  Fixture f;
  f.load("shell");
  const auto path = f.cwd + "/.ollie-sandbox.yaml";
  write_file(path, std::string(override_max_bytes + 1, '#'));
  const auto r = f.sh("echo ran");
  EXPECT_EQ(header(r, "status"), "exited") << r;
  EXPECT_EQ(body_stdout(r), "ran\n") << r;
  EXPECT_EQ(header(r, "override"), "") << r;
  write_file(path, "# small\n");
  EXPECT_EQ(header(f.sh("true"), "override"), sha256_hex("# small\n") + " ignored");
}

}  // namespace
}  // namespace toolsrv::test
