#include "bridge.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>

#include "cdb.hpp"
#include "rpc.hpp"
#include "session.hpp"

extern char** environ;

namespace lsp {

namespace {

using clock = Session::clock;
using std::chrono::seconds;

/// Connections served at once; more get an error at once.
constexpr int max_clients = 4;
/// The longest request line a tool may send.
constexpr std::size_t max_request = 1u << 20;
/// Bounds of one request: starting the server, the server building the file and its index, the
/// server's answer.
constexpr seconds start_time{15}, ready_time{20}, answer_time{20};

class Bridge {
 public:
  explicit Bridge(const BridgeConfig& c) : config_(c) {}

  std::string handle(const std::string& line) {
    json out;
    try {
      out = dispatch(json::parse(line));
    } catch (const json::exception&) {
      out = {{"error", "the bridge got a request that is not JSON"}};
    } catch (const std::exception& e) {
      out = {{"error", e.what()}};
    }
    out["pid"] = ::getpid();
    return out.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  }

  /// Stops the server (shutdown, exit, then kill after a grace period).
  void stop() {
    std::lock_guard lock(mu_);
    session_.reset();
  }

 private:
  json dispatch(const json& req) {
    const std::string op = req.at("op");
    if (op == "sync") {
      std::shared_ptr<Session> s;
      {
        std::lock_guard lock(mu_);
        s = session_;
      }
      if (s && !s->dead())
        for (const auto& p : req.at("paths")) try {
            s->sync(p.get<std::string>());
          } catch (const Failure&) {
          }
      return json::object();
    }
    if (op != "request") return {{"error", "unknown bridge op " + op}};
    const std::string path = req.at("path"), method = req.at("method");
    auto s = session(clock::now() + start_time);
    // What a shell or an editor changed since the server started: opened (and built before the
    // request, so that its uses are in the answer), or, when too much changed for that, the
    // server started again to index it all anew.
    auto changed = s->sync_changed();
    if (!changed) s = session(clock::now() + start_time, true);
    s->sync_open();
    s->sync(path);
    json out = json::object();
    const auto ready_by = clock::now() + ready_time;
    bool ready = true;
    if (changed)
      for (const auto& p : *changed) ready = s->wait_ready(p, ready_by) && ready;
    if (req.value("ready", false)) ready = s->wait_ready(path, ready_by) && ready;
    if (!ready)
      out["note"] = "the language server is still indexing the project: results may be incomplete; call again later for complete ones";
    out["result"] = s->request(method, req.value("params", json::object()), clock::now() + answer_time);
    return out;
  }

  /// The running server, started (again) when there is none, it died or hung, its compile
  /// database changed, or `fresh` is asked.
  std::shared_ptr<Session> session(clock::time_point deadline, bool fresh = false) {
    std::lock_guard lock(mu_);
    std::error_code ec;
    const auto stamp = db_from_.empty() ? std::filesystem::file_time_type{} : std::filesystem::last_write_time(db_from_, ec);
    if (!fresh && session_ && !session_->dead() && stamp == db_stamp_) return session_;
    session_.reset();
    std::vector<std::string> argv{config_.server.name};
    bool indexes = false;
    for (const auto& a : config_.server.args) argv.push_back(a);
    const std::string state = config_.place.state();
    if (config_.server.builds) {  // clangd
      const CompileDb db = prepare_compile_db(config_.root, state + "/cdb");
      db_from_ = db.from;
      indexes = db.sources > 0;
      db_stamp_ = db_from_.empty() ? std::filesystem::file_time_type{} : std::filesystem::last_write_time(db_from_, ec);
      for (const char* a : {"--background-index", "--pch-storage=memory", "--log=error", "-j=2", "--header-insertion=never"})
        argv.emplace_back(a);
      argv.push_back("--compile-commands-dir=" + state + "/cdb");
    }
    std::vector<std::string> env;
    for (char** e = environ; *e; e++)
      if (std::string_view(*e).rfind("XDG_CACHE_HOME=", 0) != 0) env.emplace_back(*e);
    env.push_back("XDG_CACHE_HOME=" + state + "/cache");  // the server's caches stay in $TMPDIR too
    try {
      session_ = std::make_shared<Session>(config_.server, argv, env, config_.root, indexes, deadline);
    } catch (const Failure& f) {
      std::string why = f.what();
      constexpr std::string_view log = "$TMPDIR/lsp/<key>/bridge.log";
      if (const auto at = why.find(log); at != std::string::npos) why.replace(at, log.size(), state + "/bridge.log");
      throw Failure(why);
    }
    return session_;
  }

  const BridgeConfig& config_;
  std::mutex mu_;
  std::shared_ptr<Session> session_;
  std::string db_from_;
  std::filesystem::file_time_type db_stamp_{};
};

}  // namespace

void run_bridge(const BridgeConfig& config, int listener, int owner) {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, s);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);  // before any thread: they all inherit it
  ::signal(SIGPIPE, SIG_IGN);
  const int sigfd = ::signalfd(-1, &mask, SFD_CLOEXEC);

  struct stat own {};
  ::stat(config.place.sock().c_str(), &own);
  Bridge bridge(config);
  std::atomic<int> clients{0};
  std::atomic<long> last{static_cast<long>(std::chrono::duration_cast<seconds>(clock::now().time_since_epoch()).count())};
  const auto now_s = [] { return static_cast<long>(std::chrono::duration_cast<seconds>(clock::now().time_since_epoch()).count()); };

  for (;;) {
    pollfd p[3] = {{listener, POLLIN, 0}, {sigfd, POLLIN, 0}, {owner, POLLIN, 0}};
    const int n = ::poll(p, 3, 1000);
    if (n > 0 && ((p[1].revents & POLLIN) || (p[2].revents & POLLIN))) break;
    if (n > 0 && (p[0].revents & POLLIN)) {
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      last = now_s();
      timeval tv{10, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      if (clients >= max_clients) {
        write_all(fd, json({{"error", "the language server bridge is busy with other calls; try again"}}).dump() + "\n");
        ::close(fd);
        continue;
      }
      clients++;
      std::thread([&, fd] {
        if (auto line = read_line(fd, max_request)) write_all(fd, bridge.handle(*line));
        ::close(fd);
        last = now_s();
        clients--;
      }).detach();
      continue;
    }
    // Once a second: idle long enough, or the socket is no longer ours (the session's $TMPDIR
    // was removed, or a new bridge replaced this one) → exit.
    struct stat now {};
    const bool ours = ::stat(config.place.sock().c_str(), &now) == 0 && now.st_ino == own.st_ino && now.st_dev == own.st_dev;
    if (!ours) break;
    if (clients == 0 && now_s() - last >= config.idle) break;
  }
  struct stat now {};
  if (::stat(config.place.sock().c_str(), &now) == 0 && now.st_ino == own.st_ino) {
    ::unlink(config.place.sock().c_str());
    ::unlink(config.place.pid().c_str());
  }
  ::close(listener);
  if (clients == 0) bridge.stop();
  // With calls still running their threads hold the server; exiting closes its pipes, which ends it.
  ::_exit(0);
}

}  // namespace lsp
