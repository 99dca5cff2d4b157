#include "olliesrv.hpp"

#include <sys/prctl.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <condition_variable>
#include <spdlog/spdlog.h>
#include <thread>

#include "identity.hpp"
#include "lib9p/server.hpp"
#include "namespace.hpp"
#include "virtfs/serve.hpp"

namespace ollie {

struct Olliesrv::Impl {
  Options opt;
  // One io_context per thread: a connection lives on one thread, so its requests never wait
  // for a wake-up of another.
  std::vector<std::unique_ptr<asio::io_context>> ios;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work;
  Bus bus;
  Identity identity{p9::login_name(), !prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)};
  std::string help;
  std::unique_ptr<p9::Server> server;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv;
  bool shut = false;
};

Olliesrv::Olliesrv(Options opt) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(opt);
  if (impl_->opt.addresses.empty()) impl_->opt.addresses.push_back("unix!" + p9::namespace_dir() + "/ollie");
}

Olliesrv::~Olliesrv() {
  shutdown();
  wait();
}

Bus& Olliesrv::bus() { return impl_->bus; }
const std::string& Olliesrv::hostowner() const { return impl_->identity.hostowner(); }
const std::string& Olliesrv::help() const { return impl_->help; }

p9::Status Olliesrv::start() {
  auto& m = *impl_;
  auto tree = virtfs::build(declare());
  if (!tree) return tree.error();
  m.help = tree->help();
  virtfs::Access<Ctx> access;
  access.hostowner = m.identity.hostowner();
  access.auth = [this](const std::string& u, const std::string& a) { return impl_->identity.auth(u, a); };
  access.attach = [this](const virtfs::AttachRequest& r) { return impl_->identity.attach(r); };
  access.root = [this](const virtfs::Principal& who) { return Ctx{this, who}; };
  unsigned n = m.opt.threads ? m.opt.threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<asio::io_context*> ios;
  for (unsigned i = 0; i < n; i++) {
    m.ios.push_back(std::make_unique<asio::io_context>(1));
    m.work.push_back(asio::make_work_guard(*m.ios.back()));
    ios.push_back(m.ios.back().get());
  }
  m.server = std::make_unique<p9::Server>(ios, std::make_shared<virtfs::Adapter<Ctx>>(std::move(*tree), std::move(access)));
  if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)
    spdlog::warn("olliesrv runs with no_new_privs: sandboxed tools cannot be told from the user at attach");
  for (auto& text : m.opt.addresses) {
    auto a = p9::parse_address(text);
    if (!a) return a.error();
    if (a->kind == p9::Address::Tcp) {
      if (!m.opt.insecure_tcp) return p9::error(text + ": tcp needs -insecure-tcp");
      spdlog::warn("insecure tcp listener {}: any client that connects may attach as the hostowner", text);
    }
    if (auto st = m.server->listen(*a); !st) return st;
    spdlog::info("listening on {}", text);
  }
  for (auto& io : m.ios) m.threads.emplace_back([io = io.get()] { io->run(); });
  return {};
}

void Olliesrv::shutdown() {
  auto& m = *impl_;
  {
    std::lock_guard lk(m.mu);
    if (m.shut) return;
    m.shut = true;
  }
  spdlog::info("shutting down");
  if (m.server) m.server->stop();
  for (auto& w : m.work) w.reset();
  m.cv.notify_all();
}

void Olliesrv::wait() {
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
  Olliesrv srv(std::move(opt));
  if (auto st = srv.start(); !st) {
    spdlog::error("{}", st.ename());
    std::fprintf(stderr, "olliesrv: %s\n", st.ename().c_str());
    return 1;
  }
  // Signals are taken on a thread of their own so they never wait behind the io threads.
  asio::io_context sigio;
  asio::signal_set signals(sigio, SIGINT, SIGTERM);
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

}  // namespace ollie
