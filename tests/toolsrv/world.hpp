#pragma once
// Shared set-up of the toolsrv tests: a private temporary tree with its own HOME, XDG dirs and
// config root, and a Session over the fixture tools. Environment variables are set once, before
// any test starts a thread.

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "toolsrv/session.hpp"

namespace toolsrv::test {

inline const std::string data_dir = TOOLSRV_TEST_DATA;
inline const std::string fixture_tools = data_dir + "/tools";

inline void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  ::chmod(path.c_str(), mode);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// A fresh directory under /tmp, removed with all it holds when the test program exits (a run
/// of the suite made some 400 of them).
inline std::string temp_dir(const std::string& tag) {
  struct Made {
    std::vector<std::string> dirs;
    ~Made() {
      std::error_code ec;
      for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
    }
  };
  static Made made;
  std::string templ = "/tmp/toolsrv-" + tag + "-XXXXXX";
  if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp " + templ + ": " + std::strerror(errno));
  made.dirs.push_back(templ);
  return templ;
}

/// The per-binary world: HOME and XDG_* point into one temporary tree.
struct World {
  std::string root, home;
  World() {
    root = temp_dir("world");
    home = root + "/home";
    std::filesystem::create_directories(home);
    std::filesystem::create_directories(root + "/run");
    ::chmod((root + "/run").c_str(), 0700);
    ::setenv("HOME", home.c_str(), 1);
    ::setenv("XDG_RUNTIME_DIR", (root + "/run").c_str(), 1);
    ::setenv("XDG_DATA_HOME", (root + "/data").c_str(), 1);
    ::setenv("XDG_CONFIG_HOME", (root + "/config").c_str(), 1);
    ::unsetenv("OLLIE_TOOLS_PATH");
    ::unsetenv("OLLIE_SESSION_ID");
  }
};

inline World& world() {
  static World w;
  return w;
}

/// The shipped policy.
/// start() and wait for the process (never from a callback of the table).
inline std::shared_ptr<Process> start_sync(ProcessTable& t, Launch launch) {
  std::promise<std::shared_ptr<Process>> promise;
  auto future = promise.get_future();
  t.start(std::move(launch), [&promise](std::shared_ptr<Process> p) { promise.set_value(std::move(p)); });
  return future.get();
}

inline std::string default_policy() { return read_file(data_dir + "/../../../data/sandbox.yaml"); }

/// One session: its own config root (with `policy` as sandbox.yaml, none if empty), cwd and id.
struct Fixture {
  std::string config, cwd;
  std::unique_ptr<Session> session;

  explicit Fixture(const std::string& policy = default_policy(),
                   std::chrono::seconds bypass_timeout = std::chrono::seconds(300),
                   const std::string& tools_path = fixture_tools) {
    world();
    static int n = 0;
    config = temp_dir("cfg");
    cwd = temp_dir("cwd");
    if (!policy.empty()) write_file(config + "/sandbox.yaml", policy);
    auto c = SessionConfig::from_environment(config, cwd, "/usr/bin");
    c.session_id = "test-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
    c.tmpdir = world().root + "/run/ollie/tmp/" + c.session_id;
    c.tools_path = tools_path;
    c.bypass_timeout = bypass_timeout;
    session = std::make_unique<Session>(c);
  }

  /// Loads `tool` for agent "a1".
  void load(const std::string& tool) {
    auto r = session->load("a1", {tool});
    if (!r) throw std::runtime_error(r.ename());
  }

  /// Runs a foreground call and returns its reply.
  std::string run(const std::string& request_text, std::chrono::seconds limit = std::chrono::seconds(60)) {
    auto req = parse_call_request(request_text);
    if (!req) return "Rerror " + req.ename();
    auto promise = std::make_shared<std::promise<std::string>>();
    auto fut = promise->get_future();
    auto call = session->call(*req, [promise](std::string reply) { promise->set_value(std::move(reply)); });
    if (!call) return "Rerror " + call.ename();
    if (fut.wait_for(limit) != std::future_status::ready) return "no reply";
    return fut.get();
  }

  /// Runs the `shell` fixture with `cmd` (no double quotes or backslashes in it).
  std::string sh(const std::string& cmd, const std::string& extra_headers = "") {
    return run("tool=shell\nagent=a1\n" + extra_headers + "\n{\"cmd\":\"" + cmd + "\"}");
  }
};

/// A reply's header value, "" if absent.
inline std::string header(const std::string& reply, const std::string& key) {
  const auto end = reply.find("\n\n");
  const auto head = reply.substr(0, end);
  const auto at = ("\n" + head).find("\n" + key + "=");
  if (at == std::string::npos) return "";
  const auto start = at + key.size() + 1;
  const auto nl = head.find('\n', start);
  return head.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
}

/// A reply's stdout and stderr.
inline std::string body_stdout(const std::string& reply) {
  return reply.substr(reply.find("\n\n") + 2, std::stoul(header(reply, "stdout")));
}
inline std::string body_stderr(const std::string& reply) {
  return reply.substr(reply.find("\n\n") + 2 + std::stoul(header(reply, "stdout")));
}

}  // namespace toolsrv::test
