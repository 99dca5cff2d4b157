// Remote sessions (issue 13, spec §6.11) against a real OpenSSH server on a loopback port: the
// test makes its own host and client keys with ssh-keygen and runs /usr/sbin/sshd -D -e with its
// own configuration as the current user; olliesrv reaches it through an ssh configuration in its
// private HOME. "The other host" is the same machine seen through sshd: the login gets another
// HOME, XDG_CACHE_HOME and XDG_RUNTIME_DIR (sshd's SetEnv), and each failure has a port of its
// own (Match LocalPort): a PATH with an `uname` that names another architecture, a PATH without
// tar, stream-local forwarding refused. Running as root, sshd wants /run/sshd: it then runs in a
// private mount namespace with a tmpfs on /run (unshare -m), so no system file is touched.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include "olliesrv/world.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("no free port");
  ::close(s);
  return ntohs(a.sin_port);
}

bool accepts(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

/// Command lines of every process, pid → text (NULs as spaces).
std::vector<std::pair<pid_t, std::string>> processes() {
  std::vector<std::pair<pid_t, std::string>> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string n = e.path().filename();
    if (n.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_file(e.path().string() + "/cmdline");
    for (auto& ch : cmd)
      if (ch == '\0') ch = ' ';
    out.emplace_back(std::stoi(n), cmd);
  }
  return out;
}

std::vector<pid_t> matching(const std::string& a, const std::string& b) {
  std::vector<pid_t> out;
  for (auto& [pid, cmd] : processes())
    if (cmd.find(a) != std::string::npos && cmd.find(b) != std::string::npos) out.push_back(pid);
  return out;
}

/// sshd with four ports: `good`, `arch` (uname says sparc64), `notar` (no tar on PATH), `nofwd`
/// (no stream-local forwarding).
struct Sshd {
  std::string dir, home, cache, work, rrun;
  int good = 0, arch = 0, notar = 0, nofwd = 0;
  pid_t pid = -1;
  std::string why_not;  ///< set when sshd is not installed

  Sshd() {
    if (!exists("/usr/sbin/sshd") || !exists("/usr/bin/ssh-keygen")) {
      why_not = "sshd is not installed (Debian's openssh-server, see dev.sh): remote sessions untested";
      return;
    }
    std::string templ = "/tmp/ollie-ssh-XXXXXX";
    dir = ::mkdtemp(templ.data());
    home = dir + "/home", cache = dir + "/cache", work = dir + "/work", rrun = dir + "/run";
    for (const auto& d : {home, cache, work, rrun, dir + "/fake", dir + "/notar"}) std::filesystem::create_directories(d);
    ::chmod(rrun.c_str(), 0700);
    for (const char* k : {"host", "id", "stranger"})
      if (testing_support::run({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", dir + "/" + k}).status != 0)
        throw std::runtime_error("ssh-keygen failed");
    write_file(dir + "/authorized_keys", read_file(dir + "/id.pub"));
    write_file(dir + "/fake/uname", "#!/bin/sh\necho Linux sparc64\n");
    ::chmod((dir + "/fake/uname").c_str(), 0755);
    std::filesystem::create_symlink("/usr/bin/uname", dir + "/notar/uname");
    good = free_port(), arch = free_port(), notar = free_port(), nofwd = free_port();
    const std::string env = "HOME=" + home + " XDG_CACHE_HOME=" + cache + " XDG_RUNTIME_DIR=" + rrun;
    std::string cfg;
    for (int p : {good, arch, notar, nofwd}) cfg += "Port " + std::to_string(p) + "\n";
    cfg += "ListenAddress 127.0.0.1\nHostKey " + dir + "/host\nPidFile none\nUsePAM no\nStrictModes no\n"
           "AuthorizedKeysFile " + dir + "/authorized_keys\nPasswordAuthentication yes\nKbdInteractiveAuthentication no\n"
           "PermitRootLogin prohibit-password\nLogLevel VERBOSE\n";
    // SetEnv's first value wins, so each port has its own (none is global).
    cfg += "Match LocalPort " + std::to_string(good) + "\n  SetEnv " + env + "\n";
    cfg += "Match LocalPort " + std::to_string(arch) + "\n  SetEnv " + env + " PATH=" + dir + "/fake:/usr/bin:/bin\n";
    cfg += "Match LocalPort " + std::to_string(notar) + "\n  SetEnv " + env + " PATH=" + dir + "/notar\n";
    cfg += "Match LocalPort " + std::to_string(nofwd) + "\n  SetEnv " + env + "\n  AllowStreamLocalForwarding no\n";
    write_file(dir + "/sshd_config", cfg);
    std::string known;
    const std::string hostkey = read_file(dir + "/host.pub");
    const std::string key = hostkey.substr(0, hostkey.rfind(' '));
    for (int p : {good, arch, notar, nofwd}) known += "[127.0.0.1]:" + std::to_string(p) + " " + key + "\n";
    write_file(dir + "/known_hosts", known);

    std::vector<std::string> args{"/usr/sbin/sshd", "-D", "-e", "-f", dir + "/sshd_config"};
    // Where a private mount namespace is refused (a container without CAP_SYS_ADMIN), the
    // directory the openssh-server package's service would make is made instead.
    if (::geteuid() == 0 && !exists("/run/sshd") && testing_support::run({"unshare", "-m", "true"}).status != 0)
      ::mkdir("/run/sshd", 0755);
    if (::geteuid() == 0 && !exists("/run/sshd"))
      args = {"unshare", "-m", "sh", "-c",
              "mount --make-rprivate / && mount -t tmpfs -o mode=755 none /run && mkdir -m 755 /run/sshd && "
              "exec /usr/sbin/sshd -D -e -f " + dir + "/sshd_config"};
    const int log = ::open((dir + "/sshd.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    pid = ::fork();
    if (pid == 0) {
      ::dup2(log, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(log);
    if (!eventually([&] { return accepts(good) && accepts(nofwd); }, 10s)) throw std::runtime_error("sshd did not listen: " + log_text());
  }
  ~Sshd() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
    // Remote toolsrvs (they run under sshd's sessions, with -config in our cache).
    if (!dir.empty())
      for (auto p : matching("toolsrv", cache)) ::kill(p, SIGKILL);
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
  std::string log_text() const { return read_file(dir + "/sshd.log"); }

  /// olliesrv's ~/.ssh/config: one alias per port, and `ollie-password`, whose key sshd does
  /// not know (it would ask for a password).
  std::string ssh_config() const {
    std::string c;
    const auto host = [&](const std::string& alias, int port, const std::string& key) {
      c += "Host " + alias + "\n  HostName 127.0.0.1\n  Port " + std::to_string(port) + "\n  User " + World::login() +
           "\n  IdentityFile " + dir + "/" + key + "\n  IdentitiesOnly yes\n  UserKnownHostsFile " + dir +
           "/known_hosts\n  StrictHostKeyChecking yes\n";
    };
    host("ollie-good", good, "id");
    host("ollie-arch", arch, "id");
    host("ollie-notar", notar, "id");
    host("ollie-nofwd", nofwd, "id");
    host("ollie-password", good, "stranger");
    return c;
  }
};

std::vector<json> blocks_of(const std::string& jsonl) {
  std::vector<json> out;
  std::size_t pos = 0;
  while (pos < jsonl.size()) {
    auto nl = jsonl.find('\n', pos);
    if (nl == std::string::npos) break;
    out.push_back(json::parse(jsonl.substr(pos, nl - pos)));
    pos = nl + 1;
  }
  return out;
}

/// The content of every tool result block of the agent, in order.
std::vector<std::string> tool_results(World& w, const std::string& agent) {
  std::vector<std::string> out;
  auto raw = w.read(agent + "/log.raw");
  if (!raw) return out;
  for (auto& b : blocks_of(*raw))
    if (b["role"] == "tool") out.push_back(b["content"]);
  return out;
}

/// One shell call through the fake provider; its result.
std::string shell(World& w, const std::string& agent, const std::string& cmd, const std::string& id) {
  const std::size_t before = tool_results(w, agent).size();
  w.fake.push({{"tool_calls", json::array({{{"id", id}, {"name", "shell"}, {"arguments", {{"cmd", cmd}}}}})}});
  w.fake.push({{"text", "ok"}});
  if (!w.write(agent + "/prompt", "run it")) return "prompt failed";
  if (!eventually([&] { return tool_results(w, agent).size() > before; })) return "no result";
  w.wait_state(agent, "idle");
  return tool_results(w, agent).back();
}

/// A World whose HOME has the ssh configuration for `sshd`.
struct RemoteWorld : World {
  explicit RemoteWorld(const Sshd& s) { write_file(home + "/.ssh/config", s.ssh_config()); }
  std::string remote_session(const std::string& name, const std::string& alias, const Sshd& s) {
    auto r = rdwr("session/new", "name=" + name + " cwd=" + s.work + " remote=" + alias);
    if (!r) throw std::runtime_error("session/new: " + r.ename() + "\n" + log_text());
    return "session/" + name;
  }
  std::vector<pid_t> ssh_processes() const { return matching("ssh ", home + "/.ssh/config"); }
};

#define NEED_SSHD(s)                         \
  Sshd s;                                    \
  if (!s.why_not.empty()) GTEST_SKIP() << s.why_not

}  // namespace

TEST(Remote, ToolsRunOnTheOtherHostAndCallBackThroughTheReverseForward) {
  NEED_SSHD(sshd);
  RemoteWorld w(sshd);
  auto s = w.remote_session("far", "ollie-good", sshd);
  auto idx = w.read("session/idx");
  ASSERT_TRUE(idx);
  EXPECT_NE(idx->find("far\t"), std::string::npos);
  EXPECT_NE(idx->find("\t" + sshd.work + "\tollie-good\t"), std::string::npos) << *idx;
  // The tarball is unpacked under the remote cache, named by its sha256.
  std::vector<std::string> unpacked;
  for (const auto& e : std::filesystem::directory_iterator(sshd.cache + "/ollie"))
    if (e.path().filename().string().size() == 64) unpacked.push_back(e.path());
  ASSERT_EQ(unpacked.size(), 1u);
  EXPECT_TRUE(exists(unpacked[0] + "/bin/toolsrv"));
  EXPECT_TRUE(exists(unpacked[0] + "/bin/ollie-9p"));
  EXPECT_TRUE(exists(unpacked[0] + "/sandbox.yaml"));
  EXPECT_FALSE(exists(unpacked[0] + "/agents")) << "only tools/ and sandbox.yaml leave the machine";

  auto a = w.agent(s, "main");
  // A shell call runs there: the remote login's HOME, the session cwd on that host.
  auto out = shell(w, a, "echo \"home=$HOME cwd=$(pwd) addr=$OLLIE_ADDR\"", "c1");
  EXPECT_NE(out.find("home=" + sshd.home + " "), std::string::npos) << out;
  EXPECT_NE(out.find("cwd=" + sshd.work + " "), std::string::npos) << out;
  EXPECT_NE(out.find("addr=unix!" + sshd.cache + "/ollie/run/"), std::string::npos) << out;

  // tool_load calls back with the tarball's ollie-9p through the reverse forward.
  const std::size_t before = tool_results(w, a).size();
  w.fake.push({{"tool_calls", json::array({{{"id", "c2"}, {"name", "tool_load"}, {"arguments", {{"name", "file_glob"}}}}})}});
  w.fake.push({{"text", "loaded"}});
  ASSERT_TRUE(w.write(a + "/prompt", "load file_glob"));
  ASSERT_TRUE(eventually([&] { return tool_results(w, a).size() > before; })) << w.log_text();
  EXPECT_EQ(tool_results(w, a).back(), "loaded: file_glob; usable from your next step") << w.log_text();

  // A stranger on the remote host reaches the forwarded socket but may attach as no one but
  // this session's agents, with their secrets.
  std::string fwd;
  for (const auto& e : std::filesystem::directory_iterator(sshd.cache + "/ollie/run"))
    if (e.path().string().find(".olliesrv.sock") != std::string::npos) fwd = e.path();
  ASSERT_FALSE(fwd.empty());
  w.agent(w.session("near"), "main");
  auto ids = w.read(s + "/agent/idx");
  ASSERT_TRUE(ids);
  const auto second_field = [](const std::string& line) {
    const auto b = line.find('\t') + 1;
    return line.substr(b, line.find('\t', b) - b);
  };
  const std::string main_id = second_field(*ids);
  auto near_idx = w.read("session/near/agent/idx");
  ASSERT_TRUE(near_idx);
  const std::string other_id = second_field(*near_idx);
  auto c = p9::Client::dial("unix!" + fwd);
  ASSERT_TRUE(c) << c.ename();
  auto as_owner = (*c)->attach(World::login(), "");
  ASSERT_FALSE(as_owner);
  EXPECT_EQ(as_owner.ename(), "unknown user: " + World::login());
  auto afid = (*c)->auth(other_id);
  ASSERT_TRUE(afid) << afid.ename();
  auto as_other = (*c)->attach(other_id, "", &*afid);
  ASSERT_FALSE(as_other);
  EXPECT_EQ(as_other.ename(), "unknown user: " + other_id);
  auto afid2 = (*c)->auth(main_id);
  ASSERT_TRUE(afid2) << afid2.ename();
  ASSERT_TRUE(afid2->write(std::string(64, '0')));
  auto as_main = (*c)->attach(main_id, "", &*afid2);
  ASSERT_FALSE(as_main);
  EXPECT_EQ(as_main.ename(), "authentication failed");
}

TEST(Remote, FailuresAreClearAndLeaveNothingBehind) {
  NEED_SSHD(sshd);
  RemoteWorld w(sshd);
  const auto fails = [&](const std::string& alias) {
    auto r = w.rdwr("session/new", "name=x cwd=" + sshd.work + " remote=" + alias);
    return r ? std::string("created") : r.ename();
  };
  auto pw = fails("ollie-password");
  EXPECT_EQ(pw.rfind("remote: ssh: ", 0), 0u) << pw;
  EXPECT_NE(pw.find("Permission denied"), std::string::npos) << pw;
  EXPECT_EQ(fails("ollie-arch"), "remote: the remote host is Linux sparc64, not Linux x86_64");
  EXPECT_EQ(fails("ollie-notar"), "remote: tar not found on the remote host");
  auto fwd = fails("ollie-nofwd");
  EXPECT_EQ(fwd.rfind("remote: forward refused: ", 0), 0u) << fwd;
  auto bad = w.rdwr("session/new", "name=x cwd=" + sshd.dir + "/nowhere remote=ollie-good");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.ename(), "remote: cwd: " + sshd.dir + "/nowhere: not a directory");
  auto opt = w.rdwr("session/new", "name=x cwd=/ remote=-oProxyCommand=x");
  ASSERT_FALSE(opt);
  EXPECT_EQ(opt.ename(), "remote: invalid destination: -oProxyCommand=x");

  // No session, no ssh, no remote toolsrv (the refused forward's was started, then killed).
  EXPECT_EQ(*w.read("session/idx"), "");
  EXPECT_TRUE(eventually([&] { return w.ssh_processes().empty(); }, 5s));
  EXPECT_TRUE(eventually([&] { return matching("toolsrv", sshd.cache).empty(); }, 10s));
}

TEST(Remote, SshDyingMidSessionLosesTheCallAndTheNextNeedBootstrapsAgain) {
  NEED_SSHD(sshd);
  RemoteWorld w(sshd);
  auto s = w.remote_session("far", "ollie-good", sshd);
  auto a = w.agent(s, "main");
  const std::size_t before = tool_results(w, a).size();
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"}, {"arguments", {{"cmd", "sleep 30"}}}}})}});
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(a + "/prompt", "sleep"));
  ASSERT_TRUE(w.wait_state(a, "calling: shell"));
  auto masters = matching("ControlMaster=yes", w.home);
  ASSERT_EQ(masters.size(), 1u);
  const auto first_toolsrv = matching("toolsrv", sshd.cache);
  ::kill(masters[0], SIGKILL);
  ASSERT_TRUE(eventually([&] { return tool_results(w, a).size() > before; }));
  EXPECT_EQ(tool_results(w, a).back().rfind("error: tool server lost", 0), 0u) << tool_results(w, a).back();
  ASSERT_TRUE(w.wait_state(a, "idle"));
  // The remote toolsrv died with its ssh; the next call bootstraps a new one.
  EXPECT_TRUE(eventually([&] { return matching("toolsrv", sshd.cache).empty(); }, 10s));
  EXPECT_EQ(shell(w, a, "echo again", "c2"), "again\n");
  auto now = matching("toolsrv", sshd.cache);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_TRUE(first_toolsrv.empty() || now[0] != first_toolsrv[0]);
}

TEST(Remote, RestartedOlliesrvRestoresTheSessionAndBootstrapsAtTheFirstNeed) {
  NEED_SSHD(sshd);
  RemoteWorld w(sshd);
  auto s = w.remote_session("far", "ollie-good", sshd);
  auto a = w.agent(s, "main");
  w.stop_server(SIGTERM);
  EXPECT_TRUE(eventually([&] { return w.ssh_processes().empty(); }, 5s));
  w.start();
  auto idx = w.read("session/idx");
  ASSERT_TRUE(idx);
  EXPECT_NE(idx->find("\tollie-good\t"), std::string::npos) << *idx;
  EXPECT_TRUE(w.ssh_processes().empty()) << "restored without a bootstrap";
  auto out = shell(w, a, "pwd", "c1");
  EXPECT_EQ(out, sshd.work + "\n");
  EXPECT_EQ(w.ssh_processes().size(), 1u);
}
