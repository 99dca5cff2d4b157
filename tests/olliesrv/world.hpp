#pragma once
// Test support for conversations: the real olliesrv binary (with its real toolsrv and the
// shipped tools, profiles, prompts and sandbox.yaml) in a private HOME, talking to the fake
// provider over real HTTP as an openai-compatible backend; a p9::Client attached as the
// hostowner, and ollie-9p for the shell's view.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib9p/client.hpp"
#include "server.hpp"
#include "support/process.hpp"

namespace convo {

using namespace std::chrono_literals;

inline std::string source(const std::string& rel) {
  const char* s = (std::getenv("OLLIE_SOURCE_DIR") ? std::getenv("OLLIE_SOURCE_DIR") : OLLIE_TEST_SOURCE_DIR);
  if (!s) throw std::runtime_error("OLLIE_SOURCE_DIR is not set (run the tests through ctest)");
  return std::string(s) + "/" + rel;
}

inline void write_file(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

/// The file's bytes; "" when it cannot be opened. A read that fails midway (a /proc file of a
/// process that has just exited: ESRCH) ends the text there instead of throwing.
inline std::string read_file(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

/// Polls `ok` every 5 ms for at most `limit`.
template <class F>
bool eventually(F ok, std::chrono::milliseconds limit = 20s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!ok()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

/// Command lines of every process, pid → text (NULs as spaces).
inline std::vector<std::pair<pid_t, std::string>> processes() {
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

/// The parent of a process; -1 once it is gone.
inline pid_t parent_of(pid_t pid) {
  const std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  const auto at = status.find("PPid:\t");
  return at == std::string::npos ? -1 : std::stoi(status.substr(at + 6));
}

/// The processes whose command line holds both `a` and `b`.
inline std::vector<pid_t> matching(const std::string& a, const std::string& b) {
  std::vector<pid_t> out;
  for (auto& [pid, cmd] : processes())
    if (cmd.find(a) != std::string::npos && cmd.find(b) != std::string::npos) out.push_back(pid);
  return out;
}

/// matching() without the children of a match: a fork carries its parent's command line until it
/// execs (a tool being spawned, toolsrv's connector), and is not another server.
inline std::vector<pid_t> servers(const std::string& a, const std::string& b) {
  const auto all = matching(a, b);
  std::vector<pid_t> out;
  for (auto pid : all)
    if (std::find(all.begin(), all.end(), parent_of(pid)) == all.end()) out.push_back(pid);
  return out;
}

/// One olliesrv with its own HOME. `fake` answers as every provider; the backend is openai.
class World {
 public:
  std::string root, home, config, data, project, sock;
  fakeprovider::Server fake;

  /// `script`: the fake provider's (doc/fakeprovider.md), e.g. its models' context lengths.
  explicit World(nlohmann::json script = nlohmann::json::object()) : fake(std::move(script)) {
    std::string templ = "/tmp/ollie-convo-XXXXXX";
    root = ::mkdtemp(templ.data());
    home = root + "/home";
    config = home + "/.config/ollie";
    data = home + "/.local/share/ollie";
    project = root + "/project";
    sock = root + "/ns/ollie";
    for (const auto& d : {home, config, data, project, root + "/run", root + "/ns"}) std::filesystem::create_directories(d);
    ::chmod((root + "/run").c_str(), 0700);
    ::chmod((root + "/ns").c_str(), 0700);
    write_file(config + "/sandbox.yaml", read_file(source("data/sandbox.yaml")));
    std::filesystem::create_directory_symlink(testing_support::built("tools"), config + "/tools");
    std::filesystem::create_directory_symlink(source("data/agents"), config + "/agents");
    std::filesystem::create_directory_symlink(source("data/prompts"), config + "/prompts");
    start();
  }
  ~World() {
    client_.reset();
    stop_server(SIGKILL);
    kill_toolsrvs();
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  World(const World&) = delete;

  /// Replaces the config's `name` link (agents, tools) with a directory of links to what it
  /// pointed to, so a test can add or replace entries before an agent or toolsrv reads them.
  /// Returns the directory.
  std::string own_dir(const std::string& name) const {
    namespace fs = std::filesystem;
    const fs::path link = config + "/" + name;
    const fs::path target = fs::read_symlink(link);
    fs::remove(link);
    fs::create_directory(link);
    for (const auto& e : fs::directory_iterator(target)) fs::create_symlink(e.path(), link / e.path().filename());
    return link.string();
  }

  /// More variables for olliesrv (restart_with sets them).
  std::vector<std::string> extra_env;
  /// olliesrv stopped (SIGTERM) and started again with `env` as its extra variables.
  void restart_with(std::vector<std::string> env) {
    extra_env = std::move(env);
    stop_server(SIGTERM);
    start();
  }

  std::vector<std::string> env() const {
    std::vector<std::string> e{"HOME=" + home,
            "XDG_CONFIG_HOME=" + home + "/.config",
            "XDG_DATA_HOME=" + home + "/.local/share",
            "XDG_RUNTIME_DIR=" + root + "/run",
            "NAMESPACE=" + root + "/ns",
            "OLLIE_BACKEND=openai",
            "OLLIE_OPENAI_URL=" + fake.url() + "/v1",
            "OLLIE_OPENAI_KEY=sk-test",
            "OLLIE_MODEL=fake-model",
            "OLLIE_TEST_RETRY_UNIT_MS=5",
            // ollie-9p on PATH, as an installed one is (tools call back with it)
            "PATH=" + testing_support::built("bin") + ":" + std::string(std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin")};
    e.insert(e.end(), extra_env.begin(), extra_env.end());
    return e;
  }

  /// Starts olliesrv and attaches.
  void start() {
    std::vector<std::string> args{testing_support::built("bin/olliesrv"), "-a", "unix!" + sock, "-l", "info"};
    std::vector<std::string> envs = env();
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int log = ::open((root + "/olliesrv.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(log, 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(log);
    for (int i = 0; i < 4000 && !client_; i++) {
      if (auto c = p9::Client::dial("unix!" + sock)) client_ = *c;
      else std::this_thread::sleep_for(5ms);
    }
    if (!client_) throw std::runtime_error("olliesrv did not listen: " + log_text());
    auto r = client_->attach(login(), "");
    if (!r) throw std::runtime_error("attach: " + r.ename());
    root_ = std::move(*r);
    // Sessions are restored after the listener is up (§7.7): wait for this start's restore to end
    // (its log line; the log is appended to by every start), as a test reads right after a restart.
    starts_++;
    const auto restores = [&] {
      const std::string t = log_text();
      int n = 0;
      for (auto at = t.find("] restored "); at != std::string::npos; at = t.find("] restored ", at + 1)) n++;
      return n;
    };
    if (!eventually([&] { return restores() >= starts_; }))
      throw std::runtime_error("olliesrv did not finish its restore: " + log_text());
  }
  /// Kills olliesrv with `sig` and waits for it.
  void stop_server(int sig) {
    root_ = {};
    client_.reset();
    if (pid_ > 0) {
      ::kill(pid_, sig);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  std::string log_text() const { return read_file(root + "/olliesrv.log"); }

  static std::string login() {
    auto r = testing_support::run({"id", "-un"});
    std::string n = r.out;
    while (!n.empty() && n.back() == '\n') n.pop_back();
    return n;
  }

  // ---- 9P, as the hostowner ----
  p9::Result<std::string> read(const std::string& path) {
    auto f = root_.walk(path);
    if (!f) return f.error();
    if (auto st = f->open(p9::OREAD); !st) return st.error();
    return f->read_all();
  }
  /// A Write file: written, then clunked (the clunk's error is the result).
  p9::Status write(const std::string& path, const std::string& text) {
    auto f = root_.walk(path);
    if (!f) return f.error();
    if (auto st = f->open(p9::OWRITE); !st) return st;
    if (!text.empty())
      if (auto w = f->write(text); !w) return w.error();
    return f->clunk();
  }
  p9::Result<std::string> rdwr(const std::string& path, const std::string& request) {
    auto f = root_.walk(path);
    if (!f) return f.error();
    if (auto st = f->open(p9::ORDWR); !st) return st.error();
    if (auto w = f->write(request); !w) return w.error();
    f->seek(0);
    return f->read_all();
  }
  /// A walked, unopened fid (stat, wstat).
  p9::Result<p9::CFid> walk(const std::string& path) { return root_.walk(path); }
  /// An open Stream fid.
  p9::CFid open(const std::string& path) {
    auto f = root_.walk(path);
    if (!f) throw std::runtime_error(path + ": " + f.ename());
    if (auto st = f->open(p9::OREAD); !st) throw std::runtime_error(path + ": " + st.ename());
    return std::move(*f);
  }
  /// Reads a Stream fid until `want` appears (or EOF, or `limit`); everything read.
  static std::string read_until(p9::CFid& f, const std::string& want, std::string sofar = "",
                                std::chrono::milliseconds limit = 20s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (sofar.find(want) == std::string::npos && std::chrono::steady_clock::now() < end) {
      auto r = f.read(8192);
      if (!r || r->empty()) break;
      sofar += *r;
    }
    return sofar;
  }

  /// session/new and agent/new: the agent's path.
  std::string session(const std::string& name, const std::string& extra = "") {
    auto r = rdwr("session/new", "name=" + name + " cwd=" + project + (extra.empty() ? "" : " " + extra));
    if (!r) throw std::runtime_error("session/new: " + r.ename());
    return "session/" + name;
  }
  std::string agent(const std::string& session_path, const std::string& name, const std::string& extra = "") {
    auto r = rdwr(session_path + "/agent/new", "name=" + name + (extra.empty() ? "" : " " + extra));
    if (!r) throw std::runtime_error("agent/new: " + r.ename());
    return session_path + "/agent/" + name;
  }
  /// Waits until the agent's state is `state`.
  bool wait_state(const std::string& agent_path, const std::string& state, std::chrono::milliseconds limit = 20s) {
    return eventually(
        [&] { return read_state(agent_path) == state; },
        limit);
  }
  std::string read_state(const std::string& agent_path) {
    // statewait blocks until a change; the first read of a fresh fid answers the value at once
    // only if it changed since open, so read the idx line instead.
    const auto slash = agent_path.rfind('/');
    const std::string name = agent_path.substr(slash + 1);
    auto idx = read(agent_path.substr(0, slash) + "/idx");
    if (!idx) return "";
    std::size_t pos = 0;
    while (pos < idx->size()) {
      auto nl = idx->find('\n', pos);
      std::string line = idx->substr(pos, nl - pos);
      pos = nl + 1;
      if (line.rfind(name + "\t", 0) == 0) {
        auto b = line.find('\t', line.find('\t') + 1);
        auto c = line.find('\t', b + 1);
        return line.substr(b + 1, c - b - 1);
      }
    }
    return "";
  }

  /// Every toolsrv process of this world (their -config is under our HOME).
  std::vector<pid_t> toolsrvs() const { return servers("/toolsrv ", root); }
  void kill_toolsrvs() const {
    for (auto p : toolsrvs()) ::kill(p, SIGKILL);
  }
  /// The pidfds olliesrv holds open.
  std::size_t pidfds() const {
    std::size_t n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid_) + "/fd", ec)) {
      std::error_code link_ec;
      if (std::filesystem::read_symlink(e.path(), link_ec).string() == "anon_inode:[pidfd]") n++;
    }
    return n;
  }

 private:
  pid_t pid_ = -1;
  int starts_ = 0;
  std::shared_ptr<p9::Client> client_;
  p9::CFid root_;
};

/// The JSON objects of a JSONL text (log.raw, the audit log), oldest first.
/// A Tread of the open fid `f` sent, not waited for (a test flushes it): its tag, and the reply
/// to come (none, once flushed).
struct PendingRead {
  std::uint16_t tag;
  std::future<p9::Result<p9::Fcall>> reply;
};
inline PendingRead start_read(p9::CFid& f) {
  p9::Fcall t;
  t.type = p9::Tread;
  t.fid = f.num();
  t.count = 8192;
  auto reply = std::make_shared<std::promise<p9::Result<p9::Fcall>>>();
  auto got = reply->get_future();
  const auto tag = f.client().start(t, [reply](p9::Result<p9::Fcall> r) { reply->set_value(std::move(r)); });
  return {tag, std::move(got)};
}

inline std::vector<nlohmann::json> blocks_of(const std::string& jsonl) {
  std::vector<nlohmann::json> out;
  for (std::size_t pos = 0, nl; pos < jsonl.size() && (nl = jsonl.find('\n', pos)) != std::string::npos; pos = nl + 1)
    out.push_back(nlohmann::json::parse(jsonl.substr(pos, nl - pos)));
  return out;
}

/// The agent's blocks, from its log.raw.
inline std::vector<nlohmann::json> blocks_of(World& w, const std::string& agent) {
  auto r = w.read(agent + "/log.raw");
  return r ? blocks_of(*r) : std::vector<nlohmann::json>{};
}

/// The contents of the agent's blocks of `role` (and `name`, when given), oldest first.
inline std::vector<std::string> contents(World& w, const std::string& agent, const std::string& role,
                                         const std::optional<std::string>& name = std::nullopt) {
  std::vector<std::string> out;
  for (const auto& b : blocks_of(w, agent))
    if (b["role"] == role && (!name || b.value("name", "") == *name)) out.push_back(b["content"]);
  return out;
}

/// The bodies of the chat requests the fake provider has received (on paths containing `path`:
/// the openai dialect's by default), as sent, in order.
inline std::vector<std::string> chat_texts(World& w, const std::string& path = "/chat/completions") {
  std::vector<std::string> out;
  for (auto& r : w.fake.requests())
    if (r.path.find(path) != std::string::npos) out.push_back(r.body);
  return out;
}

/// chat_texts(), parsed.
inline std::vector<nlohmann::json> chat_bodies(World& w, const std::string& path = "/chat/completions") {
  std::vector<nlohmann::json> out;
  for (const auto& t : chat_texts(w, path)) out.push_back(nlohmann::json::parse(t));
  return out;
}

/// The n-th chat request's body (from 0), parsed; null before it came.
/// Replaces the shipped profiles (a link to data/agents) by a private copy plus `extra` (name →
/// JSON text), so a test's profiles never land in the source tree.
inline void own_profiles(World& w, const std::map<std::string, std::string>& extra) {
  std::filesystem::remove(w.config + "/agents");
  std::filesystem::create_directories(w.config + "/agents");
  for (const auto& e : std::filesystem::directory_iterator(source("data/agents")))
    std::filesystem::copy_file(e.path(), w.config + "/agents/" + e.path().filename().string());
  for (const auto& [n, text] : extra) write_file(w.config + "/agents/" + n + ".json", text);
}

inline nlohmann::json request_body(World& w, std::size_t n) {
  const auto texts = chat_texts(w);
  return n < texts.size() ? nlohmann::json::parse(texts[n]) : nlohmann::json();
}

/// An object's id (the first line of its `id` file), or "" if it cannot be read.
inline std::string id_of(World& w, const std::string& path) {
  auto r = w.read(path + "/id");
  return r ? r->substr(0, r->find('\n')) : "";
}

/// An agent `ctl` request's reply, or `error: <its error>`.
inline std::string ctl(World& w, const std::string& agent, const std::string& request) {
  auto r = w.rdwr(agent + "/ctl", request);
  return r ? *r : "error: " + r.ename();
}

/// How many chat requests the fake provider has received.
inline std::size_t chat_requests(World& w) { return chat_texts(w).size(); }

}  // namespace convo
