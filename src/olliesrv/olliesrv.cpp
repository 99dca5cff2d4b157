#include "olliesrv.hpp"

#include <sys/prctl.h>

#include <condition_variable>
#include <spdlog/spdlog.h>

#include "identity.hpp"
#include "lib9p/iopool.hpp"
#include "lib9p/server.hpp"
#include "namespace.hpp"
#include "virtfs/serve.hpp"

namespace ollie {

struct Olliesrv::Impl {
  Options opt;
  std::unique_ptr<p9::IoPool> pool;
  Bus bus;
  Identity identity{p9::login_name(), !prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)};
  std::string help;
  std::unique_ptr<p9::Server> server;
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
  m.pool = std::make_unique<p9::IoPool>(m.opt.threads);
  m.server = std::make_unique<p9::Server>(m.pool->contexts(),
                                          std::make_shared<virtfs::Adapter<Ctx>>(std::move(*tree), std::move(access)));
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
  m.pool->start();
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
  if (m.pool) m.pool->release();
  m.cv.notify_all();
}

void Olliesrv::wait() {
  auto& m = *impl_;
  {
    std::unique_lock lk(m.mu);
    m.cv.wait(lk, [&] { return m.shut; });
  }
  if (m.pool) m.pool->join();
}

int run(Options opt) {
  Olliesrv srv(std::move(opt));
  p9::StopSignals signals([&] { srv.shutdown(); });  // before the socket exists
  if (auto st = srv.start(); !st) {
    spdlog::error("{}", st.ename());
    std::fprintf(stderr, "olliesrv: %s\n", st.ename().c_str());
    return 1;
  }
  srv.wait();
  return 0;
}

}  // namespace ollie
