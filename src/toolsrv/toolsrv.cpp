#include "toolsrv/toolsrv.hpp"

#include <signal.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <spdlog/spdlog.h>
#include <thread>
#include <vector>

#include "lib9p/dial.hpp"
#include "lib9p/server.hpp"
#include "toolsrv/auth.hpp"
#include "toolsrv/namespace.hpp"
#include "toolsrv/paths.hpp"
#include "virtfs/serve.hpp"

namespace toolsrv {

struct Toolsrv::Impl {
  Options opt;
  // Declared first, destroyed last: handlers and cancelled calls still reach it while the io
  // contexts are torn down.
  std::unique_ptr<Session> session;
  std::vector<std::unique_ptr<asio::io_context>> ios;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::unique_ptr<Lifecycle> lifecycle;
  std::unique_ptr<p9::Server> server;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv;
  bool shut = false;

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

Toolsrv::Toolsrv(Options opt) : impl_(std::make_unique<Impl>()) { impl_->opt = std::move(opt); }

Toolsrv::~Toolsrv() {
  shutdown();
  wait();
  auto& m = *impl_;
  m.lifecycle.reset();
  m.server.reset();
  m.ios.clear();  // destroys the frames of handlers that never resumed: their calls are cancelled
  m.session.reset();  // kills every process group still running
}

p9::Status Toolsrv::start() {
  auto& m = *impl_;
  auto addr = p9::parse_address(m.opt.address);
  if (!addr) return addr.error();
  if (addr->kind != p9::Address::Unix) return p9::error(m.opt.address + ": toolsrv listens on a unix socket only");
  const auto slash = addr->path.rfind('/');
  if (slash == std::string::npos || slash == 0) return p9::error(addr->path + ": socket must be in a private directory");
  if (auto st = ensure_private_dir(addr->path.substr(0, slash)); !st) return st;

  m.session = std::make_unique<Session>(SessionConfig::from_environment(m.opt.config_root, m.opt.cwd, m.opt.bin_path));
  if (auto st = m.session->set_cwd(m.opt.cwd); !st) return st;

  auto tree = virtfs::build(declare());
  if (!tree) return tree.error();
  virtfs::Access<Ctx> access;
  access.hostowner = p9::login_name();
  // One principal (olliesrv): every Tauth gets an auth fid, whatever its uname.
  access.auth = [](const std::string&, const std::string&) { return p9::Status{}; };
  access.attach = [&m](const virtfs::AttachRequest& r) { return m.attach(r); };
  access.root = [&m](const virtfs::Principal&) { return Ctx{m.session.get(), nullptr}; };

  m.lifecycle = std::make_unique<Lifecycle>(m.opt.startup_grace, m.opt.idle_timeout, [this] { shutdown(); });
  p9::ServerOptions sopt;
  sopt.on_connections = [&m](std::size_t open) { m.lifecycle->connections(open); };
  std::vector<asio::io_context*> ios;
  for (unsigned i = 0; i < std::max(1u, m.opt.threads); i++) {
    m.ios.push_back(std::make_unique<asio::io_context>(1));
    m.work.push_back(asio::make_work_guard(*m.ios.back()));
    ios.push_back(m.ios.back().get());
  }
  m.server = std::make_unique<p9::Server>(ios, std::make_shared<virtfs::Adapter<Ctx>>(std::move(*tree), std::move(access)), sopt);
  if (auto st = m.server->listen(*addr); !st) return st;
  spdlog::info("listening on {}", m.opt.address);
  for (auto& io : m.ios) m.threads.emplace_back([io = io.get()] { io->run(); });
  return {};
}

void Toolsrv::shutdown() {
  auto& m = *impl_;
  {
    std::lock_guard lk(m.mu);
    if (m.shut) return;
    m.shut = true;
  }
  spdlog::info("shutting down");
  if (m.session) m.session->processes().kill_all();
  if (m.server) m.server->stop();
  for (auto& w : m.work) w.reset();
  m.cv.notify_all();
}

void Toolsrv::wait() {
  auto& m = *impl_;
  {
    std::unique_lock lk(m.mu);
    m.cv.wait(lk, [&] { return m.shut; });
  }
  // The io threads end once every connection has closed; a handler that ignores cancellation
  // must not keep the process alive.
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lk(m.mu);
    if (!m.cv.wait_for(lk, std::chrono::seconds(3), [&] { return done; })) {
      spdlog::warn("connections still busy after 3 s: stopping anyway");
      for (auto& io : m.ios) io->stop();
    }
  });
  for (auto& t : m.threads)
    if (t.joinable()) t.join();
  {
    std::lock_guard lk(m.mu);
    done = true;
  }
  m.cv.notify_all();
  watchdog.join();
}

int run(Options opt) {
  ::signal(SIGPIPE, SIG_IGN);
  // Signals are taken on a thread of their own so they never wait behind the io threads.
  asio::io_context sigio;
  asio::signal_set signals(sigio, SIGINT, SIGTERM);
  Toolsrv srv(std::move(opt));
  if (auto st = srv.start(); !st) {
    spdlog::error("{}", st.ename());
    std::fprintf(stderr, "toolsrv: %s\n", st.ename().c_str());
    return 1;
  }
  signals.async_wait([&](std::error_code ec, int sig) {
    if (!ec) spdlog::info("signal {}", sig);
    srv.shutdown();
  });
  std::thread sigthread([&] { sigio.run(); });
  srv.wait();
  sigio.stop();
  sigthread.join();
  return 0;
}

}  // namespace toolsrv
