#pragma once
// Test support: the real toolsrv binary on a real socket, its secret on descriptor 3 exactly as
// olliesrv hands it over, and a p9::Client attached with that secret.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lib9p/client.hpp"
#include "support/process.hpp"
#include "world.hpp"

namespace toolsrv::test {

inline const std::string test_secret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

using testing_support::exists;

/// True when a Unix socket at `path` accepts a connection.
inline bool accepts(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  const bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

/// Polls `ok` every 10 ms for at most `limit`.
template <class F>
bool eventually(F ok, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!ok()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

/// One toolsrv process. `fd3` is what it finds on descriptor 3 (nullopt: not open).
class Daemon {
 public:
  std::string root, sock, cwd, config;

  explicit Daemon(std::optional<std::string> fd3 = test_secret + "\n", const std::string& policy = default_policy()) {
    world();
    root = temp_dir("daemon");
    sock = root + "/run/toolsrv.sock";
    cwd = root + "/cwd";
    config = root + "/config";
    std::filesystem::create_directories(cwd);
    std::filesystem::create_directories(config);
    if (!policy.empty()) write_file(config + "/sandbox.yaml", policy);
    start(fd3);
  }
  ~Daemon() {
    if (pid_ > 0 && status_ < 0) {
      ::kill(pid_, SIGKILL);
      wait_exit();
    }
    if (err_ >= 0) ::close(err_);
  }
  Daemon(const Daemon&) = delete;

  std::string addr() const { return "unix!" + sock; }
  pid_t pid() const { return pid_; }

  /// Waits until the socket accepts a connection (it exists a moment before toolsrv listens);
  /// false (with stderr in err_text) when toolsrv exited or never listened.
  bool listening() {
    return eventually([&] { return accepts(sock) || exited(); }) && !exited();
  }
  bool exited() {
    if (status_ >= 0) return true;
    int st;
    if (::waitpid(pid_, &st, WNOHANG) != pid_) return false;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return true;
  }
  /// The exit status, waiting at most 30 s (-1 if still running).
  int wait_exit() {
    eventually([&] { return exited(); }, std::chrono::seconds(30));
    return status_;
  }
  /// Everything toolsrv wrote on stderr so far.
  const std::string& err_text() {
    char buf[4096];
    for (;;) {
      pollfd p{err_, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
      ssize_t n = ::read(err_, buf, sizeof buf);
      if (n <= 0) break;
      err_text_.append(buf, n);
    }
    return err_text_;
  }

  /// A connection attached with the right secret.
  std::shared_ptr<p9::Client> client(p9::CFid& root_fid) {
    auto c = p9::Client::dial(addr());
    if (!c) throw std::runtime_error("dial: " + c.ename());
    auto afid = (*c)->auth("olliesrv");
    if (!afid) throw std::runtime_error("auth: " + afid.ename());
    if (auto w = afid->write(test_secret); !w) throw std::runtime_error("secret: " + w.ename());
    auto r = (*c)->attach("olliesrv", "", &*afid);
    if (!r) throw std::runtime_error("attach: " + r.ename());
    root_fid = std::move(*r);
    return *c;
  }

 private:
  void start(const std::optional<std::string>& fd3) {
    int secret[2] = {-1, -1}, err[2];
    if (fd3 && ::pipe(secret) != 0) throw std::runtime_error("pipe");
    if (::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    const std::string bin = testing_support::built("bin/toolsrv");
    std::vector<std::string> args{bin, "-a", addr(), "-cwd", cwd, "-config", config};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string tools_env = "OLLIE_TOOLS_PATH=" + fixture_tools, log_env = "OLLIE_LOG=info";
    std::vector<char*> envp;
    for (char** e = environ; *e; e++)
      if (std::strncmp(*e, "OLLIE_", 6) != 0) envp.push_back(*e);
    envp.push_back(tools_env.data());
    envp.push_back(log_env.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {  // only async-signal-safe calls until exec
      ::dup2(err[1], 2);
      if (fd3) {
        ::dup2(secret[0], 3);
        if (secret[0] != 3) ::close(secret[0]);
        ::close(secret[1]);
      } else {
        ::close(3);
      }
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(err[1]);
    err_ = err[0];
    if (fd3) {
      ::close(secret[0]);
      if (!fd3->empty()) (void)!::write(secret[1], fd3->data(), fd3->size());
      ::close(secret[1]);
    }
  }

  pid_t pid_ = -1;
  int err_ = -1;
  int status_ = -1;
  std::string err_text_;
};

/// Writes `text` to a fresh fid of `path` and clunks it (a Write file): the clunk's error, if any.
inline p9::Status write_file9(const p9::CFid& root, const std::string& path, const std::string& text) {
  auto f = root.walk(path);
  if (!f) return f.error();
  if (auto st = f->open(p9::OWRITE); !st) return st;
  if (auto w = f->write(text); !w) return w.error();
  return f->clunk();
}

/// One Rdwr exchange on a fresh fid of `path`.
inline p9::Result<std::string> rdwr(const p9::CFid& root, const std::string& path, const std::string& request) {
  auto f = root.walk(path);
  if (!f) return f.error();
  if (auto st = f->open(p9::ORDWR); !st) return st.error();
  if (!request.empty())
    if (auto w = f->write(request); !w) return w.error();
  f->seek(0);
  return f->read_all();
}

/// Everything a Read or Stream file gives until EOF.
inline p9::Result<std::string> read9(const p9::CFid& root, const std::string& path) {
  auto f = root.walk(path);
  if (!f) return f.error();
  if (auto st = f->open(p9::OREAD); !st) return st.error();
  return f->read_all();
}

}  // namespace toolsrv::test
