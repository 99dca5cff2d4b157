#include "client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "bridge.hpp"
#include "tool.hpp"

namespace lsp {

namespace {

/// The longest response read from the bridge.
constexpr std::size_t max_response = 64u << 20;
/// How long a call waits for the bridge's answer (the bridge bounds its own waits below this).
constexpr int answer_seconds = 58;

std::string key_of(const std::string& server, const std::string& root) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a: the same in every process
  for (unsigned char c : server + '\0' + root) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Place place_of(const Server& server, const std::string& root) {
  const char* tmp = std::getenv("TMPDIR");
  if (!tmp || tmp[0] != '/')
    throw tool::Error("TMPDIR is not set: the lsp tools keep their language server bridge in the session's private directory");
  Place p{std::string(tmp) + "/lsp", key_of(server.name, root)};
  if (::mkdir(p.dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw tool::Error("cannot create " + p.dir + ": " + std::strerror(errno));
  return p;
}

/// A Unix socket address for `path`; a path too long for sun_path goes through /proc/self/fd of
/// its directory, opened into `dirfd`.
sockaddr_un address(const std::string& path, int& dirfd) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::string name = path;
  if (name.size() >= sizeof a.sun_path) {
    const auto slash = path.rfind('/');
    dirfd = ::open(path.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    name = "/proc/self/fd/" + std::to_string(dirfd) + path.substr(slash);
    if (dirfd < 0 || name.size() >= sizeof a.sun_path) throw tool::Error("the socket path is too long: " + path);
  }
  std::memcpy(a.sun_path, name.c_str(), name.size() + 1);
  return a;
}

int dial(const std::string& path) {
  int dirfd = -1;
  const sockaddr_un a = address(path, dirfd);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int r = fd < 0 ? -1 : ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  if (dirfd >= 0) ::close(dirfd);
  if (r == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

int listen_on(const std::string& path) {
  int dirfd = -1;
  const sockaddr_un a = address(path, dirfd);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int r = fd < 0 ? -1 : ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  if (dirfd >= 0) ::close(dirfd);
  if (r != 0 || ::listen(fd, 16) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

int idle_seconds() {
  const char* v = std::getenv("OLLIE_LSP_IDLE");
  if (!v || !*v) return 600;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 1 && n <= 86400 ? static_cast<int>(n) : 600;
}

/// Starts the bridge: it leaves the call's process group and session (setsid, and a second fork
/// so it is not a session leader), binds the socket, writes its pid file and reports ready on a
/// pipe. Called with the lock held; the bridge closes its copy of the lock before serving.
void start_bridge(const BridgeConfig& config, int lock_fd) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) throw tool::Error("cannot start the language server bridge: no pipe");
  const std::string state = config.place.state();
  std::filesystem::create_directories(state);
  // The bridge leaves the call's process group (§6.6) but not its owner: it ends with the process
  // that ran this call (toolsrv), which ends with olliesrv. -1 (no pidfd here): the idle timer only.
  const int owner = static_cast<int>(::syscall(SYS_pidfd_open, ::getppid(), 0));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    if (owner >= 0) ::close(owner);
    throw tool::Error("cannot start the language server bridge: fork failed");
  }
  if (pid == 0) {
    ::close(ready[0]);
    ::setsid();
    if (const pid_t p = ::fork(); p != 0) ::_exit(p < 0 ? 1 : 0);
    ::close(lock_fd);
    const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    const int log = ::open((state + "/bridge.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(log >= 0 ? log : null, 2);  // stdout and stderr of the call are toolsrv's pipes: let go of them
    if (null > 2) ::close(null);
    if (log > 2) ::close(log);
    if (::chdir(state.c_str()) != 0) ::_exit(1);
    ::unlink(config.place.sock().c_str());
    int listener = -1;
    try {
      listener = listen_on(config.place.sock());
    } catch (const std::exception&) {
    }
    if (listener < 0) ::_exit(1);
    ::chmod(config.place.sock().c_str(), 0600);
    {
      const std::string tmp = config.place.pid() + ".tmp";
      std::ofstream(tmp, std::ios::trunc) << ::getpid() << "\n";
      std::rename(tmp.c_str(), config.place.pid().c_str());
    }
    (void)!::write(ready[1], "ok\n", 3);
    ::close(ready[1]);
    run_bridge(config, listener, owner);
  }
  if (owner >= 0) ::close(owner);
  ::close(ready[1]);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  pollfd p{ready[0], POLLIN, 0};
  char buf[4] = {};
  const bool ok = ::poll(&p, 1, 10000) == 1 && ::read(ready[0], buf, 3) == 3;
  ::close(ready[0]);
  if (!ok) throw tool::Error("the language server bridge did not start; its log is " + state + "/bridge.log");
}

int connect_or_start(const BridgeConfig& config) {
  if (const int fd = dial(config.place.sock()); fd >= 0) return fd;
  const int lock = ::open(config.place.lock().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0) throw tool::Error("cannot open " + config.place.lock() + ": " + std::strerror(errno));
  while (::flock(lock, LOCK_EX) != 0 && errno == EINTR) {
  }
  int fd = dial(config.place.sock());  // another call may have started it meanwhile
  try {
    if (fd < 0) {  // none, or a stale socket of a bridge that died: start a new one
      start_bridge(config, lock);
      fd = dial(config.place.sock());
    }
  } catch (...) {
    ::close(lock);
    throw;
  }
  ::close(lock);
  if (fd < 0) throw tool::Error("cannot reach the language server bridge at " + config.place.sock());
  return fd;
}

}  // namespace

json ask_bridge(const Server& server, const std::string& root, const json& request) {
  const BridgeConfig config{server, root, place_of(server, root), idle_seconds()};
  ::signal(SIGPIPE, SIG_IGN);
  std::optional<std::string> line;
  // A bridge that exits (idle) just as we connect closes without an answer: one more try then
  // starts a new one. A bridge that dies later is not tried again here.
  for (int attempt = 0; attempt < 2 && !line; attempt++) {
    const auto start = std::chrono::steady_clock::now();
    const int fd = connect_or_start(config);
    timeval tv{answer_seconds, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    const bool sent = write_all(fd, request.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
    line = sent ? read_line(fd, max_response) : std::nullopt;
    ::close(fd);
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(1)) break;
  }
  if (!line) throw tool::Error("the language server bridge did not answer; try again (a new one starts if it died)");
  json response = json::parse(*line, nullptr, false);
  if (!response.is_object()) throw tool::Error("the language server bridge answered something that is not JSON");
  if (response.contains("error") && response["error"].is_string())
    throw tool::Error(server.name.substr(server.name.rfind('/') + 1) + ": " + response["error"].get<std::string>());
  return response;
}

}  // namespace lsp
