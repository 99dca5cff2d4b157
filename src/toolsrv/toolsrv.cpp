#include "toolsrv/toolsrv.hpp"

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <spdlog/spdlog.h>

#include "lib9p/dial.hpp"
#include "lib9p/dirs.hpp"
#include "lib9p/iopool.hpp"
#include "lib9p/server.hpp"
#include "toolsrv/auth.hpp"
#include "toolsrv/namespace.hpp"
#include "toolsrv/paths.hpp"
#include "toolsrv/session.hpp"
#include "virtfs/serve.hpp"

namespace toolsrv {

struct Toolsrv::Impl {
  explicit Impl(Options o) : opt(std::move(o)), pool(opt.threads) {}
  // Destroyed in reverse order: the server (no more connection callbacks), the lifecycle, the
  // io contexts (the frames of handlers that never resumed: their calls are cancelled), and last
  // the session, which those cancellations still reach and which kills every process group.
  Options opt;
  std::unique_ptr<Session> session;
  p9::IoPool pool;
  std::atomic<bool> stopping = false;
  std::unique_ptr<Lifecycle> lifecycle;
  std::unique_ptr<p9::Server> server;

  p9::Result<virtfs::Principal> attach(const virtfs::AttachRequest& r);
};

p9::Result<virtfs::Principal> Toolsrv::Impl::attach(const virtfs::AttachRequest& r) {
  if (auto st = check_secret(opt.secret, r.has_afid, r.secret); !st) {
    spdlog::warn("attach refused (uname {}, pid {}): {}", r.uname, r.peer.pid, st.ename());
    return st.error();
  }
  lifecycle->attached();
  return virtfs::Principal{r.uname, "", true};
}

Toolsrv::Toolsrv(Options opt) : impl_(std::make_unique<Impl>(std::move(opt))) {}

Toolsrv::~Toolsrv() {
  shutdown();
  wait();
}

p9::Status Toolsrv::start() {
  auto& m = *impl_;
  auto addr = p9::parse_address(m.opt.address);
  if (!addr) return addr.error();
  if (addr->kind != p9::Address::Unix) return p9::error(m.opt.address + ": toolsrv listens on a unix socket only");
  if (auto st = p9::ensure_runtime_dir(p9::socket_dir(addr->path)); !st) return st;

  m.session = std::make_unique<Session>(SessionConfig::from_environment(m.opt.config_root, m.opt.cwd, m.opt.bin_path));
  if (auto st = m.session->set_cwd(m.opt.cwd); !st) return st;

  auto tree = virtfs::build(declare());
  if (!tree) return tree.error();
  virtfs::Access<Ctx> access;
  access.hostowner = p9::login_name();
  // One principal (olliesrv): every Tauth gets an auth fid, whatever its uname.
  access.auth = [](const std::string&, const std::string&, const p9::Peer&) { return p9::Status{}; };
  access.attach = [&m](const virtfs::AttachRequest& r) { return m.attach(r); };
  access.root = [&m](const virtfs::Principal&) { return Ctx{m.session.get(), nullptr}; };

  m.lifecycle = std::make_unique<Lifecycle>(m.opt.startup_grace, m.opt.idle_timeout, [this] { shutdown(); });
  p9::ServerOptions sopt;
  sopt.on_connections = [&m](std::size_t open) { m.lifecycle->connections(open); };
  sopt.max_connections = 8;  // one client (olliesrv), with room for its reconnects
  m.server = std::make_unique<p9::Server>(m.pool.contexts(), std::make_shared<virtfs::Adapter<Ctx>>(std::move(*tree), std::move(access)), sopt);
  if (auto st = m.server->listen(*addr); !st) return st;
  spdlog::info("listening on {}", m.opt.address);
  m.pool.start();
  return {};
}

void Toolsrv::shutdown() {
  auto& m = *impl_;
  if (m.stopping.exchange(true)) return;
  spdlog::info("shutting down");
  if (m.session) m.session->processes().kill_all();
  if (m.server) m.server->stop();
  m.pool.release();
}

void Toolsrv::wait() { impl_->pool.join(); }

namespace {

/// A toolsrv run by hand (no OLLIE_SESSION_ID) made its TMPDIR, `pid-<pid>`, for itself alone:
/// no session kill removes it, so it goes when toolsrv does. A session's stays for its next toolsrv.
struct OwnTmpdir {
  SessionConfig c;
  ~OwnTmpdir() {
    if (c.session_id.rfind("pid-", 0) != 0) return;
    std::error_code ec;
    std::filesystem::remove_all(c.tmpdir, ec);
  }
};

}  // namespace

int run(Options opt) {
  ::signal(SIGPIPE, SIG_IGN);
  OwnTmpdir tmp{SessionConfig::from_environment(opt.config_root, opt.cwd, opt.bin_path)};
  Toolsrv srv(std::move(opt));
  p9::StopSignals signals([&] { srv.shutdown(); });  // before the socket exists
  if (auto st = srv.start(); !st) {
    spdlog::error("{}", st.ename());
    std::fprintf(stderr, "toolsrv: %s\n", st.ename().c_str());
    return 1;
  }
  srv.wait();
  return 0;
}

}  // namespace toolsrv
