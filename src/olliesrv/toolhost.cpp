// One session's toolsrv, seen from olliesrv (spec §6.1-§6.6, §8.3.4).
//
// Threads: every public function may be called from any thread; the State is guarded by one
// mutex never held across a co_await. The client, the child's watchers and the detached
// coroutines (start, pushes) run on the executor given to make(). toolsrv is forked from the
// thread that runs the start: olliesrv's pool threads live until it exits, which is what
// PR_SET_PDEATHSIG needs (the signal follows the forking thread).
//
// Nothing here blocks an I/O thread: the child is reaped through a pidfd watched by Asio;
// the only blocking wait is in ~Instance, reached only when the executor is torn down while a
// child still runs (it is SIGKILLed first, so the wait is short).
#include "olliesrv/toolhost.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <span>

#include "backend/config.hpp"
#include "lib9p/async_client.hpp"
#include "lib9p/dirs.hpp"
#include "lib9p/errors.hpp"
#include "lib9p/handoff.hpp"
#include "lib9p/utf8.hpp"
#include "olliesrv/ids.hpp"
#include "olliesrv/remote.hpp"
#include "olliesrv/result.hpp"
#include "olliesrv/session_files.hpp"

extern char** environ;

namespace ollie {

namespace {

using namespace std::chrono_literals;
constexpr auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);

/// How long a fresh toolsrv may take to accept its first connection.
constexpr auto start_limit = 20s;
/// How long a stopped toolsrv (SIGTERM) gets before SIGKILL.
constexpr auto term_grace = 5s;
/// Largest tools/info reply kept (toolsrv's own are far smaller).
constexpr std::size_t max_listing = 16u << 20;
/// Largest reply read from toolsrv: a proc/new reply carries the output toolsrv keeps (stdout
/// and stderr, 10 MiB + 64 KiB each at most), with room; a remote toolsrv is not trusted to.
constexpr std::size_t max_reply = 32u << 20;
/// Longest line of toolsrv's stderr kept (logged, and the reason of a failed start).
constexpr std::size_t max_err_line = 1024;
/// What a request to an instance that hung up answers, and one that finds none that can start,
/// before the reason (§6.1).
constexpr const char* lost_prefix = "tool server lost: ";
constexpr const char* unavailable_prefix = "tool server unavailable: ";

/// Tool names (§7.2.2) and agent ids: what may go into a header line or a ctl token unquoted.
bool valid_word(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

bool valid_secret(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

/// A ctl token (§1.3): always quoted, a quote doubled.
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "''";
    else q += c;
  }
  return q + "'";
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

std::string wait_text(const siginfo_t& si) {
  if (si.si_code == CLD_EXITED) return "exit status " + std::to_string(si.si_status);
  return "killed by signal " + std::to_string(si.si_status);
}

using remote::high_fd;

}  // namespace

// ---- one toolsrv process and its connection ---------------------------------------------------

/// A line of toolsrv's stderr as olliesrv logs it: toolsrv's own log lines
/// (`[time] [toolsrv] [level] text`) at their level without the second time stamp, anything
/// else (a crash, a loader error) as a warning.
std::pair<spdlog::level::level_enum, std::string_view> relayed(std::string_view line) {
  constexpr std::string_view tag = "] [toolsrv] [";
  const auto at = line.starts_with('[') ? line.find(tag) : std::string_view::npos;
  if (at == std::string_view::npos) return {spdlog::level::warn, line};
  const auto from = at + tag.size(), to = line.find("] ", from);
  if (to == std::string_view::npos) return {spdlog::level::warn, line};
  const auto level = spdlog::level::from_str(std::string(line.substr(from, to - from)));
  if (level == spdlog::level::off) return {spdlog::level::warn, line};
  auto text = line.substr(to + 2);
  if (text.starts_with("toolsrv: ")) text.remove_prefix(9);
  return {level, text};
}

struct Instance {
  std::uint64_t number = 0;  ///< 1, 2, … per ToolHost: which toolsrv a background pid belongs to
  pid_t pid = -1;
  int pidfd = -1;  ///< owned; valid until destruction, so a signal never reaches a reused pid
  std::string sock;
  std::shared_ptr<p9::AsyncClient> client;
  std::shared_ptr<p9::AsyncFid> root;  ///< only its const members are used, from any coroutine
  std::uint64_t synced = 0;  ///< the ToolHost's wish version its last sync sent
  std::string ollie_addr;    ///< a remote toolsrv's OLLIE_ADDR: its end of the reverse forward
  std::string cwd;           ///< the session cwd it was given (a remote one's as its bootstrap resolved it)
  std::string program = "toolsrv";  ///< what pid runs: toolsrv, or a remote one's ssh

  std::mutex mu;
  bool reaped = false, dead = false, err_eof = false;
  std::string exit_text, dead_why, last_err;

  ~Instance() {
    if (pidfd < 0) return;
    if (!reaped) {  // only when the executor went away with the child alive
      ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
      siginfo_t si{};
      ::waitid(static_cast<idtype_t>(P_PIDFD), pidfd, &si, WEXITED);
    }
    ::close(pidfd);
  }

  void signal(int sig) {
    std::lock_guard lk(mu);
    if (!reaped && pidfd >= 0) ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0);
  }

  /// Reaps the child if it has exited (never waits). True when it is gone.
  bool try_reap() {
    std::lock_guard lk(mu);
    if (reaped) return true;
    siginfo_t si{};
    if (::waitid(static_cast<idtype_t>(P_PIDFD), pidfd, &si, WEXITED | WNOHANG) != 0) {
      if (errno == ECHILD) reaped = true, exit_text = "gone";
      return reaped;
    }
    if (si.si_pid == 0) return false;
    reaped = true;
    exit_text = wait_text(si);
    return true;
  }

  bool usable() {
    std::lock_guard lk(mu);
    return !dead && !reaped;
  }

  /// Marks the instance lost (first reason wins), kills the process and hangs up.
  void lose(const std::string& why, int sig = SIGKILL) {
    std::shared_ptr<p9::AsyncClient> c;
    {
      std::lock_guard lk(mu);
      if (!dead) dead = true, dead_why = why;
      c = client;
    }
    signal(sig);
    if (c) c->close();
  }

  std::string reason(const std::string& fallback) {
    std::lock_guard lk(mu);
    if (reaped && !exit_text.empty()) return program + " " + exit_text;
    return fallback;
  }
};

// ---- the session's wishes and the current instance --------------------------------------------

using StartResult = p9::Result<std::shared_ptr<Instance>>;

struct ToolHost::State : std::enable_shared_from_this<State> {
  asio::any_io_executor ex;
  Config cfg;

  std::mutex mu;
  std::map<std::string, std::string> env;                   // session variables
  std::map<std::string, std::string> agent_cwd;             // agent → dir
  std::set<std::string> cwd_refused;                        // agents whose agentcwd a sync could not set
  std::map<std::string, std::set<std::string>> agent_tools;  // agent → wanted tools
  std::map<std::string, int> tool_timeout;                  // from the last listing
  std::map<std::string, std::pair<std::string, std::vector<ToolInfo>>> listed;  // agent → last tools reply, parsed
  std::vector<std::pair<std::string, std::string>> sandbox_ok;  // approved overrides
  std::uint64_t version = 0;                                // bumped by every wish change
  std::uint64_t stops = 0;                                  // bumped by stop()
  bool ended = false;                                       // ToolHost::stop(): no start ever again
  std::uint64_t launched = 0;                               // instances made (their numbers)
  std::shared_ptr<Instance> inst;
  std::shared_ptr<Instance> launching;  // a remote start's, until it is inst: stop() ends it too
  bool starting = false;
  std::vector<std::shared_ptr<p9::Handoff<StartResult>>> waiters;
  std::deque<std::pair<std::shared_ptr<Instance>, std::string>> pushes;
  bool pushing = false;
  std::vector<std::shared_ptr<p9::Handoff<bool>>> drained;  // needs waiting for the pushes
  std::function<void(std::uint64_t)> started;               // on_start()
  std::string forward_addr;                                 // a remote start's OLLIE_ADDR
  std::chrono::steady_clock::time_point last_need = std::chrono::steady_clock::now();
  int calls = 0;                                            // proc/new requests under way
  std::shared_ptr<asio::steady_timer> idle_wait;            // watch_idle's; stop() cancels it

  std::shared_ptr<Instance> current() {
    std::lock_guard lk(mu);
    return inst && inst->usable() ? inst : nullptr;
  }

  // ---- needs -----------------------------------------------------------------------------------

  /// The running instance, starting one (or joining the start in progress) when there is none.
  asio::awaitable<StartResult> need() {
    std::shared_ptr<p9::Handoff<StartResult>> h;
    {
      std::lock_guard lk(mu);
      if (ended) co_return p9::error("session killed");
      last_need = std::chrono::steady_clock::now();
    }
    for (;;) {  // a running instance; wishes pushed to it before are sent first (in order)
      std::shared_ptr<p9::Handoff<bool>> d;
      std::shared_ptr<Instance> i;
      {
        std::lock_guard lk(mu);
        if (!inst || !inst->usable()) break;
        i = inst;
        if (pushing) drained.push_back(d = std::make_shared<p9::Handoff<bool>>());
      }
      if (!d) co_return i;
      (void)co_await d->get();
    }
    bool first = false;
    {
      std::lock_guard lk(mu);
      h = std::make_shared<p9::Handoff<StartResult>>();
      waiters.push_back(h);
      if (!starting) first = starting = true;
    }
    // Not under mu: co_spawn may run the start inline, and the start takes mu.
    if (first) asio::co_spawn(ex, start(shared_from_this()), asio::detached);
    co_return co_await h->get();
  }

  /// An error of a request on inst: a lost connection marks it dead (the reason is returned in
  /// `lost`); anything else is toolsrv's answer.
  bool lost(const std::shared_ptr<Instance>& i, const std::string& ename, std::string& why) {
    // A toolsrv that stops by itself (SIGTERM, SIGINT, its idle timeout) answers what it is
    // asked meanwhile `server shutting down` until it hangs up.
    bool gone = starts_with(ename, p9::err::hung_up) || ename == p9::err::shutting_down;
    if (!gone) {
      std::lock_guard lk(i->mu);
      gone = i->dead;
    }
    if (!gone) return false;
    i->try_reap();
    bool was_dead;
    {
      std::lock_guard lk(i->mu);
      was_dead = i->dead;
      why = was_dead ? i->dead_why : ename;
    }
    why = i->reason(why);
    // Whoever lost it first chose how it ends: a stop's SIGTERM lets toolsrv kill its process
    // groups (§6.1), and the calls its closed connection fails must not make that a SIGKILL.
    if (!was_dead) i->lose(why);
    return true;
  }

  // ---- start -----------------------------------------------------------------------------------

  static asio::awaitable<void> start(std::shared_ptr<State> s) {
    std::uint64_t stops_before;
    {
      std::lock_guard lk(s->mu);
      stops_before = s->stops;
    }
    StartResult r = p9::error("start failed");
    try {
      r = co_await s->launch();
    } catch (const std::exception& x) {
      r = p9::error(std::string("start failed: ") + x.what());
    }
    std::vector<std::shared_ptr<p9::Handoff<StartResult>>> ws;
    std::function<void(std::uint64_t)> started;
    bool resync = false;
    {
      std::lock_guard lk(s->mu);
      if (r && s->stops != stops_before) {
        (*r)->lose("stopped", SIGTERM);
        r = p9::error("tool server stopped");
      }
      if (r) s->inst = *r, started = s->started;
      resync = r && s->version != (*r)->synced;
      if (!resync) {
        s->starting = false;
        ws.swap(s->waiters);
      }
    }
    // A change made after the last sync, before the instance was installed, was pushed nowhere.
    if (resync) {
      if (auto st = co_await s->sync_wishes(**r); !st) {
        (*r)->lose("sync failed");
        r = p9::error("sync: " + st.ename());  // never usable: unavailable (§6.1), as a start that failed
      }
      std::lock_guard lk(s->mu);
      s->starting = false;
      ws.swap(s->waiters);
    }
    if (!r) spdlog::warn("session {}: toolsrv: {}", s->cfg.session_id, r.ename());
    if (r) watch_exit(s, *r), watch_idle(s, *r, s->cfg.idle);
    if (started && r) started((*r)->number);
    for (auto& w : ws) w->set(r);
  }

  /// A call under way, for the idle watch; its end counts as a need.
  struct Calling {
    explicit Calling(State& s) : s(s) {
      std::lock_guard lk(s.mu);
      s.calls++;
    }
    ~Calling() {
      std::lock_guard lk(s.mu);
      s.calls--;
      s.last_need = std::chrono::steady_clock::now();
    }
    State& s;
  };

  /// Loses the instance as soon as its process ends (a SIGTERM or SIGINT from outside, a crash):
  /// the next need starts another instead of asking one that is gone. The wait ends with the
  /// process, which every stop ends.
  static void watch_exit(std::shared_ptr<State> s, std::shared_ptr<Instance> i) {
    const int fd = ::fcntl(i->pidfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return;
    auto d = std::make_shared<asio::posix::stream_descriptor>(s->ex, fd);
    when_ended(d, [weak = std::weak_ptr<Instance>(i)] { return weak.lock(); },
               [](const std::shared_ptr<Instance>& i, bool) { i->lose(i->reason("toolsrv exited")); });
  }

  /// Calls `ended(instance, reaped)` once the process behind `d` (a copy of its pidfd) has ended,
  /// for as long as `get` gives the instance. A wake-up whose process still runs waits again:
  /// epoll keeps the registration of a descriptor closed while a forked child (a toolsrv between
  /// its fork and its exec) still held it, and asio hands that registration's state to the next
  /// descriptor it watches, so its events can wake this wait (concurrent session/new had each
  /// new toolsrv killed this way now and then).
  static void when_ended(std::shared_ptr<asio::posix::stream_descriptor> d,
                         std::function<std::shared_ptr<Instance>()> get,
                         std::function<void(const std::shared_ptr<Instance>&, bool)> ended) {
    d->async_wait(asio::posix::descriptor_base::wait_read,
                  [d, get = std::move(get), ended = std::move(ended)](std::error_code ec) mutable {
                    auto i = get();
                    if (ec || !i) return;
                    const bool reaped = i->try_reap();
                    pollfd p{d->native_handle(), POLLIN, 0};
                    if (!reaped && ::poll(&p, 1, 0) != 1) return when_ended(std::move(d), std::move(get), std::move(ended));
                    ended(i, reaped);
                  });
  }

  /// Stops the instance once the session has not needed it for cfg.idle and holds no work there.
  static void watch_idle(std::shared_ptr<State> s, std::shared_ptr<Instance> i, std::chrono::steady_clock::duration wait) {
    if (s->cfg.idle.count() <= 0 || !s->cfg.busy) return;
    auto t = std::make_shared<asio::steady_timer>(s->ex, wait);
    {
      std::lock_guard lk(s->mu);
      s->idle_wait = t;  // a pending wait would hold olliesrv's shutdown
    }
    t->async_wait([s, weak = std::weak_ptr<Instance>(i), t](std::error_code ec) {
      auto i = weak.lock();
      if (ec || !i || s->current() != i) return;  // stopped, lost or replaced meanwhile
      std::chrono::steady_clock::time_point last;
      bool calling;  // a call under way: a `!` command of an idle agent
      {
        std::lock_guard lk(s->mu);
        last = s->last_need;
        calling = s->calls > 0;
      }
      const auto quiet = std::chrono::steady_clock::now() - last;
      if (quiet < s->cfg.idle) return watch_idle(s, i, s->cfg.idle - quiet);
      if (calling || s->cfg.busy()) return watch_idle(s, i, s->cfg.idle);
      spdlog::info("session {}: toolsrv stopped: not needed for {} ms", s->cfg.session_id, s->cfg.idle.count());
      s->stop();
    });
  }

  /// Kills toolsrv (SIGTERM, SIGKILL if it lingers); a later need starts a new one.
  void stop() {
    std::shared_ptr<Instance> i;
    std::shared_ptr<asio::steady_timer> idle;
    std::shared_ptr<Instance> starting_one;
    {
      std::lock_guard lk(mu);
      stops++;
      i = inst;
      starting_one = launching;
      idle = std::exchange(idle_wait, nullptr);
    }
    if (starting_one) starting_one->lose("stopped", SIGTERM);
    if (idle) asio::post(ex, [idle] { idle->cancel(); });  // a timer is touched on its executor
    if (!i || !i->usable()) return;
    i->lose("stopped", SIGTERM);
    // SIGTERM lets toolsrv kill its process groups and remove its socket; SIGKILL if it lingers.
    // Its exit ends the grace, so a server shutting down is not held for it.
    auto t = std::make_shared<asio::steady_timer>(ex, term_grace);
    t->async_wait([i, t](std::error_code ec) {
      if (!ec && !i->try_reap()) i->signal(SIGKILL);
    });
    if (int fd = ::fcntl(i->pidfd, F_DUPFD_CLOEXEC, 0); fd >= 0) {
      auto d = std::make_shared<asio::posix::stream_descriptor>(ex, fd);
      d->async_wait(asio::posix::descriptor_base::wait_read, [d, t](std::error_code ec) {
        if (!ec) t->cancel();
      });
    }
  }

  /// The session's toolsrv socket (§6.1): toolsrv's own, or a remote one's -L forward.
  static std::string sock_path(const std::string& session_id) {
    return p9::runtime_root() + "/toolsrv/" + session_id + ".sock";
  }

  /// Removes the sockets a toolsrv that will not start again leaves: a SIGKILLed toolsrv's, and
  /// the forward and control sockets of a remote one's ssh, which never removes them.
  static void forget_sockets(const Config& c) {
    ::unlink(sock_path(c.session_id).c_str());
    if (!c.remote.empty()) ::unlink(remote::control_path(c.session_id).c_str());
  }

  /// Kills a previous instance and waits (bounded) until it is reaped: its socket path is ours.
  asio::awaitable<void> bury(std::shared_ptr<Instance> old) {
    if (!old) co_return;
    old->lose("replaced");
    asio::steady_timer t(ex);
    for (auto end = std::chrono::steady_clock::now() + term_grace; !old->try_reap() && std::chrono::steady_clock::now() < end;) {
      t.expires_after(10ms);
      co_await t.async_wait(tuple_awaitable);
    }
  }

  /// olliesrv's environment minus the backend secrets (§6.1), plus OLLIE_SESSION_ID.
  std::vector<std::string> child_env() {
    // backends.conf is a small file read once per start.
    auto conf = backend::load_backends_conf(backend::backends_conf_path(p9::process_env()));
    if (!conf) spdlog::warn("session {}: backends.conf: {}", cfg.session_id, conf.error().message);
    auto drop = backend::secret_variables(conf ? *conf : backend::BackendsConf{});
    drop.insert("OLLIE_SESSION_ID");
    if (cfg.secret_vars)
      for (auto& v : cfg.secret_vars()) drop.insert(std::move(v));
    std::vector<std::string> out;
    for (char** e = environ; e && *e; e++) {
      std::string_view kv(*e);
      auto eq = kv.find('=');
      if (eq == std::string_view::npos) continue;
      if (drop.count(std::string(kv.substr(0, eq)))) continue;
      out.emplace_back(kv);
    }
    out.push_back("OLLIE_SESSION_ID=" + cfg.session_id);
    return out;
  }

  asio::awaitable<StartResult> launch() {
    std::shared_ptr<Instance> old;
    Config c;
    {
      std::lock_guard lk(mu);
      if (ended) co_return p9::error("session killed");
      old = std::move(inst);
      c = cfg;
    }
    co_await bury(std::move(old));

    // What must hold before anything is forked.
    if (!valid_word(c.session_id) || c.session_id.front() == '.')
      co_return p9::error("invalid session id: " + c.session_id.substr(0, 64));
    // A remote session's `~` is the tool host's HOME: its bootstrap expands it (§4.1, §6.11).
    if (c.cwd.empty() || (c.cwd.front() != '/' && (c.remote.empty() || c.cwd.front() != '~')))
      co_return p9::error("cwd must be absolute: " + c.cwd);
    struct stat st{};
    if (c.remote.empty() && (::stat(c.cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)))
      co_return p9::error("cwd: " + c.cwd + ": not a directory");
    if (c.remote.empty() && ::access(c.toolsrv.c_str(), X_OK) != 0) co_return p9::error(c.toolsrv + ": " + std::strerror(errno));
    if (auto d = p9::ensure_runtime_dir(p9::runtime_root() + "/toolsrv"); !d) co_return d.error();
    const std::string sock = sock_path(c.session_id);
    if (sock.size() >= 100) co_return p9::error(sock + ": socket path too long");

    auto i = std::make_shared<Instance>();
    {
      std::lock_guard lk(mu);
      i->number = ++launched;
    }
    i->sock = sock;
    const std::string secret = new_secret();
    if (c.remote.empty()) {
      if (auto st2 = spawn(i, c, secret); !st2) co_return st2.error();
    } else {
      auto target = remote_target(c, sock);
      i->program = "ssh";
      // A stop meanwhile (a kill, the session/new flushed) ends the bootstrap: its ssh at once.
      {
        std::lock_guard lk(mu);
        launching = i;
      }
      auto adopt = [i](pid_t pid, int pidfd) {
        bool stopped;
        {
          std::lock_guard lk(i->mu);
          i->pid = pid, i->pidfd = pidfd;
          stopped = i->dead;
        }
        if (stopped) i->signal(SIGTERM);
      };
      auto a = co_await remote::start(ex, std::move(target), secret, adopt);
      {
        std::lock_guard lk(mu);
        if (launching == i) launching.reset();
      }
      if (!a) {
        i->lose("bootstrap failed");
        forget_sockets(c);
        co_return a.error();
      }
      i->ollie_addr = a->addr;
      c.cwd = a->cwd;
      std::lock_guard lk(mu);
      forward_addr = i->ollie_addr;
      if (!cfg.cwd.empty() && cfg.cwd.front() == '~') cfg.cwd = c.cwd;
    }
    watch(i);

    // Dial until it listens; fail fast once it has exited.
    std::shared_ptr<p9::AsyncClient> client;
    std::string last = "not listening";
    asio::steady_timer t(ex);
    const auto end = std::chrono::steady_clock::now() + start_limit;
    for (;;) {
      if (i->try_reap()) {
        for (int n = 0; n < 100; n++) {  // its last words come through the stderr pipe
          {
            std::lock_guard lk(i->mu);
            if (i->err_eof) break;
          }
          t.expires_after(10ms);
          co_await t.async_wait(tuple_awaitable);
        }
        std::lock_guard lk(i->mu);
        co_return p9::error(i->program + " " + i->exit_text + (i->last_err.empty() ? "" : ": " + i->last_err));
      }
      auto d = co_await p9::AsyncClient::dial(ex, "unix!" + sock);
      if (d) {
        client = *d;
        break;
      }
      last = d.ename();
      if (std::chrono::steady_clock::now() > end) {
        i->lose("start timed out");
        co_return p9::error("toolsrv did not listen: " + last);
      }
      t.expires_after(10ms);
      co_await t.async_wait(tuple_awaitable);
    }
    {
      std::lock_guard lk(i->mu);
      i->client = client;
    }
    auto root = co_await client->attach_with_secret("olliesrv", secret);
    if (!root) {
      i->lose("attach failed");
      co_return p9::error("attach: " + root.ename());
    }
    i->root = std::make_shared<p9::AsyncFid>(std::move(*root));

    i->cwd = c.cwd;
    if (auto st = co_await sync_all(*i); !st) {
      i->lose("sync failed");
      co_return st.error();
    }
    spdlog::info("session {}: toolsrv {} started", c.session_id, i->pid);
    co_return i;
  }

  /// What a start sends (§6.1): the session cwd, then what the session wants, again if it changed
  /// meanwhile. Also session `invalidate`'s re-sync, which resolves the cwds again.
  asio::awaitable<p9::Status> sync_all(Instance& i) {
    if (auto st = co_await ctl(i, "cwd " + quote(i.cwd)); !st) co_return st;
    co_return co_await sync_wishes(i);
  }

  /// Sends everything the session wants to a new instance, again if it changed meanwhile (at
  /// most 5 times); i.synced tells which version it sent.
  asio::awaitable<p9::Status> sync_wishes(Instance& i) {
    for (int round = 0;; round++) {
      std::uint64_t v;
      std::map<std::string, std::string> e, ac;
      std::map<std::string, std::set<std::string>> at;
      std::string ok;
      {
        std::lock_guard lk(mu);
        v = version;
        e = env;
        if (!i.ollie_addr.empty()) e["OLLIE_ADDR"] = i.ollie_addr;
        ac = agent_cwd;
        at = agent_tools;
        ok = sandbox_ok_line();
      }
      if (auto st3 = co_await sync(i, e, ok, ac, at); !st3) co_return st3;
      std::lock_guard lk(mu);
      i.synced = v;
      if (version == v || round >= 4) co_return p9::Status{};
    }
  }

  /// How a remote session's toolsrv is started (§6.11): ssh gets the environment a local
  /// toolsrv would; the static programs are in bin/static beside toolsrv.
  remote::Target remote_target(const Config& c, const std::string& sock) {
    remote::Target t;
    t.destination = c.remote;
    t.session_id = c.session_id;
    t.cwd = c.cwd;
    t.local_sock = sock;
    t.config_root = c.config_root.empty() ? p9::config_root() : c.config_root;
    t.static_dir = c.toolsrv.substr(0, c.toolsrv.rfind('/') + 1) + "static";
    t.env = child_env();
    t.listen = c.listen_forward;
    return t;
  }

  /// Forks and execs toolsrv with the secret on descriptor 3.
  p9::Status spawn(const std::shared_ptr<Instance>& ip, const Config& c, const std::string& secret) {
    Instance& i = *ip;
    // Everything the child needs is made before the fork: after it, only async-signal-safe calls.
    std::vector<std::string> args{c.toolsrv, "-a", "unix!" + i.sock, "-cwd", c.cwd};
    if (!c.config_root.empty()) args.insert(args.end(), {"-config", c.config_root});
    std::vector<std::string> envs = child_env();
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);

    int sp[2], ep[2];
    if (::pipe2(sp, O_CLOEXEC) != 0) return p9::error(std::string("pipe: ") + std::strerror(errno));
    if (::pipe2(ep, O_CLOEXEC) != 0) {
      ::close(sp[0]), ::close(sp[1]);
      return p9::error(std::string("pipe: ") + std::strerror(errno));
    }
    int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    const int s_r = high_fd(sp[0]), e_w = high_fd(ep[1]), nul = high_fd(devnull);
    const int s_w = sp[1], e_r = ep[0];
    const auto close_all = [&] {
      for (int fd : {s_r, s_w, e_r, e_w, nul})
        if (fd >= 0) ::close(fd);
    };
    if (s_r < 0 || e_w < 0 || nul < 0) {
      close_all();
      return p9::error("cannot make descriptors for toolsrv");
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      close_all();
      return p9::error(std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(1);
      ::setpgid(0, 0);  // a terminal's ^C goes to olliesrv, which stops toolsrv itself
      sigset_t none;
      ::sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      struct sigaction dfl{};
      dfl.sa_handler = SIG_DFL;
      for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
      if (::dup2(nul, 0) < 0 || ::dup2(nul, 1) < 0 || ::dup2(e_w, 2) < 0 || ::dup2(s_r, 3) < 0) ::_exit(126);
      ::close_range(4, ~0U, 0);
      ::execve(argv[0], argv.data(), envp.data());
      static const char msg[] = "exec failed\n";
      (void)!::write(2, msg, sizeof msg - 1);
      ::_exit(127);
    }
    ::close(s_r);
    ::close(e_w);
    ::close(nul);
    i.pid = pid;
    i.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));  // sys/pidfd.h of glibc 2.36 lacks extern "C"
    // 65 bytes into an empty pipe never block; EOF follows at once.
    const std::string line = secret + "\n";
    const bool sent = ::write(s_w, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    ::close(s_w);
    if (i.pidfd < 0) {
      const std::string why = std::strerror(errno);
      ::kill(pid, SIGKILL);
      // No pidfd (kernel < 5.3): the SIGKILLed child is reaped at once.
      ::waitpid(pid, nullptr, 0);
      i.reaped = true;
      ::close(e_r);
      return p9::error("pidfd_open: " + why);
    }
    read_stderr(ip, e_r);
    if (!sent) return p9::error("cannot hand the secret to toolsrv");
    return {};
  }

  /// Reaps the child as soon as it exits and hangs up its connection.
  void watch(const std::shared_ptr<Instance>& i) {
    int fd = ::fcntl(i->pidfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return;  // it is still reaped when the connection drops (try_reap)
    auto d = std::make_shared<asio::posix::stream_descriptor>(ex, fd);
    std::weak_ptr<State> ws = weak_from_this();
    when_ended(d, [i] { return i; }, [ws](const std::shared_ptr<Instance>& i, bool reaped) {
      std::string why = i->reason("toolsrv exited");
      i->lose(why);
      auto s = ws.lock();
      if (!s) return;
      spdlog::info("session {}: toolsrv {} {}", s->cfg.session_id, i->pid, why);
      // Gone and reaped, it is not kept for the next start to bury: its pidfd closes now, not
      // one held per session that ever ran a toolsrv.
      std::shared_ptr<Instance> gone;
      std::lock_guard lk(s->mu);
      if (reaped && s->inst == i) gone = std::exchange(s->inst, nullptr);
    });
  }

  /// Logs toolsrv's stderr line by line and keeps the last line (a failed start's reason).
  void read_stderr(const std::shared_ptr<Instance>& i, int fd) {
    auto d = std::make_shared<asio::posix::stream_descriptor>(ex, fd);
    asio::co_spawn(ex, pump_stderr(d, cfg.session_id, i), asio::detached);
  }

  static asio::awaitable<void> pump_stderr(std::shared_ptr<asio::posix::stream_descriptor> d, std::string sid,
                                           std::weak_ptr<Instance> wi) {
    std::string buf(4096, '\0'), line;
    bool too_long = false;
    for (;;) {
      auto [ec, n] = co_await d->async_read_some(asio::buffer(buf), tuple_awaitable);
      if (ec) break;
      for (std::size_t k = 0; k < n; k++) {
        char ch = buf[k];
        if (ch != '\n') {
          if (line.size() < max_err_line) line += ch;
          else too_long = true;
          continue;
        }
        std::string shown = p9::valid_utf8(line);
        const auto [level, text] = relayed(shown);
        spdlog::log(level, "toolsrv {}: {}{}", sid, text, too_long ? " […]" : "");
        if (auto i = wi.lock()) {
          std::lock_guard lk(i->mu);
          i->last_err = shown;
        }
        line.clear();
        too_long = false;
      }
    }
    if (auto i = wi.lock()) {
      std::lock_guard lk(i->mu);
      if (!line.empty()) i->last_err = p9::valid_utf8(line);
      i->err_eof = true;
    }
  }

  // ---- requests ----------------------------------------------------------------------------------

  /// One ctl command (a Write file: its error comes with the clunk).
  static asio::awaitable<p9::Status> ctl(Instance& i, std::string line) {
    auto f = co_await i.root->walk("ctl");
    if (!f) co_return f.error();
    if (auto st = co_await f->open(p9::OWRITE); !st) co_return st;
    if (auto w = co_await f->write(line + "\n"); !w) co_return w.error();
    co_return co_await f->clunk();
  }

  /// env, sandboxok, agentcwd and every agent's tools, in the order of §6.1; a tool that no longer
  /// loads is dropped (logged).
  asio::awaitable<p9::Status> sync(Instance& i, const std::map<std::string, std::string>& e, const std::string& ok,
                                   const std::map<std::string, std::string>& ac,
                                   const std::map<std::string, std::set<std::string>>& at) {
    for (const auto& [k, v] : e) {
      auto st = co_await ctl(i, "env " + k + "=" + v);
      if (!st) {
        if (starts_with(st.ename(), p9::err::hung_up)) co_return st;
        spdlog::warn("session {}: env {}: {}", cfg.session_id, k, st.ename());
      }
    }
    if (auto st = co_await ctl(i, ok); !st) {
      if (starts_with(st.ename(), p9::err::hung_up)) co_return st;
      spdlog::warn("session {}: sandboxok: {}", cfg.session_id, st.ename());
    }
    for (const auto& [a, d] : ac) {
      auto st = co_await ctl(i, "agentcwd " + a + " " + quote(d));
      if (!st && starts_with(st.ename(), p9::err::hung_up)) co_return st;
      if (!st) spdlog::warn("session {}: agent {}: agentcwd {}: {}", cfg.session_id, a, d, st.ename());
      // Refused (its directory gone), the agent would run in the session's cwd, wider than its
      // own: its calls are refused until the agentcwd is taken (cwd_taken).
      std::lock_guard lk(mu);
      if (st) cwd_refused.erase(a);
      else cwd_refused.insert(a);
    }
    for (const auto& [a, ts] : at) {
      std::set<std::string> left = ts;
      while (!left.empty()) {
        std::string line = "load " + a;
        for (const auto& t : left) line += " " + t;
        auto st = co_await ctl(i, line);
        if (st) break;
        if (starts_with(st.ename(), p9::err::hung_up)) co_return st;
        // The error names the tool (`unknown tool: t`, `invalid tool: t: …`): drop it, load the rest.
        std::string bad;
        for (const auto& t : left) {
          const auto at_name = st.ename().find(": " + t);
          if (at_name != std::string::npos) {
            const auto after = at_name + 2 + t.size();
            if (after == st.ename().size() || st.ename()[after] == ':') {
              bad = t;
              break;
            }
          }
        }
        if (bad.empty()) bad = *left.begin();
        spdlog::warn("session {}: agent {}: tool {} dropped: {}", cfg.session_id, a, bad, st.ename());
        left.erase(bad);
        {
          std::lock_guard lk(mu);
          if (auto it = agent_tools.find(a); it != agent_tools.end()) it->second.erase(bad);
        }
        if (cfg.dropped) cfg.dropped(a, bad, st.ename());
      }
    }
    co_return p9::Status{};
  }

  /// Sends a ctl line to the running instance, in order with the others (never starts one).
  void push(std::string line) {
    bool first = false;
    {
      std::lock_guard lk(mu);
      if (!inst || !inst->usable()) return;  // the next start syncs it
      pushes.emplace_back(inst, std::move(line));
      if (!pushing) first = pushing = true;
    }
    // Not under mu: co_spawn may run the drain inline, and the drain takes mu.
    if (first) asio::co_spawn(ex, drain(shared_from_this()), asio::detached);
  }

  static asio::awaitable<void> drain(std::shared_ptr<State> s) {
    for (;;) {
      std::pair<std::shared_ptr<Instance>, std::string> p;
      {
        std::lock_guard lk(s->mu);
        if (s->pushes.empty()) {
          s->pushing = false;
          for (auto& d : s->drained) d->set(true);
          s->drained.clear();
          co_return;
        }
        p = std::move(s->pushes.front());
        s->pushes.pop_front();
      }
      if (!p.first->usable()) continue;
      auto st = co_await ctl(*p.first, p.second);
      if (!st) {
        std::string why;
        if (!s->lost(p.first, st.ename(), why))
          spdlog::warn("session {}: ctl {}: {}", s->cfg.session_id, p.second.substr(0, p.second.find(' ')), st.ename());
      }
    }
  }

  /// A need that sends one ctl command; its errors read `tool server unavailable: …` when no
  /// toolsrv could start, `tool server lost: …` when the connection failed (§6.1).
  asio::awaitable<p9::Status> need_ctl(std::string line) {
    auto i = co_await need();
    if (!i) co_return p9::error(unavailable_prefix + i.ename());
    co_return co_await ctl_on(*i, std::move(line));
  }

  /// One ctl command to `i`; a hang-up is `tool server lost: <reason>` (and `i` is lost).
  asio::awaitable<p9::Status> ctl_on(const std::shared_ptr<Instance>& i, std::string line) {
    auto st = co_await ctl(*i, std::move(line));
    std::string why;
    if (!st && lost(i, st.ename(), why)) co_return p9::error(lost_prefix + why);
    co_return st;
  }

  /// Before a call of an agent whose agentcwd a sync could not set: sent again, so the call runs
  /// in the agent's cwd or not at all (its error, e.g. `cwd: <dir>: not a directory`).
  asio::awaitable<p9::Status> cwd_taken(const std::shared_ptr<Instance>& i, const std::string& agent) {
    std::string dir;
    {
      std::lock_guard lk(mu);
      if (!cwd_refused.contains(agent)) co_return p9::Status{};
      auto it = agent_cwd.find(agent);
      if (it == agent_cwd.end()) {
        cwd_refused.erase(agent);
        co_return p9::Status{};
      }
      dir = it->second;
    }
    auto st = co_await ctl_on(i, "agentcwd " + agent + " " + quote(dir));
    if (!st) co_return st;
    std::lock_guard lk(mu);
    cwd_refused.erase(agent);
    co_return st;
  }

  /// One Rdwr exchange with `i`; a lost connection is `tool server lost: <reason>`. toolsrv
  /// answers none of its Rdwr files with nothing: an empty reply is its server ending the read
  /// as it stops, a loss like the hang-up that follows.
  asio::awaitable<p9::Result<std::string>> exchange(const std::shared_ptr<Instance>& i, std::string path, std::string request) {
    auto r = co_await i->root->call(std::move(path), std::move(request), max_reply);
    if (r && !r->empty()) co_return r;
    std::string why;
    if (lost(i, r ? std::string(p9::err::shutting_down) : r.ename(), why)) co_return p9::error(lost_prefix + why);
    co_return r.error();
  }

  /// One Rdwr exchange as a need.
  asio::awaitable<p9::Result<std::string>> need_rdwr(std::string path, std::string request) {
    auto i = co_await need();
    if (!i) co_return p9::error(unavailable_prefix + i.ename());
    auto r = co_await exchange(*i, std::move(path), std::move(request));
    if (r && r->size() > max_listing) co_return p9::error("reply too large");
    co_return r;
  }

  void changed() { version++; }

  std::string sandbox_ok_line() const {
    std::string line = "sandboxok";
    for (const auto& [hash, dir] : sandbox_ok) line += " " + quote(hash) + " " + quote(dir);
    return line;
  }
};

// ---- listings -----------------------------------------------------------------------------------

namespace {

p9::Result<std::vector<ToolInfo>> parse_tools(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array()) return p9::error("bad tools reply: not a JSON array");
  std::vector<ToolInfo> out;
  const auto str = [](const nlohmann::json& o, const char* k, std::string& into) {
    auto it = o.find(k);
    if (it == o.end() || it->is_null()) return true;
    if (!it->is_string()) return false;
    into = it->get<std::string>();
    return true;
  };
  for (const auto& e : j) {
    if (!e.is_object()) return p9::error("bad tools reply: an entry is not an object");
    ToolInfo t;
    if (!e.contains("name") || !str(e, "name", t.name) || t.name.empty()) return p9::error("bad tools reply: entry without a name");
    if (!str(e, "description", t.description) || !str(e, "prompt", t.prompt) || !str(e, "scope", t.scope) ||
        !str(e, "tier", t.tier) || !str(e, "outputFormat", t.output_format) || !str(e, "error", t.error))
      return p9::error("bad tools reply: " + t.name + ": a field is not a string");
    if (auto p = e.find("parameters"); p != e.end() && !p->is_null()) {
      if (!p->is_object()) return p9::error("bad tools reply: " + t.name + ": parameters is not an object");
      t.parameters = p->dump();
    }
    if (auto to = e.find("timeout"); to != e.end() && !to->is_null()) {
      if (!to->is_number_integer() || to->get<long long>() < 0 || to->get<long long>() > 1'000'000'000)
        return p9::error("bad tools reply: " + t.name + ": bad timeout");
      t.timeout = static_cast<int>(to->get<long long>());
    }
    out.push_back(std::move(t));
  }
  std::sort(out.begin(), out.end(), [](const ToolInfo& a, const ToolInfo& b) { return a.name < b.name; });
  return out;
}

/// An `info` reply of one line per path, in request order, `path<TAB>rest` (`stat`, `resolve`,
/// §6.4): each line's rest. Anything else is `<what>`.
p9::Result<std::vector<std::string>> path_lines(const std::string& r, std::span<const std::string> paths, const char* what) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (const auto& p : paths) {
    const auto nl = r.find('\n', pos + p.size());
    if (r.compare(pos, p.size(), p) != 0 || nl == std::string::npos || r[pos + p.size()] != '\t') return p9::error(what);
    out.push_back(r.substr(pos + p.size() + 1, nl - pos - p.size() - 1));
    pos = nl + 1;
  }
  return out;
}

}  // namespace

// ---- ToolHost -------------------------------------------------------------------------------------

std::shared_ptr<ToolHost> ToolHost::make(asio::any_io_executor ex, Config cfg) {
  auto s = std::make_shared<State>();
  s->ex = std::move(ex);
  s->cfg = std::move(cfg);
  return std::shared_ptr<ToolHost>(new ToolHost(std::move(s)));
}

ToolHost::~ToolHost() { stop(); }

void ToolHost::set_env(const std::string& key, const std::string& value) {
  if (!valid_env_name(key) || value.find('\n') != std::string::npos || value.size() > 65536) {
    spdlog::warn("session {}: env {}: invalid variable, not sent", s_->cfg.session_id, key.substr(0, 64));
    return;
  }
  {
    std::lock_guard lk(s_->mu);
    if (value.empty()) s_->env.erase(key);
    else s_->env[key] = value;
    s_->changed();
  }
  s_->push("env " + key + "=" + value);
}

void ToolHost::set_agent_cwd(const std::string& agent, const std::string& dir) {
  if (!valid_word(agent) || dir.find('\n') != std::string::npos) {
    spdlog::warn("session {}: agentcwd: invalid agent or directory, not sent", s_->cfg.session_id);
    return;
  }
  {
    std::lock_guard lk(s_->mu);
    if (dir.empty()) s_->agent_cwd.erase(agent);
    else s_->agent_cwd[agent] = dir;
    s_->cwd_refused.erase(agent);
    s_->changed();
  }
  s_->push("agentcwd " + agent + " " + (dir.empty() ? std::string("-") : quote(dir)));
}

void ToolHost::want_tools(const std::string& agent, std::vector<std::string> tools) {
  if (!valid_word(agent)) return;
  std::set<std::string> t;
  for (auto& n : tools)
    if (valid_word(n)) t.insert(std::move(n));
  {
    std::lock_guard lk(s_->mu);
    if (t.empty()) s_->agent_tools.erase(agent);
    else s_->agent_tools[agent] = t;
    s_->changed();
  }
  // A toolsrv that runs already (one a later need started, after this tool's load found the one
  // before it lost) gets them now; a load line is all or nothing, so one line per tool.
  for (const auto& n : t) s_->push("load " + agent + " " + n);
}

void ToolHost::on_start(std::function<void(std::uint64_t)> f) {
  std::shared_ptr<Instance> i;
  {
    std::lock_guard lk(s_->mu);
    s_->started = f;
    if (s_->inst && s_->inst->usable()) i = s_->inst;
  }
  if (i && f) f(i->number);
}

void ToolHost::set_sandbox_ok(std::vector<std::pair<std::string, std::string>> pairs) {
  std::string line;
  {
    std::lock_guard lk(s_->mu);
    s_->sandbox_ok.clear();
    for (auto& [hash, dir] : pairs) {
      if (hash.find('\n') != std::string::npos || dir.find('\n') != std::string::npos) continue;
      s_->sandbox_ok.emplace_back(std::move(hash), std::move(dir));
    }
    s_->changed();
    line = s_->sandbox_ok_line();
  }
  s_->push(line);
}

asio::awaitable<p9::Status> ToolHost::ensure() {
  auto s = s_;
  auto i = co_await s->need();
  if (!i) co_return i.error();
  co_return p9::Status{};
}

asio::awaitable<p9::Status> ToolHost::set_cwd(std::string dir) {
  auto s = s_;
  if (dir.find('\n') != std::string::npos) co_return p9::error("cwd: invalid directory");
  auto st = co_await s->need_ctl("cwd " + quote(dir));
  if (st) {
    std::lock_guard lk(s->mu);
    s->cfg.cwd = dir;
    s->changed();
  }
  co_return st;
}

asio::awaitable<p9::Status> ToolHost::resync() {
  auto s = s_;
  auto i = co_await s->need();
  if (!i) co_return p9::error(unavailable_prefix + i.ename());
  auto st = co_await s->sync_all(**i);
  std::string why;
  if (!st && s->lost(*i, st.ename(), why)) co_return p9::error(lost_prefix + why);  // a hang-up, as ctl_on says it
  co_return st;
}

asio::awaitable<p9::Status> ToolHost::check_agent_cwd(std::string agent, std::string dir) {
  auto s = s_;
  if (!valid_word(agent)) co_return p9::error("no such agent: " + agent.substr(0, 64));
  if (dir.find('\n') != std::string::npos) co_return p9::error("cwd: invalid directory");
  auto st = co_await s->need_ctl("agentcwd " + agent + " " + quote(dir));
  if (st) {
    std::lock_guard lk(s->mu);
    s->agent_cwd[agent] = dir;
    s->cwd_refused.erase(agent);
    s->changed();
  }
  co_return st;
}

asio::awaitable<p9::Status> ToolHost::load(std::string agent, std::vector<std::string> tools) {
  auto s = s_;
  if (!valid_word(agent)) co_return p9::error("no such agent: " + agent.substr(0, 64));
  if (tools.empty()) co_return p9::Status{};
  std::string line = "load " + agent;
  for (const auto& t : tools) {
    if (!valid_word(t)) co_return p9::error("unknown tool: " + t.substr(0, 64));
    line += " " + t;
  }
  auto i = co_await s->need();
  if (!i) co_return p9::error(unavailable_prefix + i.ename());
  auto st = co_await s->ctl_on(*i, line);
  if (st) {  // toolsrv took them: every later start loads them too
    std::lock_guard lk(s->mu);
    s->agent_tools[agent].insert(tools.begin(), tools.end());
    s->changed();
  }
  co_return st;
}

bool ToolHost::unreachable(const std::string& ename) {
  return starts_with(ename, unavailable_prefix) || starts_with(ename, lost_prefix);
}

asio::awaitable<p9::Status> ToolHost::unload(std::string agent, std::vector<std::string> tools) {
  auto s = s_;
  if (!valid_word(agent)) co_return p9::error("no such agent: " + agent.substr(0, 64));
  std::string line = "unload " + agent;
  std::vector<std::string> ok;
  for (const auto& t : tools)
    if (valid_word(t)) line += " " + t, ok.push_back(t);
  if (ok.empty()) co_return p9::Status{};
  auto st = co_await s->need_ctl(line);
  // Gone from the wishes whatever toolsrv answered: one that could not start, or was lost, gets
  // them at its next start (§6.1), so a profile switch meanwhile never brings the old tools back.
  {
    std::lock_guard lk(s->mu);
    if (auto it = s->agent_tools.find(agent); it != s->agent_tools.end()) {
      for (const auto& t : ok) it->second.erase(t);
      if (it->second.empty()) s->agent_tools.erase(it);
    }
    s->changed();
  }
  co_return st;
}

asio::awaitable<void> ToolHost::forget(std::string agent) {
  auto s = s_;
  if (!valid_word(agent)) co_return;
  {
    std::lock_guard lk(s->mu);
    s->agent_tools.erase(agent);
    s->agent_cwd.erase(agent);
    s->cwd_refused.erase(agent);
    s->listed.erase(agent);
    s->changed();
  }
  s->push("forget " + agent);
  co_return;
}

asio::awaitable<p9::Result<std::vector<ToolInfo>>> ToolHost::tools(std::string agent) {
  auto s = s_;
  if (!valid_word(agent)) co_return p9::error("no such agent: " + agent.substr(0, 64));
  auto r = co_await s->need_rdwr("tools", agent);
  if (!r) co_return r.error();
  {  // read before every LLM request (§8.1.3) and nearly always the same: parsed once per text
    std::lock_guard lk(s->mu);
    if (auto it = s->listed.find(agent); it != s->listed.end() && it->second.first == *r) co_return it->second.second;
  }
  auto t = parse_tools(*r);
  if (t) {
    std::lock_guard lk(s->mu);
    for (const auto& e : *t) s->tool_timeout[e.name] = e.timeout;
    s->listed[agent] = {std::move(*r), *t};
  }
  co_return t;
}

std::uint64_t ToolHost::wishes() const {
  std::lock_guard lk(s_->mu);
  return s_->version;
}

asio::awaitable<p9::Result<std::vector<ToolInfo>>> ToolHost::catalog() {
  auto s = s_;
  auto r = co_await s->need_rdwr("tools", "*");
  if (!r) co_return r.error();
  co_return parse_tools(*r);
}

asio::awaitable<p9::Result<std::map<std::string, std::string>>> ToolHost::info(std::string agent) {
  auto s = s_;
  if (!agent.empty() && !valid_word(agent)) co_return p9::error("no such agent: " + agent.substr(0, 64));
  auto r = co_await s->need_rdwr("info", agent);
  if (!r) co_return r.error();
  std::map<std::string, std::string> kv;
  std::size_t at = 0;
  while (at < r->size()) {
    auto nl = r->find('\n', at);
    if (nl == std::string::npos) nl = r->size();
    std::string line = r->substr(at, nl - at);
    at = nl + 1;
    auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  co_return kv;
}

asio::awaitable<p9::Result<std::vector<FileStamp>>> ToolHost::stat(std::string agent, std::vector<std::string> paths) {
  auto s = s_;
  if (!valid_word(agent)) co_return p9::error("no such agent: " + agent.substr(0, 64));
  std::vector<FileStamp> out;
  std::size_t at = 0;
  while (at < paths.size()) {
    // As many paths per request as keep it well inside one 9P message.
    std::string req = "stat " + agent;
    const std::size_t first = at;
    while (at < paths.size() && (at == first || req.size() + paths[at].size() < 16384)) req += " " + quote(paths[at++]);
    auto r = co_await s->need_rdwr("info", req);
    if (!r) co_return r.error();
    // Each line's rest: `exists<TAB>mtime_ns<TAB>size`.
    auto lines = path_lines(*r, std::span<const std::string>(paths).subspan(first, at - first), "bad stat reply");
    if (!lines) co_return lines.error();
    for (const auto& line : *lines) {
      const auto t1 = line.find('\t'), t2 = line.find('\t', t1 == std::string::npos ? t1 : t1 + 1);
      if (t1 == std::string::npos || t2 == std::string::npos) co_return p9::error("bad stat reply");
      out.push_back({line.substr(0, t1) == "true", line.substr(t1 + 1, t2 - t1 - 1), line.substr(t2 + 1)});
    }
  }
  co_return out;
}

asio::awaitable<p9::Result<std::vector<std::string>>> ToolHost::resolve(std::string agent, std::vector<std::string> paths) {
  auto s = s_;
  if (!valid_word(agent)) co_return p9::error("no such agent: " + agent.substr(0, 64));
  if (paths.empty()) co_return std::vector<std::string>{};
  std::string req = "resolve " + agent;
  for (const auto& p : paths) req += " " + quote(p);
  auto r = co_await s->need_rdwr("info", req);
  if (!r) co_return r.error();
  auto lines = path_lines(*r, paths, "bad resolve reply");  // each `real` or `-`
  if (!lines) co_return lines.error();
  for (auto& real : *lines)
    if (real == "-") real.clear();
  co_return std::move(lines);
}

asio::awaitable<ToolOutcome> ToolHost::call(ToolCallRequest req, For whom) {
  auto s = s_;
  if (!valid_word(req.tool)) co_return ToolOutcome{"error: unknown tool: " + p9::valid_utf8(req.tool.substr(0, 64)), true};
  if (!valid_word(req.agent)) co_return ToolOutcome{"error: no such agent: " + p9::valid_utf8(req.agent.substr(0, 64)), true};
  if (!req.auth.empty() && !valid_secret(req.auth)) co_return ToolOutcome{"error: invalid auth", true};
  if (req.timeout && *req.timeout < 0) co_return ToolOutcome{"error: invalid timeout: " + std::to_string(*req.timeout), true};

  State::Calling calling(*s);
  auto i = co_await s->need();
  if (!i) co_return ToolOutcome{"error: " + (unavailable_prefix + i.ename()), true};
  if (auto st = co_await s->cwd_taken(*i, req.agent); !st) co_return ToolOutcome{"error: " + p9::valid_utf8(st.ename()), true};

  int timeout = 30;
  if (req.timeout) {
    timeout = *req.timeout;
  } else {
    std::lock_guard lk(s->mu);
    if (auto it = s->tool_timeout.find(req.tool); it != s->tool_timeout.end()) timeout = it->second;
  }
  std::string request = "tool=" + req.tool + "\nagent=" + req.agent + "\n";
  if (req.timeout) request += "timeout=" + std::to_string(*req.timeout) + "\n";
  if (req.bypass) request += "bypass=true\n";
  if (!req.auth.empty()) request += "auth=" + req.auth + "\n";
  request += "\n" + (req.args.empty() ? std::string("{}") : req.args);

  // Cancellation of this coroutine flushes the request (toolsrv kills the process group) and
  // throws operation_aborted out of the co_await.
  auto r = co_await s->exchange(*i, "proc/new", std::move(request));
  if (!r) co_return ToolOutcome{"error: " + p9::valid_utf8(r.ename()), true};
  auto p = parse_proc_reply(*r);
  if (!p) co_return ToolOutcome{"error: " + p.ename(), true};
  p->out = redacted(std::move(p->out), req.auth);
  p->err = redacted(std::move(p->err), req.auth);
  auto c = whom == For::model ? convert_reply(*p, timeout) : Converted{exec_text(*p, timeout), false};
  ToolOutcome out{std::move(c.text), c.error};
  if (auto o = p->header.find("override"); o != p->header.end() && o->second.ends_with(" ignored"))
    out.override_ignored = o->second.substr(0, o->second.find(' '));
  if (auto sb = p->header.find("sandbox"); sb != p->header.end()) out.unconfined = sb->second == "none";
  co_return out;
}

asio::awaitable<p9::Result<ToolHost::Background>> ToolHost::start_background(ToolCallRequest req) {
  auto s = s_;
  if (!valid_word(req.tool)) co_return p9::error("unknown tool: " + p9::valid_utf8(req.tool.substr(0, 64)));
  if (!valid_word(req.agent)) co_return p9::error("no such agent: " + p9::valid_utf8(req.agent.substr(0, 64)));
  if (!req.auth.empty() && !valid_secret(req.auth)) co_return p9::error("invalid auth");
  auto i = co_await s->need();
  if (!i) co_return p9::error(unavailable_prefix + i.ename());
  if (auto st = co_await s->cwd_taken(*i, req.agent); !st) co_return p9::error(p9::valid_utf8(st.ename()));
  // No timeout header: background processes have none (§6.5.1).
  std::string request = "tool=" + req.tool + "\nagent=" + req.agent + "\n";
  if (req.bypass) request += "bypass=true\n";
  if (!req.auth.empty()) request += "auth=" + req.auth + "\n";
  request += "\n" + (req.args.empty() ? std::string("{}") : req.args);
  auto r = co_await s->exchange(*i, "proc/new.bg", std::move(request));
  if (!r) co_return p9::error(p9::valid_utf8(r.ename()));
  // The reply is `pid=<n>\n`.
  const std::string& t = *r;
  const char* const last = t.data() + t.size();
  int pid = 0;
  const auto [after, ec] = std::from_chars(t.data() + std::min<std::size_t>(4, t.size()), last, pid);
  if (t.rfind("pid=", 0) != 0 || ec != std::errc{} || pid <= 0 || std::string_view(after, last - after) != "\n")
    co_return p9::error("bad proc/new.bg reply: " + p9::valid_utf8(t.substr(0, 64)));
  co_return Background{pid, (*i)->number};
}

asio::awaitable<p9::Result<p9::AsyncFid>> ToolHost::open(std::uint64_t instance, std::string path, int mode) {
  auto s = s_;
  auto i = s->current();
  if (!i || i->number != instance) co_return p9::error("tool server lost");
  auto f = co_await i->root->walk(path);
  std::string why;
  if (!f) co_return s->lost(i, f.ename(), why) ? p9::error(lost_prefix + why) : f.error();
  if (mode >= 0)
    if (auto st = co_await f->open(static_cast<std::uint8_t>(mode)); !st)
      co_return s->lost(i, st.ename(), why) ? p9::error(lost_prefix + why) : st.error();
  co_return std::move(*f);
}

bool ToolHost::running() const { return s_->current() != nullptr; }

std::uint64_t ToolHost::live_instance() const {
  auto i = s_->current();
  return i ? i->number : 0;
}

std::string ToolHost::cwd() const {
  std::lock_guard lk(s_->mu);
  return s_->cfg.cwd;
}

std::string ToolHost::forward_addr() const {
  std::lock_guard lk(s_->mu);
  return s_->forward_addr;
}

void ToolHost::stop() {
  Config c;
  {
    std::lock_guard lk(s_->mu);
    s_->ended = true;
    c = s_->cfg;
  }
  s_->stop();
  State::forget_sockets(c);
}

void ToolHost::release() {
  std::shared_ptr<Instance> i;
  std::lock_guard lk(s_->mu);
  i = std::exchange(s_->inst, nullptr);
}

}  // namespace ollie
