#pragma once
// A real OpenSSH server for remote sessions (spec §6.11) on loopback ports, for the tests:
// the test makes its own host and client keys with ssh-keygen and runs /usr/sbin/sshd -D
// -e with its own configuration as the current user; olliesrv reaches it through the ssh
// configuration it writes into olliesrv's private HOME. "The other host" is the same machine
// seen through sshd: the login gets another HOME, XDG_CACHE_HOME and XDG_RUNTIME_DIR (sshd's
// SetEnv), and each failure has a port of its own (Match LocalPort): a PATH with an `uname` that
// names another architecture, a PATH without tar, stream-local forwarding refused. Running as
// root, sshd wants /run/sshd: it then runs in a private mount namespace with a tmpfs on /run
// (unshare -m), so no system file is touched.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "olliesrv/world.hpp"

namespace convo {

using testing_support::exists;

inline int free_port() {
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

inline bool accepts(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
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
    std::vector<char*> argv;  // made before the fork: the child only calls what is async-signal-safe
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid = ::fork();
    if (pid == 0) {
      ::dup2(log, 2);
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

/// A World whose HOME has the ssh configuration for `sshd`.
struct RemoteWorld : World {
  /// The config root's tools/ holds only what the remote tests run (the tarball of every start
  /// carries it, and this build's tools are sanitizer builds of 150 MB). Copies, not symlinks:
  /// a local session's sandbox grants rox on tools/, not on where a symlink points.
  explicit RemoteWorld(const Sshd& s) {
    write_file(home + "/.ssh/config", s.ssh_config());
    std::filesystem::remove(config + "/tools");
    std::filesystem::create_directories(config + "/tools");
    for (const std::string t : {"shell", "tool_load", "subagent_spawn"})
      for (const std::string ext : {"", ".meta"})
        std::filesystem::copy_file(testing_support::built("tools/" + t + ext), config + "/tools/" + t + ext);
  }
  std::string remote_session(const std::string& name, const std::string& alias, const Sshd& s) {
    auto r = rdwr("session/new", "name=" + name + " cwd=" + s.work + " remote=" + alias);
    if (!r) throw std::runtime_error("session/new: " + r.ename() + "\n" + log_text());
    return "session/" + name;
  }
  std::vector<pid_t> ssh_processes() const { return matching("ssh ", home + "/.ssh/config"); }
};

}  // namespace convo
