// Pathname Unix sockets under the sandbox (spec §7.3, issue 14): tools reach only the sockets of the
// `unix` list and {OLLIE_ADDR}'s, with the real kernel (the seccomp filter below Landlock ABI 9,
// Landlock's RESOLVE_UNIX from it). The tool is tests/toolsrv/data/unixprobe.py, run by the shell
// fixture; the servers are in this process, outside the sandbox.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <thread>

#include "toolsrv/landlock.hpp"
#include "toolsrv/unixsock.hpp"
#include "world.hpp"

namespace toolsrv::test {
namespace {

using namespace std::chrono_literals;

bool mediated() { return landlock_resolves_unix(landlock_abi()) || unix_notify_available(); }

/// A listening (stream) or bound (datagram) socket at `path`, non-blocking.
struct Server {
  std::string path;
  int type;
  UniqueFd fd;

  Server(std::string p, int t) : path(std::move(p)), type(t) {
    fd.reset(::socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) throw std::runtime_error("bind " + path);
    if (type == SOCK_STREAM && ::listen(fd.get(), 256) != 0) throw std::runtime_error("listen");
  }

  /// What every connection made so far sent (the tools are done: each ends with EOF).
  std::vector<std::string> connections() {
    std::vector<std::string> out;
    while (true) {
      UniqueFd c(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) return out;
      std::string got;
      char buf[256];
      for (ssize_t n; (n = ::read(c.get(), buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
      out.push_back(got);
    }
  }

  std::vector<std::string> datagrams() {
    std::vector<std::string> out;
    char buf[256];
    for (ssize_t n; (n = ::recv(fd.get(), buf, sizeof buf, 0)) >= 0;) out.emplace_back(buf, static_cast<std::size_t>(n));
    return out;
  }
};

/// The shipped policy with `unix_list` as its `unix` list and `extra` appended.
std::string policy_with(const std::string& unix_list, const std::string& extra = "") {
  auto text = default_policy();
  const auto at = text.find("\nunix: [");
  const auto end = at == std::string::npos ? at : text.find("]\n", at);
  if (end == std::string::npos) throw std::runtime_error("the shipped sandbox.yaml has no `unix: [...]` line");
  return text.replace(at, end + 2 - at, "\nunix: [" + unix_list + "]\n") + extra;
}

/// A session whose policy lists `unix_list`, with the probe in its cwd.
struct UnixFixture : Fixture {
  std::string socks = temp_dir("sock");

  explicit UnixFixture(const std::string& unix_list = "", const std::string& extra = "")
      : Fixture(policy_with(unix_list, extra)) {
    write_file(cwd + "/unixprobe.py", read_file(data_dir + "/unixprobe.py"));
    load("shell");
  }

  std::string probe(const std::string& args) {
    const auto r = sh("/usr/bin/python3 unixprobe.py " + args);
    EXPECT_EQ(header(r, "status"), "exited") << r;
    EXPECT_EQ(body_stderr(r), "") << r;
    return body_stdout(r);
  }
};

/// Waits (on the process' notifications) until `p` is finished.
bool wait_finished(const std::shared_ptr<Process>& p, std::chrono::seconds limit = 120s) {
  while (!p->finished()) {
    const auto seen = p->version();
    auto woken = std::make_shared<std::promise<void>>();
    auto sub = p->when_changed(seen, [woken] { woken->set_value(); });
    if (woken->get_future().wait_for(limit) != std::future_status::ready) return false;
  }
  return true;
}

/// Starts a background call of the probe; its process.
std::shared_ptr<Process> probe_background(UnixFixture& f, const std::string& args) {
  auto req = parse_call_request("tool=shell\nagent=a1\n\n{\"cmd\":\"/usr/bin/python3 unixprobe.py " + args + "\"}");
  if (!req) throw std::runtime_error(req.ename());
  std::promise<p9::Result<int>> started;
  auto call = f.session->call_background(*req, [&](p9::Result<int> pid) { started.set_value(std::move(pid)); });
  if (!call) throw std::runtime_error(call.ename());
  auto pid = started.get_future().get();
  if (!pid) throw std::runtime_error(pid.ename());
  return f.session->processes().find(*pid);
}

class Unix : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!mediated()) GTEST_SKIP() << "no seccomp user notification and Landlock ABI " << landlock_abi();
  }
};

TEST(UnixPolicy, ParsedMergedAndChecked) {
  auto f = parse_policy("unix: [\"{XDG_RUNTIME_DIR}/docker.sock\", /run/x]\n");
  ASSERT_TRUE(f) << f.ename();
  EXPECT_EQ(f->unix_sockets, (std::vector<std::string>{"{XDG_RUNTIME_DIR}/docker.sock", "/run/x"}));
  auto project = parse_policy("unix: [/run/x, /run/y]\n");
  ASSERT_TRUE(project);
  EXPECT_EQ(effective_policy(*f, &*project).unix_sockets,
            (std::vector<std::string>{"{XDG_RUNTIME_DIR}/docker.sock", "/run/x", "/run/y"}));
  EXPECT_EQ(parse_policy("unix: /run/x\n").ename(), "line 1: unix: expected a list of strings");
  EXPECT_EQ(parse_policy("unix: [[a]]\n").ename(), "line 1: unix: expected a list of strings");
  EXPECT_TRUE(effective_policy(*parse_policy("general: {}\n"), nullptr).unix_sockets.empty());
}

TEST(UnixPolicy, PlanExpandsAndPutsOllieAddrFirst) {
  Policy p;
  p.unix_sockets = {"{HOME}/s.sock", "relative.sock", "/run/a/../b.sock"};
  TemplateVars vars;
  vars.vars["HOME"] = "/home/u";
  const auto plan = plan_sandbox(p, vars, writable_paths(p, vars), {}, "", "", "/run/ollie.sock");
  EXPECT_EQ(plan.unix_sockets, (std::vector<std::string>{"/run/ollie.sock", "/home/u/s.sock", "/run/b.sock"}));
  EXPECT_TRUE(plan.unix_listed);
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_EQ(plan.skipped[0], "relative.sock: not absolute (relative.sock)");
  EXPECT_FALSE(plan_sandbox(Policy{}, vars, writable_paths(Policy{}, vars), {}, "", "", "/run/ollie.sock").unix_listed);
}

TEST_F(Unix, StreamConnectOutsideTheListIsRefused) {
  UnixFixture f;
  Server outside(f.socks + "/outside.sock", SOCK_STREAM);
  EXPECT_EQ(f.probe("stream " + outside.path), "EACCES\n");
  EXPECT_TRUE(outside.connections().empty());
}

TEST_F(Unix, DatagramConnectSendtoSendmsgOutsideTheListAreRefused) {
  UnixFixture f;
  Server outside(f.socks + "/log.sock", SOCK_DGRAM);
  EXPECT_EQ(f.probe("dgram_connect " + outside.path), "EACCES\n");
  EXPECT_EQ(f.probe("dgram_sendto " + outside.path), "EACCES\n");
  EXPECT_EQ(f.probe("dgram_sendmsg " + outside.path), "EACCES\n");
  EXPECT_TRUE(outside.datagrams().empty());
}

TEST_F(Unix, AllowedSocketsWorkStreamAndDatagram) {
  const auto dir = temp_dir("allowed");
  UnixFixture f("\"" + dir + "/s.sock\", \"" + dir + "/d.sock\"");
  Server s(dir + "/s.sock", SOCK_STREAM);
  Server d(dir + "/d.sock", SOCK_DGRAM);
  EXPECT_EQ(f.probe("stream " + s.path), "ok\n");
  EXPECT_EQ(s.connections(), (std::vector<std::string>{"x"}));
  EXPECT_EQ(f.probe("dgram_connect " + d.path), "ok\n");
  EXPECT_EQ(f.probe("dgram_sendto " + d.path), "ok\n");
  EXPECT_EQ(f.probe("dgram_sendmsg " + d.path), "ok\n");
  EXPECT_EQ(d.datagrams(), (std::vector<std::string>{"c", "t", "mm"}));
}

TEST_F(Unix, ADirectoryAllowsTheSocketsBeneathIt) {
  const auto dir = temp_dir("allowdir");
  std::filesystem::create_directories(dir + "/sub");
  UnixFixture f("\"" + dir + "\"");
  Server deep(dir + "/sub/deep.sock", SOCK_STREAM);
  Server other(f.socks + "/other.sock", SOCK_STREAM);
  EXPECT_EQ(f.probe("stream " + deep.path), "ok\n");
  EXPECT_EQ(f.probe("stream " + other.path), "EACCES\n");
  EXPECT_EQ(deep.connections().size(), 1u);
  EXPECT_TRUE(other.connections().empty());
}

TEST_F(Unix, ASymlinkCountsAsItsTargetAndRelativePathsTheToolsCwd) {
  const auto dir = temp_dir("symallowed");
  UnixFixture f("\"" + dir + "/ok.sock\"");
  Server ok(dir + "/ok.sock", SOCK_STREAM);
  Server no(f.socks + "/no.sock", SOCK_STREAM);
  std::filesystem::create_symlink(no.path, f.cwd + "/looks-fine.sock");
  std::filesystem::create_symlink(ok.path, f.cwd + "/ok-link.sock");
  EXPECT_EQ(f.probe("stream looks-fine.sock"), "EACCES\n");
  EXPECT_EQ(f.probe("stream ok-link.sock"), "ok\n");
  EXPECT_TRUE(no.connections().empty());
  EXPECT_EQ(ok.connections().size(), 1u);
}

// An entry lives where the tool can write ({TMPDIR}/lsp, a path in its cwd): the tool replacing
// it by a symlink (to the directory of every other socket, to one socket) gains nothing.
TEST_F(Unix, AnEntryTheToolReplacesByASymlinkAllowsNothing) {
  UnixFixture f("\"{CWD}/lsp\", \"{CWD}/agent.sock\"");
  Server no(f.socks + "/no.sock", SOCK_STREAM);
  std::filesystem::create_directory_symlink(f.socks, f.cwd + "/lsp");
  std::filesystem::create_symlink(no.path, f.cwd + "/agent.sock");
  EXPECT_EQ(f.probe("stream " + no.path), "EACCES\n");
  EXPECT_EQ(f.probe("stream " + f.cwd + "/lsp/no.sock"), "EACCES\n");
  EXPECT_EQ(f.probe("stream " + f.cwd + "/agent.sock"), "EACCES\n");
  EXPECT_TRUE(no.connections().empty());
  // The same entry as a real directory works.
  std::filesystem::remove(f.cwd + "/lsp");
  std::filesystem::create_directory(f.cwd + "/lsp");
  Server lsp(f.cwd + "/lsp/server.sock", SOCK_STREAM);
  EXPECT_EQ(f.probe("stream " + lsp.path), "ok\n");
}

// An entry whose way passes through the tool's cwd (`{CWD}/run/app.sock`): a link the tool plants
// on it, before the call or during it, reaches no other socket of that name (the parent was
// resolved at every connect, so both reached it).
TEST_F(Unix, ALinkPlantedOnTheWayToAnEntryAllowsNothing) {
  UnixFixture f("\"{CWD}/run/app.sock\"");
  Server no(f.socks + "/app.sock", SOCK_STREAM);
  std::filesystem::create_directory_symlink(f.socks, f.cwd + "/run");
  EXPECT_EQ(f.probe("stream run/app.sock"), "EACCES\n");
  std::filesystem::remove(f.cwd + "/run");
  std::filesystem::create_directory(f.cwd + "/run");  // a directory as the call begins, a link once it runs
  const auto r = f.sh("rmdir run && ln -s " + f.socks + " run && /usr/bin/python3 unixprobe.py stream run/app.sock");
  EXPECT_EQ(body_stdout(r), "EACCES\n") << r;
  EXPECT_TRUE(no.connections().empty());
  // The entry itself, in a directory that is one, works.
  std::filesystem::remove(f.cwd + "/run");
  std::filesystem::create_directory(f.cwd + "/run");
  Server app(f.cwd + "/run/app.sock", SOCK_STREAM);
  EXPECT_EQ(f.probe("stream run/app.sock"), "ok\n");
}

// toolsrv opens what Landlock hides from the tool: outside the list a connect fails EACCES
// whether the file exists or not, is a socket or not; inside it says why (ENOENT, ECONNREFUSED).
TEST_F(Unix, OutsideTheListAConnectTellsNothingOfWhatExists) {
  const auto dir = temp_dir("listed");
  UnixFixture f("\"" + dir + "\"");
  write_file(f.socks + "/present.txt", "x");
  write_file(dir + "/plain.txt", "x");
  EXPECT_EQ(f.probe("stream " + f.socks + "/present.txt"), "EACCES\n");
  EXPECT_EQ(f.probe("stream " + f.socks + "/absent.sock"), "EACCES\n");
  EXPECT_EQ(f.probe("stream " + dir + "/absent.sock"), "ENOENT\n");
  EXPECT_EQ(f.probe("stream " + dir + "/plain.txt"), "ECONNREFUSED\n");
}

TEST_F(Unix, ASwapBetweenCheckAndUseReachesOnlyTheCheckedSocket) {
  const auto dir = temp_dir("swap");
  UnixFixture f("\"" + dir + "/ok.sock\"");
  Server ok(dir + "/ok.sock", SOCK_STREAM);
  Server no(f.socks + "/no.sock", SOCK_STREAM);
  const auto counts = f.probe("race " + ok.path + " " + no.path + " " + f.cwd + "/flip.sock 5000");
  // Both outcomes happened (the swap raced the connects), and nothing reached the other socket.
  EXPECT_NE(counts.find("EACCES="), std::string::npos) << counts;
  EXPECT_NE(counts.find("ok="), std::string::npos) << counts;
  EXPECT_TRUE(no.connections().empty());
  const auto n = std::stoi(counts.substr(counts.find("ok=") + 3));
  EXPECT_EQ(ok.connections().size(), static_cast<std::size_t>(n));
}

/// The kernel would read the address and look the descriptor up again after a check that let
/// it continue: toolsrv connects its own copies, so a second thread rewriting both gains nothing.
/// (With connects of TCP sockets continued in the kernel instead, this test reaches the
/// forbidden socket within its 20,000 rounds.)
TEST_F(Unix, ASecondThreadRewritingAddressAndDescriptorGainsNothing) {
  UniqueFd tcp(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  ASSERT_EQ(::bind(tcp.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(tcp.get(), 4096), 0);
  ::getsockname(tcp.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  // Accept and drop what the loop connects: with a full backlog its connects would stall.
  std::jthread drain([fd = tcp.get()](std::stop_token stop) {
    while (!stop.stop_requested()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0)
        for (int c; (c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) ::close(c);
    }
  });
  UnixFixture f;
  Server no(f.socks + "/no.sock", SOCK_STREAM);
  const auto counts = f.probe("rewrite " + no.path + " " + std::to_string(ntohs(sa.sin_port)) + " 20000");
  EXPECT_NE(counts.find("ok="), std::string::npos) << counts;  // the loop did connect (TCP)
  EXPECT_TRUE(no.connections().empty()) << counts;
}

TEST_F(Unix, AForkedGrandchildIsRefusedToo) {
  UnixFixture f;
  Server outside(f.socks + "/gc.sock", SOCK_STREAM);
  EXPECT_EQ(f.probe("grandchild " + outside.path), "EACCES\n");
  EXPECT_TRUE(outside.connections().empty());
}

TEST_F(Unix, ABackgroundProcessIsRefusedToo) {
  UnixFixture f;
  Server outside(f.socks + "/bg.sock", SOCK_STREAM);
  auto proc = probe_background(f, "stream " + outside.path);
  ASSERT_TRUE(proc);
  ASSERT_TRUE(wait_finished(proc));
  EXPECT_EQ(proc->read_out(0, 100).data, "EACCES\n");
  EXPECT_TRUE(outside.connections().empty());
}

TEST_F(Unix, OllieAddrIsAlwaysAllowedAndItsPeerRunsWithNoNewPrivs) {
  UnixFixture f;
  Server ollie(f.socks + "/ollie.sock", SOCK_STREAM);
  ASSERT_TRUE(f.session->set_env("OLLIE_ADDR", "unix!" + ollie.path));
  // The tool's connect, as olliesrv sees it: SO_PEERCRED names a process with no_new_privs,
  // whoever made the connect (so no tool passes for the hostowner, §1.5).
  std::promise<std::string> peer;
  std::thread server([&] {
    pollfd p{ollie.fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 30000) != 1) return peer.set_value("no connection");
    UniqueFd c(::accept4(ollie.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ucred cred{};
    socklen_t len = sizeof cred;
    ::getsockopt(c.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len);
    const auto status = read_file("/proc/" + std::to_string(cred.pid) + "/status");
    const auto at = status.find("NoNewPrivs:");
    peer.set_value(at == std::string::npos ? "?" : status.substr(at, status.find('\n', at) - at));
    char buf[16];
    while (::read(c.get(), buf, sizeof buf) > 0) {}  // until the tool is done with it
  });
  EXPECT_EQ(f.probe("stream " + ollie.path), "ok\n");
  server.join();
  EXPECT_EQ(peer.get_future().get(), "NoNewPrivs:\t1");
}

TEST_F(Unix, AbstractSocketsOutsideTheCallAreRefused) {
  UnixFixture f;
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const std::string name = "toolsrv-test-" + std::to_string(::getpid());
  std::memcpy(sa.sun_path + 1, name.data(), name.size());
  ASSERT_EQ(::bind(s.get(), reinterpret_cast<sockaddr*>(&sa), static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())), 0);
  ASSERT_EQ(::listen(s.get(), 8), 0);
  EXPECT_NE(f.probe("abstract " + name), "ok\n");
  EXPECT_LT(::accept4(s.get(), nullptr, nullptr, SOCK_CLOEXEC), 0);
}

/// TCP and UDP keep working (toolsrv connects and sends for the tool below ABI 9), and the
/// network section's port rules still hold.
TEST_F(Unix, TcpAndUdpStillWorkAndPortRulesStillHold) {
  UniqueFd tcp(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  ASSERT_EQ(::bind(tcp.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(tcp.get(), 8), 0);
  ::getsockname(tcp.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  const auto tcp_port = std::to_string(ntohs(sa.sin_port));
  UniqueFd udp(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sa.sin_port = 0;
  ASSERT_EQ(::bind(udp.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  len = sizeof sa;
  ::getsockname(udp.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  const auto udp_port = std::to_string(ntohs(sa.sin_port));
  {
    UnixFixture f;
    EXPECT_EQ(f.probe("tcp " + tcp_port), "ok\n");
    EXPECT_EQ(f.probe("udp " + udp_port), "ok\n");
    char b[8];
    EXPECT_EQ(::recv(udp.get(), b, sizeof b, 0), 1);
    UniqueFd c(::accept4(tcp.get(), nullptr, nullptr, SOCK_CLOEXEC));
    EXPECT_TRUE(c);
  }
  if (landlock_abi() >= 4) {
    UnixFixture f("", "");
    write_file(f.config + "/sandbox.yaml",
               policy_with("").replace(policy_with("").find("network: {enabled: true, unrestricted: true}"),
                                       std::string("network: {enabled: true, unrestricted: true}").size(),
                                       "network: {enabled: true, unrestricted: false, connect_tcp: [1]}"));
    EXPECT_EQ(f.probe("tcp " + tcp_port), "EACCES\n");
  }
}

std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

/// Each call's listener is closed once no process is left under its filter (the last one's
/// EPOLLHUP reaches the guard's thread a moment after the reply, hence the bounded wait).
TEST_F(Unix, NoDescriptorIsLeftBehindByTheCalls) {
  const auto dir = temp_dir("fds");
  UnixFixture f("\"" + dir + "/ok.sock\"");
  Server ok(dir + "/ok.sock", SOCK_STREAM);
  EXPECT_EQ(f.probe("stream " + ok.path), "ok\n");  // starts the connector
  ok.connections();
  const auto before = open_fds();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(f.probe("stream " + ok.path), "ok\n");
  EXPECT_EQ(ok.connections().size(), 10u);
  auto settled = false;
  for (int i = 0; i < 500 && !settled; ++i) {
    settled = open_fds() <= before;
    if (!settled) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(settled) << open_fds() << " descriptors open, " << before << " before";
}

/// Many tools hammering the filter at once: every one is answered, and a call that makes no
/// connect is not held up behind them.
TEST_F(Unix, ManyNotifyingToolsDoNotStallOtherCalls) {
  const auto dir = temp_dir("load");
  UnixFixture f("\"" + dir + "/ok.sock\"");
  Server ok(dir + "/ok.sock", SOCK_STREAM);
  Server no(f.socks + "/no.sock", SOCK_STREAM);
  constexpr int tools = 6, rounds = 1500;
  std::vector<std::shared_ptr<Process>> flood;
  for (int i = 0; i < tools; ++i) flood.push_back(probe_background(f, "flood " + no.path + " " + std::to_string(rounds)));
  f.load("echo");
  const auto echo = f.run("tool=echo\nagent=a1\n\n{}", 30s);
  EXPECT_EQ(header(echo, "status"), "exited") << echo;
  EXPECT_EQ(f.probe("stream " + ok.path), "ok\n");
  for (auto& p : flood) {
    ASSERT_TRUE(wait_finished(p));
    EXPECT_EQ(p->read_out(0, 200).data, "EACCES=" + std::to_string(rounds) + "\n");
  }
  EXPECT_TRUE(no.connections().empty());
}

/// A system call through the i386 gate (int 0x80), as a 32-bit program makes it; -errno on failure.
long i386_call(long nr) {
  long r;
  asm volatile("int $0x80" : "=a"(r) : "a"(nr), "b"(0L), "c"(0L), "d"(0L) : "memory", "r8", "r9", "r10", "r11");
  return r;
}

/// The filter's i386 half, with the real kernel: each family doc/sandbox.md names gets its answer,
/// and every other call passes. Its numbers are searched as the x86_64 ones are (a list walked
/// them all, for each of the ~450 numbers the kernel tries at install): a number the search
/// misplaced would pass or be refused here.
TEST(UnixFilter, TheI386GateAnswersEachFamilyAndLetsTheRestThrough) {
  if (!unix_notify_available()) GTEST_SKIP() << "no seccomp user notification";
  const UnixFilter& filter = UnixFilter::get();  // built here: the child allocates nothing
  struct Case {
    long nr, want;  // want: -errno, or the number the call itself returns
  };
  const Case cases[] = {
      {102, -EACCES} /* socketcall */, {362, -EACCES} /* connect */,   {369, -EACCES} /* sendto */,
      {370, -EACCES} /* sendmsg */,    {345, -EACCES} /* sendmmsg */,  {425, -ENOSYS} /* io_uring_setup */,
      {427, -ENOSYS} /* io_uring_register */, {15, -EPERM} /* chmod */, {94, -EPERM} /* fchmod */,
      {30, -EPERM} /* utime */,        {182, -EPERM} /* chown */,      {226, -EPERM} /* setxattr */,
      {237, -EPERM} /* fremovexattr */, {320, -EPERM} /* utimensat */, {412, -EPERM} /* utimensat_time64 */,
      {452, -EPERM} /* fchmodat2 */,   {463, -EPERM} /* setxattrat */, {469, -EPERM} /* file_setattr */,
      {20, ::getpid()} /* getpid, in the child: set below */, {64, ::getpid()} /* getppid: the child's parent is us */,
      {199, static_cast<long>(::getuid())} /* getuid32 */};
  // Some kernels fault at `int 0x80` (SIGSEGV: a guest that has no 32-bit gate), others answer
  // ENOSYS: both are a kernel without i386 system calls. The probe dies of the fault alone
  // (the default action, not AddressSanitizer's report and exit).
  const pid_t probe = ::fork();
  ASSERT_GE(probe, 0);
  if (probe == 0) {
    ::signal(SIGSEGV, SIG_DFL);
    ::_exit(i386_call(20) == ::getpid() ? 0 : 100);
  }
  int probed = 0;
  ASSERT_EQ(::waitpid(probe, &probed, 0), probe);
  if (!WIFEXITED(probed) || WEXITSTATUS(probed) != 0)
    GTEST_SKIP() << "no i386 system calls on this kernel (int 0x80 "
                 << (WIFSIGNALED(probed) ? "faults: signal " + std::to_string(WTERMSIG(probed)) : std::string("answers ENOSYS")) << ")";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const long self = ::getpid();
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || filter.install() < 0) ::_exit(101);
    for (int i = 0; i < static_cast<int>(std::size(cases)); ++i)
      if (i386_call(cases[i].nr) != (cases[i].nr == 20 ? self : cases[i].want)) ::_exit(1 + i);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "signal " << WTERMSIG(status);
  ASSERT_NE(WEXITSTATUS(status), 101) << "the filter did not install";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "i386 call " << cases[WEXITSTATUS(status) - 1].nr << " answered wrongly";
}

}  // namespace
}  // namespace toolsrv::test
