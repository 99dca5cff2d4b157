// Remote sessions (issue 13, spec §6.11) against a real OpenSSH server on loopback ports
// (tests/olliesrv/sshd.hpp): tools on "the other host", a callback through the reverse forward,
// a stranger on the forwarded socket, each failure, ssh dying, olliesrv restarted.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <future>

#include <nlohmann/json.hpp>

#include "olliesrv/sshd.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

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

/// The process has exited (or is a zombie whose parent has not reaped it).
bool gone(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return stat.empty() || (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z');
}

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

  auto env = w.read(s + "/env");
  ASSERT_TRUE(env);
  EXPECT_NE(env->find("OLLIE_ADDR=unix!" + sshd.cache + "/ollie/run/"), std::string::npos) << *env;
  auto a = w.agent(s, "main");
  // A shell call runs there: the remote login's HOME, the session cwd on that host.
  auto out = shell(w, a, "echo \"home=$HOME cwd=$(pwd) addr=$OLLIE_ADDR\"", "c1");
  EXPECT_NE(out.find("home=" + sshd.home + " "), std::string::npos) << out;
  EXPECT_NE(out.find("cwd=" + sshd.work + " "), std::string::npos) << out;
  EXPECT_NE(out.find("addr=unix!" + sshd.cache + "/ollie/run/"), std::string::npos) << out;

  // tool_load calls back with the tarball's ollie-9p through the reverse forward.
  const std::size_t before = tool_results(w, a).size();
  w.fake.push({{"tool_calls", json::array({{{"id", "c2"}, {"name", "tool_load"}, {"arguments", {{"name", "subagent_spawn"}}}}})}});
  w.fake.push({{"text", "loaded"}});
  ASSERT_TRUE(w.write(a + "/prompt", "load subagent_spawn"));
  ASSERT_TRUE(eventually([&] { return tool_results(w, a).size() > before; })) << w.log_text();
  EXPECT_EQ(tool_results(w, a).back(), "loaded: subagent_spawn; usable from your next step\n") << w.log_text();

  // agent/new's cwd= is a directory of the tool host, checked by its toolsrv; `~` is that host's
  // home (§3.3: expanded on the tool host), not this one's.
  std::filesystem::create_directories(sshd.work + "/sub");
  auto sub = w.rdwr(s + "/agent/new", "name=sub cwd=" + sshd.work + "/sub");
  EXPECT_TRUE(sub) << sub.ename();
  EXPECT_EQ(w.rdwr(s + "/agent/new", "name=gone cwd=" + sshd.work + "/missing").ename(), "cwd: " + sshd.work + "/missing: not a directory");
  std::filesystem::create_directories(sshd.home + "/x");
  auto home = w.rdwr(s + "/agent/new", "name=home cwd=~/x");
  ASSERT_TRUE(home) << home.ename();
  auto home_cfg = w.read(s + "/agent/home/cfg");
  ASSERT_TRUE(home_cfg);
  EXPECT_NE(home_cfg->find("cwd=" + sshd.home + "/x\n"), std::string::npos) << *home_cfg;
  EXPECT_EQ(w.rdwr(s + "/agent/new", "name=nohome cwd=~/missing").ename(), "cwd: ~/missing: not a directory");
  auto moved = w.rdwr(s + "/agent/home/ctl", "cwd ~");
  ASSERT_TRUE(moved) << moved.ename();
  EXPECT_EQ(*moved, sshd.home + "\n");
  // An agent of the session creates one below its cwd, resolved over there (§4.2).
  const std::size_t spawned = tool_results(w, a).size();
  w.fake.push({{"tool_calls", json::array({{{"id", "c3"}, {"name", "shell"},
                                           {"arguments", {{"cmd", "echo name=kid cwd=" + sshd.work + "/sub/.. | ollie-9p rdwr session/$OLLIE_SESSION_ID/agent/new && "
                                                                      "echo name=out cwd=/ | ollie-9p rdwr session/$OLLIE_SESSION_ID/agent/new"}}}}})}});
  w.fake.push({{"text", "made"}});
  ASSERT_TRUE(w.write(a + "/prompt", "make agents"));
  ASSERT_TRUE(eventually([&] { return tool_results(w, a).size() > spawned; })) << w.log_text();
  const std::string made = tool_results(w, a).back();
  EXPECT_NE(made.find("permission denied: cwd outside " + sshd.work), std::string::npos) << made;
  auto kid = w.read(s + "/agent/kid/id");
  EXPECT_TRUE(kid) << made;

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
  // Another session's agent is unknown here from Tauth on: its id cannot even be probed (§1.5).
  auto afid = (*c)->auth(other_id);
  ASSERT_FALSE(afid);
  EXPECT_EQ(afid.ename(), "unknown user: " + other_id);
  auto afid2 = (*c)->auth(main_id);
  ASSERT_TRUE(afid2) << afid2.ename();
  ASSERT_TRUE(afid2->write(std::string(64, '0')));
  auto as_main = (*c)->attach(main_id, "", &*afid2);
  ASSERT_FALSE(as_main);
  EXPECT_EQ(as_main.ename(), "authentication failed");

  // A killed session leaves none of its sockets here: ssh's -L end and its control socket are
  // not removed by ssh, nor olliesrv's listener for the reverse forward.
  std::string sid = *w.read(s + "/id");
  sid.pop_back();  // its newline
  ASSERT_EQ(*w.rdwr(s + "/ctl", "kill"), "killed\n");
  for (const auto& dir : {"/run/ollie/toolsrv", "/run/ollie/fwd"})
    for (const auto& e : std::filesystem::directory_iterator(w.root + dir))
      EXPECT_EQ(e.path().filename().string().find(sid), std::string::npos) << e.path();
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
  EXPECT_EQ(pw.find('\r'), std::string::npos) << "ssh's CRLF is no part of an error";
  // ssh's own `ssh: ` is not said twice.
  auto unknown = w.rdwr("session/new", "name=x cwd=" + sshd.work + " remote=nosuchhost.invalid");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.ename().rfind("remote: ssh: ", 0), 0u) << unknown.ename();
  EXPECT_EQ(unknown.ename().find("ssh: ssh: "), std::string::npos) << unknown.ename();
  EXPECT_EQ(fails("ollie-arch"), "remote: the remote host is Linux sparc64, not Linux x86_64");
  EXPECT_EQ(fails("ollie-notar"), "remote: tar not found on the remote host");
  auto fwd = fails("ollie-nofwd");
  EXPECT_EQ(fwd.rfind("remote: forward refused: ", 0), 0u) << fwd;
  auto bad = w.rdwr("session/new", "name=x cwd=" + sshd.dir + "/nowhere remote=ollie-good");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.ename(), "cwd: " + sshd.dir + "/nowhere: not a directory");  // §4.1's error, checked over there
  auto far = w.rdwr("session/new", "name=x cwd=~/nowhere remote=ollie-good");  // `~` is that host's HOME
  ASSERT_FALSE(far);
  EXPECT_EQ(far.ename(), "cwd: " + sshd.home + "/nowhere: not a directory");
  EXPECT_EQ(w.rdwr("session/new", "name=x cwd=~root remote=ollie-good").ename(), "cwd must be absolute: ~root");
  // A cwd whose resolved name holds a TAB or a newline (behind a link, as `~` hid it from the
  // check here) is refused there as here (§4.1): it was taken, a newline one for another
  // directory, and a TAB one skipped at the next restore.
  for (const std::string odd : {"a\ttab", "a\nnl", "nl\n"}) {
    std::filesystem::create_directories(sshd.home + "/" + odd);
    std::filesystem::remove(sshd.home + "/odd");
    std::filesystem::create_directory_symlink(sshd.home + "/" + odd, sshd.home + "/odd");
    EXPECT_EQ(w.rdwr("session/new", "name=x cwd=~/odd remote=ollie-good").ename(), "cwd: invalid character");
  }
  auto opt = w.rdwr("session/new", "name=x cwd=/ remote=-oProxyCommand=x");
  ASSERT_FALSE(opt);
  EXPECT_EQ(opt.ename(), "remote: invalid destination: -oProxyCommand=x");

  // No session, no ssh, no remote toolsrv (the refused forward's was started, then killed), no
  // socket olliesrv would still listen on for a session that is not (§6.11.5), nor one of ssh's.
  EXPECT_EQ(*w.read("session/idx"), "");
  std::error_code ec;
  for (const auto& dir : {"/run/ollie/toolsrv", "/run/ollie/fwd"})
    for (const auto& e : std::filesystem::directory_iterator(w.root + dir, ec)) ADD_FAILURE() << e.path();
  EXPECT_TRUE(eventually([&] { return w.ssh_processes().empty(); }, 5s));
  EXPECT_TRUE(eventually([&] { return servers("toolsrv", sshd.cache).empty(); }, 10s));
}

// §1.5: a session/new flushed while its remote toolsrv starts is cancelled whole: the bootstrap's
// ssh ends at once (it ran until the bootstrap's time limit, minutes later), and no session is
// made. The host here accepts the connection and never says a word, so ssh waits.
TEST(Remote, AFlushedSessionNewStopsItsBootstrap) {
  NEED_SSHD(sshd);
  RemoteWorld w(sshd);
  const int silent = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(silent, 4), 0);
  ASSERT_EQ(::getsockname(silent, reinterpret_cast<sockaddr*>(&a), &len), 0);
  write_file(w.home + "/.ssh/config", read_file(w.home + "/.ssh/config") + "Host ollie-silent\n  HostName 127.0.0.1\n  Port " +
                                           std::to_string(ntohs(a.sin_port)) + "\n  User " + World::login() + "\n");
  auto f = w.walk("session/new");
  ASSERT_TRUE(f && f->open(p9::ORDWR));
  ASSERT_TRUE(f->write("name=far cwd=" + sshd.work + " remote=ollie-silent"));
  auto held = start_read(*f);
  ASSERT_TRUE(eventually([&] { return !w.ssh_processes().empty(); }, 20s)) << w.log_text();
  f->client().flush(held.tag);
  EXPECT_FALSE(held.reply.get());
  EXPECT_TRUE(eventually([&] { return w.ssh_processes().empty(); }, 5s)) << "the bootstrap's ssh still runs";
  EXPECT_EQ(*w.read("session/idx"), "");
  auto again = w.rdwr("session/new", "name=far cwd=" + w.project);  // the name is free again
  EXPECT_TRUE(again) << again.ename();
  ::close(silent);
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
  // A host that stops answering is noticed by ssh itself (nothing else reads a silent link).
  EXPECT_NE(read_file("/proc/" + std::to_string(masters[0]) + "/cmdline").find("ServerAliveInterval="), std::string::npos);
  const auto first_toolsrv = servers("toolsrv", sshd.cache);
  ::kill(masters[0], SIGKILL);
  ASSERT_TRUE(eventually([&] { return tool_results(w, a).size() > before; }));
  EXPECT_EQ(tool_results(w, a).back().rfind("error: tool server lost", 0), 0u) << tool_results(w, a).back();
  ASSERT_TRUE(w.wait_state(a, "idle", 40s)) << w.read_state(a) << "\n" << w.log_text();
  // The remote toolsrv died with its ssh; the next need (the tool list of the turn's next
  // request already) bootstraps a new one.
  ASSERT_EQ(first_toolsrv.size(), 1u);
  EXPECT_TRUE(eventually([&] { return gone(first_toolsrv[0]); }, 10s));
  EXPECT_EQ(shell(w, a, "echo again", "c2"), "again\n");
  auto now = servers("toolsrv", sshd.cache);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0], first_toolsrv[0]);
  // The lost start's sockets over there are gone: only the new start's two remain.
  std::vector<std::string> socks;
  for (const auto& e : std::filesystem::directory_iterator(sshd.cache + "/ollie/run"))
    if (e.path().extension() == ".sock") socks.push_back(e.path().filename());
  EXPECT_EQ(socks.size(), 2u) << ::testing::PrintToString(socks);
  // ssh's status is not toolsrv's.
  EXPECT_EQ(tool_results(w, a)[before].find("toolsrv exit status 255"), std::string::npos) << tool_results(w, a)[before];
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

TEST(Remote, ABootstrapKillsTheToolsrvTheLastStartLeftRunning) {
  NEED_SSHD(sshd);
  RemoteWorld w(sshd);
  auto s = w.remote_session("far", "ollie-good", sshd);
  auto old = servers("toolsrv", sshd.cache);
  ASSERT_EQ(old.size(), 1u);
  // Freeze what would stop it with its ssh (the bootstrap script and its watcher), then drop
  // ssh: the remote toolsrv is left running, as when a real host never notices the loss.
  std::vector<pid_t> script;  // this test's (its login has this sshd's XDG_CACHE_HOME)
  std::vector<pid_t> cats;    // the watcher's cat; its shell dies first, so nothing kills toolsrv
  // The script starts the watcher after it reports toolsrv listening: it may not be there yet.
  ASSERT_TRUE(eventually([&] {
    script.clear();
    cats.clear();
    for (auto p : matching("OLLIE_SCRIPT_END", "/bin/sh"))
      if (read_file("/proc/" + std::to_string(p) + "/environ").find("XDG_CACHE_HOME=" + sshd.cache) != std::string::npos)
        script.push_back(p);
    for (auto& [pid, cmd] : processes())
      if (std::find(script.begin(), script.end(), parent_of(pid)) != script.end() && cmd.rfind("cat", 0) == 0)
        cats.push_back(pid);
    return !script.empty() && cats.size() == 1;
  }, 5s)) << script.size() << " script processes, " << cats.size() << " watchers";
  // Stopped, not killed: toolsrv dies with its parent (PR_SET_PDEATHSIG), the script.
  for (auto p : script) ::kill(p, SIGSTOP);
  ::kill(cats[0], SIGSTOP);
  for (auto p : matching("ControlMaster=yes", w.home)) ::kill(p, SIGKILL);
  ASSERT_TRUE(eventually([&] { return w.ssh_processes().empty(); }, 5s));
  ASSERT_EQ(servers("toolsrv", sshd.cache), old) << "left running";
  // The next need bootstraps again; the script kills the toolsrv named in the pid file first.
  auto a = w.agent(s, "main");
  EXPECT_EQ(shell(w, a, "echo fresh", "c1"), "fresh\n");
  auto now = servers("toolsrv", sshd.cache);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0], old[0]);
  EXPECT_TRUE(gone(old[0])) << "a zombie at most (its parent is stopped)";
  for (auto p : script) ::kill(p, SIGKILL);
  ::kill(cats[0], SIGKILL);
}
