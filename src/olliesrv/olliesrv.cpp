#include "olliesrv.hpp"

#include <sys/prctl.h>

#include <atomic>
#include <spdlog/spdlog.h>

#include "identity.hpp"
#include "lib9p/dirs.hpp"
#include "lib9p/iopool.hpp"
#include "lib9p/server.hpp"
#include "namespace.hpp"
#include "virtfs/serve.hpp"

namespace ollie {

struct Olliesrv::Impl {
  explicit Impl(Options o) : opt(std::move(o)), pool(opt.threads) {}
  Options opt;
  p9::IoPool pool;
  std::atomic<bool> stopping = false;
  Bus bus;
  Identity identity{p9::login_name(), !prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)};
  std::string help;
  std::unique_ptr<p9::Server> server;
};

Olliesrv::Olliesrv(Options opt) : impl_(std::make_unique<Impl>(std::move(opt))) {
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
  p9::ServerOptions sopt;
  if (m.opt.max_connections) sopt.max_connections = *m.opt.max_connections;
  m.server = std::make_unique<p9::Server>(m.pool.contexts(),
                                          std::make_shared<virtfs::Adapter<Ctx>>(std::move(*tree), std::move(access)), sopt);
  if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)
    spdlog::warn("olliesrv runs with no_new_privs: sandboxed tools cannot be told from the user at attach");
  for (auto& text : m.opt.addresses) {
    auto a = p9::parse_address(text);
    if (!a) return a.error();
    if (a->kind == p9::Address::Tcp) {
      if (!m.opt.insecure_tcp) return p9::error(text + ": tcp needs -insecure-tcp");
      spdlog::warn("insecure tcp listener {}: any client that connects may attach as the hostowner", text);
    }
    if (a->kind == p9::Address::Unix)  // the namespace directory may be in the shared /tmp (§1.4)
      if (auto st = p9::ensure_private_dir(p9::socket_dir(a->path)); !st) return st;
    if (auto st = m.server->listen(*a); !st) return st;
    spdlog::info("listening on {}", text);
  }
  m.pool.start();
  return {};
}

void Olliesrv::shutdown() {
  auto& m = *impl_;
  if (m.stopping.exchange(true)) return;
  spdlog::info("shutting down");
  if (m.server) m.server->stop();
  m.pool.release();
}

void Olliesrv::wait() { impl_->pool.join(); }

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
