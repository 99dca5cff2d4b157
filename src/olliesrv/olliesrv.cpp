#include "olliesrv.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio/post.hpp>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <spdlog/spdlog.h>

#include "firstrun.hpp"
#include "hub.hpp"
#include "identity.hpp"
#include "lifecycle.hpp"
#include "session.hpp"
#include "lib9p/dirs.hpp"
#include "lib9p/iopool.hpp"
#include "lib9p/server.hpp"
#include "namespace.hpp"
#include "virtfs/serve.hpp"

namespace ollie {

namespace {

std::string executable_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<std::size_t>(n));
  return p.substr(0, p.rfind('/'));
}

/// One olliesrv per data directory: two would restore the same sessions and overwrite, or
/// delete, each other's files. An exclusive flock on `<root>/olliesrv.lock`, which holds the
/// owner's pid; the kernel lets go of it when the process ends, however it ends.
p9::Result<int> claim_data_root(const std::string& root) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(root).parent_path(), ec);
  if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST) return p9::error(root + ": " + std::strerror(errno));
  const std::string path = root + "/olliesrv.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return p9::error(path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return p9::error(path + ": " + std::strerror(err));
    std::string owner = n > 0 ? std::string(pid, static_cast<std::size_t>(n)) : "";
    while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' ')) owner.pop_back();
    return p9::error(root + ": in use by another olliesrv" + (owner.empty() ? "" : " (pid " + owner + ")") +
                     ": stop it, or give this one another XDG_DATA_HOME");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    spdlog::warn("{}: cannot record the pid: {}", path, std::strerror(errno));
  return fd;
}

}  // namespace

struct Olliesrv::Impl {
  explicit Impl(Options o) : opt(std::move(o)), pool(opt.threads) {}
  Options opt;
  Bus bus;
  // Before the pool: coroutine frames the pool still holds at its end (turns, tool calls) own
  // agents whose backends use the hub's HTTP engine, so the hub must outlive them.
  std::unique_ptr<Hub> hub;
  p9::IoPool pool;
  std::atomic<bool> stopping = false;
  Identity identity{p9::login_name(), !prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)};
  std::string help;
  std::unique_ptr<p9::Server> server;
  int data_lock = -1;  // claim_data_root's, held until olliesrv is gone
  ~Impl() {
    if (data_lock >= 0) ::close(data_lock);
  }

  // Remote sessions' forwarded sockets (§6.11), each a listener of `server` with its own tag.
  std::mutex fwd_mu;
  std::uint64_t fwd_tags = 0;
  std::map<std::uint64_t, std::string> fwd_session;                  // tag → session id
  std::map<std::string, std::pair<std::uint64_t, std::string>> fwd;  // session id → (tag, path)

  p9::Status listen_forward(const std::string& sid, const std::string& path) {
    std::uint64_t tag;
    {
      std::lock_guard lk(fwd_mu);
      if (auto it = fwd.find(sid); it != fwd.end() && it->second.second == path) return {};
      tag = ++fwd_tags;
      fwd_session[tag] = sid;
    }
    auto a = p9::parse_address("unix!" + path);
    p9::Status st = a ? server->listen(*a, tag) : p9::Status(a.error());
    std::lock_guard lk(fwd_mu);
    if (!st) {
      fwd_session.erase(tag);
      return st;
    }
    fwd[sid] = {tag, path};
    return {};
  }

  void unlisten_forward(const std::string& sid) {
    std::string path;
    {
      std::lock_guard lk(fwd_mu);
      auto it = fwd.find(sid);
      if (it == fwd.end()) return;
      fwd_session.erase(it->second.first);  // its connections now admit no one
      path = it->second.second;
      fwd.erase(it);
    }
    server->unlisten(path);
  }
};

Olliesrv::Olliesrv(Options opt) : impl_(std::make_unique<Impl>(std::move(opt))) {
  if (impl_->opt.addresses.empty()) impl_->opt.addresses.push_back("unix!" + p9::namespace_dir() + "/ollie");
}

Olliesrv::~Olliesrv() {
  shutdown();
  wait();
}

Bus& Olliesrv::bus() { return impl_->bus; }
Hub& Olliesrv::hub() { return *impl_->hub; }
const std::string& Olliesrv::hostowner() const { return impl_->identity.hostowner(); }
const std::string& Olliesrv::help() const { return impl_->help; }

p9::Status Olliesrv::start() {
  auto& m = *impl_;
  const auto env = p9::process_env();
  std::vector<p9::Address> addresses;
  for (auto& text : m.opt.addresses) {
    auto a = p9::parse_address(text);
    if (!a) return a.error();
    if (a->kind == p9::Address::Tcp && !m.opt.insecure_tcp) return p9::error(text + ": tcp needs -insecure-tcp");
    if (a->kind == p9::Address::Unix)  // the namespace directory may be in the shared /tmp (§1.4)
      if (auto st = p9::ensure_private_dir(p9::socket_dir(a->path)); !st) return st;
    addresses.push_back(std::move(*a));
  }
  // Before anything reads the data or listens: a refused second olliesrv leaves no trace.
  auto lock = claim_data_root(p9::data_root(env));
  if (!lock) return lock.error();
  m.data_lock = *lock;
  m.hub = std::make_unique<Hub>(m.bus, p9::data_root(env), p9::config_root(env),
                                m.opt.toolsrv.empty() ? executable_dir() + "/toolsrv" : m.opt.toolsrv, m.pool.contexts());
  m.hub->retry_unit = m.opt.retry_unit;
  m.hub->toolsrv_idle = m.opt.toolsrv_idle;
  m.hub->reload_conf();
  for (const auto& text : m.opt.addresses)
    if (text.rfind("unix!", 0) == 0 && m.hub->addr.empty()) m.hub->addr = text;
  // The agent whose id is `uname` (a principal's: Tauth, Tattach, its root) and its session.
  auto agent_of = [hub = m.hub.get()](const std::string& uname) -> std::pair<std::shared_ptr<Session>, std::shared_ptr<Agent>> {
    for (const auto& s : hub->sessions())
      if (auto a = s->find(uname); a && a->id == uname) return {s, a};
    return {};
  };
  m.identity.agent_key = [agent_of](const std::string& uname) -> std::optional<Identity::AgentKey> {
    auto [s, a] = agent_of(uname);
    if (!a) return std::nullopt;
    return Identity::AgentKey{a->secret, a->subagent ? "subagent" : "agent", s->id};
  };
  m.identity.forwarded_session = [&m](std::uint64_t tag) {
    std::lock_guard lk(m.fwd_mu);
    auto it = m.fwd_session.find(tag);
    return it == m.fwd_session.end() ? std::string() : it->second;
  };
  m.hub->listen_forward = [&m](const std::string& sid, const std::string& path) { return m.listen_forward(sid, path); };
  m.hub->unlisten_forward = [&m](const std::string& sid) { m.unlisten_forward(sid); };
  auto tree = virtfs::build(declare());
  if (!tree) return tree.error();
  m.help = tree->help();
  virtfs::Access<Ctx> access;
  access.hostowner = m.identity.hostowner();
  access.auth = [this](const std::string& u, const std::string& a, const p9::Peer& p) { return impl_->identity.auth(u, a, p); };
  access.attach = [this](const virtfs::AttachRequest& r) { return impl_->identity.attach(r); };
  access.root = [this, agent_of](const virtfs::Principal& who) {
    Ctx c{this, who};
    if (!who.hostowner) c.me = agent_of(who.uname).second;
    return c;
  };
  access.gone = gone;
  p9::ServerOptions sopt;
  if (m.opt.max_connections) sopt.max_connections = *m.opt.max_connections;
  m.server = std::make_unique<p9::Server>(m.pool.contexts(),
                                          std::make_shared<virtfs::Adapter<Ctx>>(std::move(*tree), std::move(access)), sopt);
  if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)
    spdlog::warn("olliesrv runs with no_new_privs: sandboxed tools cannot be told from the user at attach");
  for (std::size_t i = 0; i < addresses.size(); i++) {
    const auto& text = m.opt.addresses[i];
    if (addresses[i].kind == p9::Address::Tcp)
      spdlog::warn("insecure tcp listener {}: any client that connects may attach as the hostowner", text);
    if (auto st = m.server->listen(addresses[i]); !st) return st;
    spdlog::info("listening on {}", text);
  }
  // Restore after the listener is up (§7.7), so callback tools and feed consumers can connect,
  // and before a request is served: a client that connects meanwhile waits in the backlog, and
  // never sees a part of the sessions (a restarted chat would take its agent for gone).
  spdlog::info("restored {} sessions", restore(*m.hub));
  m.pool.start();
  return {};
}

void Olliesrv::shutdown() {
  auto& m = *impl_;
  if (m.stopping.exchange(true)) return;
  spdlog::info("shutting down");
  // Here, not later from another thread: a connection closes after the reply of the request
  // running on it now (root ctl `kill`), which a stop posted from elsewhere could overtake.
  if (m.server) m.server->stop();
  // stop_all waits for the interrupted turns, which run on the I/O threads this may be called
  // from (root ctl `kill`): it runs on the blocking pool, and the I/O threads go after it.
  auto finish = [&m] {
    if (m.hub) {
      stop_all(*m.hub);       // interrupt every turn, save every session, stop every toolsrv
      m.hub->http.shutdown();  // the HTTP loops' sockets and timers are the I/O threads' work too
    }
    m.pool.release();
  };
  if (!m.hub) return finish();
  // The blocking pool may be held by fetches (a model list trickling in for minutes): they end
  // first, or `finish` would wait behind them.
  m.hub->http.stop_fetches();
  asio::post(m.hub->blocking, finish);
}

bool Olliesrv::stopping() const { return impl_->stopping; }

void Olliesrv::wait() {
  impl_->pool.join();
  // A start that failed before the pool ran leaves contexts that never ran: stopped, so the HTTP
  // loops close here rather than in a post that would never run.
  for (auto* io : impl_->pool.contexts()) io->stop();
  // The HTTP loops' sockets and timers belong to the pool's contexts: let go of those a forced
  // stop left before the contexts go.
  if (!impl_->hub) return;
  impl_->hub->http.shutdown();
  // The hub's pools end their work now (a fetch the shutdown failed, a `!` entry the stop
  // killed): each posts its end to a context, which must still exist.
  impl_->hub->blocking.join();
  impl_->hub->commands.join();
  impl_->hub->asks.join();
  // So do the toolsrv clients of the sessions the hub keeps after the contexts.
  for (const auto& s : impl_->hub->sessions()) s->host->release();
}

int run(Options opt) {
  Olliesrv srv(std::move(opt));
  p9::StopSignals signals([&] { srv.shutdown(); });  // before the socket exists
  if (auto st = srv.start(); !st) {
    // A stop signal while the listener was being made (the socket file exists before the
    // listener is registered, and a supervisor may take it for the server being up): a stop.
    if (srv.stopping()) return 0;
    std::fprintf(stderr, "olliesrv: %s\n", st.ename().c_str());
    return 1;
  }
  for (const auto& w : first_run_warnings(srv.hub())) spdlog::warn("{}", w);  // the main thread is free to wait
  srv.wait();
  return 0;
}

}  // namespace ollie
