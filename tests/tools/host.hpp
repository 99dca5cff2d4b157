#pragma once
// Test support for the shipped tools: a real toolsrv (bin/toolsrv of this build) over a real
// socket, run as olliesrv runs it, with a private HOME and XDG tree, the shipped
// data/sandbox.yaml, and the build's tools/ as the config root's tools/ (a symlink, so the
// sandbox's `{OLLIE_CFG_PATH}/tools` rule grants it exactly as it grants an installed one).
// call() is one proc/new exchange, what the engine does for every tool call.

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "lib9p/client.hpp"
#include "support/process.hpp"

namespace tools_test {

inline const std::string secret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
inline const std::string agent = "3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77";

inline std::string source(const std::string& rel) {
  const char* s = (std::getenv("OLLIE_SOURCE_DIR") ? std::getenv("OLLIE_SOURCE_DIR") : OLLIE_TEST_SOURCE_DIR);
  if (!s) throw std::runtime_error("OLLIE_SOURCE_DIR is not set (run the tests through ctest)");
  return std::string(s) + "/" + rel;
}

inline void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  ::chmod(path.c_str(), mode);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// The reply of proc/new (§6.5.2), parsed.
struct Reply {
  std::map<std::string, std::string> header;
  std::string out, err;
  std::string status() const { return header.count("status") ? header.at("status") : ""; }
  int exit() const { return header.count("exit") ? std::stoi(header.at("exit")) : -1; }
  /// Exited with status 0.
  bool ok() const { return status() == "exited" && exit() == 0; }
};

inline Reply parse_reply(const std::string& text) {
  Reply r;
  const auto blank = text.find("\n\n");
  if (blank == std::string::npos) throw std::runtime_error("reply without a body: " + text);
  std::size_t i = 0;
  while (i < blank) {
    const auto nl = text.find('\n', i);
    const std::string line = text.substr(i, nl - i);
    const auto eq = line.find('=');
    r.header[line.substr(0, eq)] = eq == std::string::npos ? "" : line.substr(eq + 1);
    i = nl + 1;
  }
  const std::size_t n_out = std::stoul(r.header.at("stdout")), n_err = std::stoul(r.header.at("stderr"));
  r.out = text.substr(blank + 2, n_out);
  r.err = text.substr(blank + 2 + n_out, n_err);
  return r;
}

/// One session's toolsrv. `root` holds home/ (with the config root home/.config/ollie and the data
/// root home/.local/share/ollie), run/ (XDG_RUNTIME_DIR) and the session cwd `cwd` (project/).
class ToolHost {
 public:
  std::string root, home, config, cwd, sock;

  /// `policy`: the sandbox.yaml text; empty = the shipped one.
  explicit ToolHost(std::string policy = "") {
    std::string templ = "/tmp/ollie-tools-XXXXXX";
    root = ::mkdtemp(templ.data());
    home = root + "/home";
    config = home + "/.config/ollie";
    cwd = root + "/project";
    sock = root + "/run/ollie/toolsrv/test.sock";
    for (const auto& d : {home, config, cwd, home + "/.local/share/ollie", root + "/run/ollie/toolsrv"})
      std::filesystem::create_directories(d);
    for (const auto& d : {root + "/run", root + "/run/ollie", root + "/run/ollie/toolsrv"}) ::chmod(d.c_str(), 0700);
    if (policy.empty()) policy = read_file(source("data/sandbox.yaml"));
    write_file(config + "/sandbox.yaml", policy);
    std::filesystem::create_directory_symlink(testing_support::built("tools"), config + "/tools");
    if (std::filesystem::exists(source("data/skills")))
      std::filesystem::create_directory_symlink(source("data/skills"), config + "/skills");
    start();
  }
  ~ToolHost() {
    root_ = {};
    client_.reset();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  ToolHost(const ToolHost&) = delete;

  /// The environment toolsrv gets: ours without OLLIE_*, HOME and XDG_* private.
  std::vector<std::string> env() const {
    return {"HOME=" + home, "XDG_CONFIG_HOME=" + home + "/.config", "XDG_DATA_HOME=" + home + "/.local/share",
            "XDG_RUNTIME_DIR=" + root + "/run", "XDG_CACHE_HOME=" + home + "/.cache", "XDG_STATE_HOME=" + home + "/.local/state",
            "OLLIE_SESSION_ID=11111111-2222-4333-8444-555555555555"};
  }

  /// ctl commands, one per line; the clunk's error as a p9::Status.
  p9::Status ctl(const std::string& text) {
    auto f = root_.walk("ctl");
    if (!f) return f.error();
    if (auto st = f->open(p9::OWRITE); !st) return st;
    if (auto w = f->write(text); !w) return w.error();
    return f->clunk();
  }
  /// Loads tools for the test agent (throws with toolsrv's error).
  void load(const std::string& tools) {
    if (auto st = ctl("load " + agent + " " + tools + "\n"); !st) throw std::runtime_error("load: " + st.ename());
  }
  /// The tool's catalog entry (`tools` request `*`), as JSON text.
  std::string catalog() { return rdwr("tools", "*"); }

  /// toolsrv's process id.
  pid_t pid() const { return pid_; }

  /// One call of a loaded tool, as the engine makes it: `args` is the JSON object text.
  Reply call(const std::string& tool, const std::string& args, int timeout = 30) {
    return parse_reply(rdwr("proc/new", "tool=" + tool + "\nagent=" + agent + "\ntimeout=" + std::to_string(timeout) +
                                             "\nauth=" + secret + "\n\n" + args));
  }

  std::string rdwr(const std::string& path, const std::string& request) {
    auto f = root_.walk(path);
    if (!f) throw std::runtime_error(path + ": " + f.ename());
    if (auto st = f->open(p9::ORDWR); !st) throw std::runtime_error(path + ": " + st.ename());
    if (auto w = f->write(request); !w) throw std::runtime_error(path + ": " + w.ename());
    f->seek(0);
    auto r = f->read_all();
    if (!r) throw std::runtime_error(path + ": " + r.ename());
    return *r;
  }

 private:
  void start() {
    // The secret reaches toolsrv on descriptor 3, as olliesrv hands it over (§6.1); stderr goes
    // to <root>/toolsrv.log for the failure messages.
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    const int log = ::open((root + "/toolsrv.log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    std::vector<std::string> args{testing_support::built("bin/toolsrv"), "-a", "unix!" + sock, "-cwd", cwd, "-config", config};
    std::vector<std::string> envs = env();
    for (char** p = environ; *p; p++) {
      const std::string e(*p);
      const auto name = e.substr(0, e.find('='));
      if (name.rfind("OLLIE_", 0) == 0 || name == "HOME" || name.rfind("XDG_", 0) == 0) continue;
      envs.push_back(e);
    }
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {  // only async-signal-safe calls until exec
      ::dup2(log, 2);
      if (fds[0] == 3) ::fcntl(3, F_SETFD, 0);
      else ::dup2(fds[0], 3);  // dup2 clears close-on-exec on the copy
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(fds[0]);
    ::close(log);
    (void)!::write(fds[1], (secret + "\n").data(), secret.size() + 1);
    ::close(fds[1]);
    for (int i = 0; i < 4000 && !client_; i++) {
      if (auto c = p9::Client::dial("unix!" + sock)) client_ = *c;
      else std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!client_) throw std::runtime_error("toolsrv did not listen: " + read_file(root + "/toolsrv.log"));
    auto afid = client_->auth("olliesrv");
    if (!afid) throw std::runtime_error("auth: " + afid.ename());
    if (auto w = afid->write(secret); !w) throw std::runtime_error("secret: " + w.ename());
    auto r = client_->attach("olliesrv", "", &*afid);
    if (!r) throw std::runtime_error("attach: " + r.ename());
    root_ = std::move(*r);
  }

  pid_t pid_ = -1;
  std::shared_ptr<p9::Client> client_;
  p9::CFid root_;
};

}  // namespace tools_test
