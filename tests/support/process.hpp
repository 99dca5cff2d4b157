#pragma once
// Test support: run the project's real binaries as child processes.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace testing_support {

/// True when `path` names something (stat(2) follows it).
inline bool exists(const std::string& path) {
  struct stat s;
  return ::stat(path.c_str(), &s) == 0;
}

/// Waits up to 10 s for `path` to be there (or, `present` false, to be gone); true when it came.
inline bool wait_for(const std::string& path, bool present = true) {
  for (int i = 0; i < 1000; i++) {
    if (exists(path) == present) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

/// A binary of this build: $OLLIE_BUILD_DIR/<relative path>.
inline std::string built(const std::string& rel) {
  const char* b = std::getenv("OLLIE_BUILD_DIR");
  if (!b) throw std::runtime_error("OLLIE_BUILD_DIR is not set (run the tests through ctest)");
  return std::string(b) + "/" + rel;
}

struct Ran {
  int status = -1;  // exit status, or 128+signal
  std::string out, err;
};

class Child {
 public:
  /// Starts argv with extra environment entries ("K=V"); stdin, stdout and stderr are pipes.
  Child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) throw std::runtime_error("pipe");
    // Everything the child needs is made before the fork: a test's other threads (a fake
    // provider's) may hold the allocator's lock at that moment, and a child that allocated
    // would wait for it for ever, never reaching its exec.
    std::vector<std::string> merged;
    for (char** e = environ; *e; e++) {
      const std::string_view kv(*e);
      const auto key = kv.substr(0, kv.find('=') + 1);
      const auto overridden = [&](const std::string& x) { return !key.empty() && x.rfind(key, 0) == 0; };
      if (std::none_of(env.begin(), env.end(), overridden)) merged.emplace_back(kv);
    }
    merged.insert(merged.end(), env.begin(), env.end());
    std::vector<char*> a, envp;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (auto& e : merged) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {  // only async-signal-safe calls until exec
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      execvpe(a[0], a.data(), envp.data());
      _exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    in_ = in[1];
    out_ = out[0];
    err_ = err[0];
  }
  ~Child() {
    if (pid_ > 0 && status_ < 0) {
      ::kill(pid_, SIGKILL);
      wait(5000);
    }
    for (int fd : {in_, out_, err_})
      if (fd >= 0) ::close(fd);
  }
  Child(const Child&) = delete;

  pid_t pid() const { return pid_; }
  void write_stdin(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::write(in_, s.data() + off, s.size() - off);
      if (n <= 0) break;
      off += n;
    }
  }
  void close_stdin() {
    if (in_ >= 0) ::close(in_);
    in_ = -1;
  }
  /// Reads stdout until it holds `want` or the timeout passes; returns what was read so far.
  std::string read_until(const std::string& want, int timeout_ms = 10000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (out_text_.find(want) == std::string::npos) {
      int left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0 || !pump(out_, out_text_, left)) break;
    }
    return out_text_;
  }
  /// Waits for exit (draining output); false on timeout.
  bool wait(int timeout_ms = 20000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      int st;
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        while (pump(out_, out_text_, 0)) {
        }
        while (pump(err_, err_text_, 0)) {
        }
        return true;
      }
      if (std::chrono::steady_clock::now() > deadline) return false;
      pump(out_, out_text_, 5);
      pump(err_, err_text_, 5);
    }
  }
  /// Reads stderr until it holds `text` (true), or `ms` pass (false).
  bool wait_for_err(const std::string& text, int ms = 20000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (err_text_.find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pump(err_, err_text_, 5);
    }
    return true;
  }
  Ran result() const { return {status_, out_text_, err_text_}; }
  const std::string& err_text() const { return err_text_; }

 private:
  static bool pump(int fd, std::string& into, int timeout_ms) {
    if (fd < 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[65536];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    into.append(buf, n);
    return true;
  }

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  int status_ = -1;
  std::string out_text_, err_text_;
};

/// Runs a command to completion with the given stdin.
inline Ran run(const std::vector<std::string>& argv, const std::string& input = "", const std::vector<std::string>& env = {}) {
  Child c(argv, env);
  c.write_stdin(input);
  c.close_stdin();
  if (!c.wait()) throw std::runtime_error("timed out: " + argv[0]);
  return c.result();
}

}  // namespace testing_support
